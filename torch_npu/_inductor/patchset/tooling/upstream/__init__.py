"""The fix as a source patch to torch_npu (``upstream-patch``): ``patch`` (one git-format patch per
checkout or branch), ``edits`` (the edits in upstream's own files), ``module`` (the Python module the
patch adds, cut from ``launch_plan`` / ``launch_codegen``), ``test_text`` (the test it adds),
``verify`` and ``matrix`` (the proof on every protected branch: ``docs/upstream-patches.md``),
``cli``. Imports ``releases`` and ``sim``.
"""
