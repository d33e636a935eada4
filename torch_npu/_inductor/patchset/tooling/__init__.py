"""Tooling and test support for the patch set; never imported by the runtime.

Nothing under this package runs when torch, torch_npu or the patch set's
autoload entry point is imported: it is used by the tests, by ``.ci/`` scripts
and by hand (``python -m torch_npu._inductor.patchset.tooling.real_artifacts``).
"""
