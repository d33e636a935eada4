"""The host ACL simulation and its builds: a TEST DOUBLE and dry-run tool, not an NPU runtime.

``acl_sim/`` (C++: the ACL subset the launchers call, torch_npu's allocators and task queue as their
source shows them, the probe kernel), ``build`` (programs and libraries against it, cached),
``harness`` (a launcher built into a program that launches it as torch_npu's wrapper does, the judge
of what each launch got, the capture / thread scenarios), ``samples`` (representative kernel
metadata). Imports nothing from the other tooling rooms.
"""
