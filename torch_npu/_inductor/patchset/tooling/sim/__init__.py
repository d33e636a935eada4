"""The host ACL simulation and its builds: a TEST DOUBLE and dry-run tool, not an NPU runtime.

``acl_sim/`` (C++: the ACL subset the launchers call, the probe kernel, and the few torch_npu
stand-ins still used, its task queue and allocators, kept because ``harness.simulate`` runs with no
wheel and no torch; which remain, who uses them and what retiring them takes: ``acl_sim/README.md``),
``build`` (programs and libraries against it, cached),
``harness`` (a launcher built into a program that launches it as torch_npu's wrapper does, the judge
of what each launch got), ``samples`` (representative kernel
metadata), ``host_library`` (the host ACL library: acl_sim plus ``acl_sim/host/``, built against a
released wheel's own CANN headers into a ``libascendcl.so`` that the wheel's binaries load unchanged,
in a test's subprocess only; a test double of CANN, never in a user's process: ``acl_sim/host/README.md``).
Imports nothing from the other tooling rooms.
"""
