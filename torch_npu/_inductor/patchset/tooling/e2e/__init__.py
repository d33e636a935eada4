"""The user's own job, end to end, without an NPU (issue 40).

``torch.compile(flex_attention, dynamic=True, options={"cpp_wrapper": True})`` on ``npu`` tensors,
forward and backward, through a released torch_npu's own Inductor backend and triton-ascend's own
front end, its C++ wrapper built and run on the wheel's own runtime over the host ACL library.
Every stand-in on that path is listed, with what it replaces, in :mod:`.stand_ins`.

    tier.run_job(release, patched=..., one_pass=..., case=...) -> dict    one child process, its verdict
    flex_job.py                                                           the child: the user's job, one case
    matrix.py                                                             the cases users run; each one's verdict
    executor.py, exact.py                                                 the kernels run, exactly or refused

Imports ``releases`` (the wheel, its host ACL library) and ``sim``.
"""
