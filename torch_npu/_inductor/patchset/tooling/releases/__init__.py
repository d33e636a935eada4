"""The released torch_npu wheels, as the patch set meets them: ``wheels`` (a release's, or a source
checkout's, Inductor code loaded with stand-ins for the NPU), ``wheel_harness`` (every sample
launcher rendered through its real classes, JIT or aot_mode, before and after the patch set),
``real_artifacts`` / ``aot_artifacts`` / ``launchers`` (compiled against the wheel's headers and
linked with ``--no-undefined`` against its ``libtorch_npu.so``), ``rendered`` / ``aot_sim`` (the
rendered launchers in the host simulation), ``release_matrix`` (every release line:
``docs/release-matrix.md``), ``elf`` / ``wheel_needs`` (what a wheel's binaries ask of CANN) and
``host_runtime`` (a wheel, whole and unchanged, imported in a subprocess over the host ACL library, a
test double of CANN), and ``cpp_tests`` (the launch helper's C++ unit tests run there on the wheel's own
runtime). Imports only ``sim``.
"""
