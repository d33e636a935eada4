"""Tooling and test support for the patch set; never imported by the runtime.

Nothing under this package runs when torch, torch_npu or the patch set's autoload entry point is
imported: it is used by the tests, by ``.ci/`` scripts and by hand. Four rooms; imports go one way,
from a room to the rooms listed after it (``test/test_tooling_imports.py`` fails on a circle, and on
an import against that direction):

* ``commands/``: what a user runs: ``demo`` (``.ci/demo``), ``selftest``, ``launcher`` (the
  ``python -m torch_npu._inductor.patchset`` subcommands).
* ``upstream/``: the fix as a source patch to torch_npu itself (``upstream-patch``), and its proof
  on every protected branch (``.ci/upstream-patches``).
* ``releases/``: the released torch_npu wheels: their Inductor code loaded with stand-ins
  (``wheels``), rendered through their real classes (``wheel_harness``), compiled and linked
  against their real headers and libraries (``real_artifacts``, ``aot_artifacts``), run in the
  simulation (``rendered``, ``aot_sim``) and on their own runtime with the scenarios (``real_runtime``), and
  every line at once (``release_matrix``).
* ``sim/``: the host ACL simulation (``acl_sim/``, C++; a TEST DOUBLE and dry-run tool, not an
  NPU runtime), its builds (``build``), the launch harness (``harness``), and the
  sample kernels everything above runs (``samples``).

Every room uses the runtime (``launch_plan``, ``launch_codegen``, ``csrc/``); the runtime uses none.
"""
