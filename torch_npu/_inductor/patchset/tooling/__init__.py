"""Verification tooling for the patch set (docs/verification.md): in a checkout only, never in a user's wheel.

Nothing under this package runs when torch, torch_npu or the patch set's autoload entry point is imported,
and ``pip install .`` leaves it out; the runtime reaches it only from a command that hands a subcommand or a
check over lazily (``cli.py``, ``selftest.py``, after ``_tooling.installed()``). It is used by the tests, by
``.ci/`` scripts and by hand. Five rooms; imports go one way, from a room to the rooms listed after it
(``test/test_tooling_imports.py`` fails on a circle, and on an import against that direction):

* ``commands/``: what a maintainer runs from a checkout: ``demo`` (``.ci/demo``), ``launcher``,
  ``status_against`` (``status --against-wheel/--against-source``) and ``selftest_launchers`` (the
  selftest's checks on the sample launchers; the selftest itself is the runtime's, ``selftest.py``).
* ``e2e/``: the end-to-end tier: the user's Flex Attention job compiled by a released wheel's own Inductor
  backend and run on its runtime over the host ACL library (its stand-ins: ``e2e/stand_ins.py``).
* ``upstream/``: the fix as a source patch to torch_npu itself (``upstream-patch``), and its proof
  on every protected branch (``.ci/upstream-patches``).
* ``releases/``: the released torch_npu wheels: fetched, rendered through their real classes, compiled and
  linked against their headers and ``libtorch_npu.so``, run on their own runtime over the host ACL library
  (the real-runtime tier, its scenarios and mutants, the helper's C++ tests, the benchmark), and every line
  at once (``release_matrix``: docs/release-matrix.md).
* ``sim/``: ``acl_sim/`` (C++: the ACL core, the host ACL library's additions, the torch_npu stand-ins
  still used), its builds (``build``, ``host_library``), the launch harness (``harness``), the sample
  kernels every tier runs (``samples``), the whole-launcher writer and the sizes and fills the tests expect
  (``launcher_writer``, ``expected_memory``).

The README's Layout block names every module of every room (``test/test_docs_layout.py``).
"""
