"""The host ACL simulation and its builds: a TEST DOUBLE and dry-run tool, not an NPU runtime.

``acl_sim/`` (C++: the ACL subset the launchers call, the probe kernel, and the few torch_npu
stand-ins still used, its task queue and allocators, kept for the release matrix's simulation columns
and ``upstream/verify.py`` (``harness.harness_source``); which remain, who uses them and what retiring them takes: ``acl_sim/README.md``),
``build`` (programs and libraries against it, cached),
``harness`` (what a launch needs and the judge's rules; a launcher built into a program over the
stand-ins, for the release matrix), ``samples`` (representative kernel
metadata), ``host_library`` (the host ACL library: acl_sim plus ``acl_sim/host/``, built against a
released wheel's own CANN headers into a ``libascendcl.so`` that the wheel's binaries load unchanged,
in a test's subprocess only; a test double of CANN, never in a user's process: ``acl_sim/host/README.md``).
Imports nothing from the other tooling rooms.
"""
