"""cpp-wrapper-lazy-backward-config: a backward compiled at its first call gets the C++ wrapper's Triton settings.

The probe on this interpreter's torch (2.7.1: needed; 2.14: upstream-has-fix, pytorch/pytorch#178847), the wrapper's
effect on what ``_compile_fx_inner`` sees, and the rollback. End to end, the matrix's static case
(test_flex_matrix.py) runs with it and stops at ``CudaKernelParamCache not populated`` without it.
"""
from __future__ import annotations

import types

import torch
import torch._inductor.compile_fx as real_fx
from torch._inductor import config

from torch_npu._inductor.patchset._patching import NEEDED, UPSTREAM_HAS_FIX, Patcher
from torch_npu._inductor.patchset.fixes import cpp_wrapper_lazy_backward_config as fix

MODULE = fix.MODULE


def test_the_probe_reads_this_torch():
    verdict = fix.probe({MODULE: real_fx})
    if torch.__version__.startswith("2.7.1"):
        # the test process armed the patch set at `import torch`: the module carries it already
        assert verdict.verdict == NEEDED and ("backward compiled at its first call" in verdict.reason
                                              or "already carries this patch's settings" in verdict.reason), verdict
        assert fix.probe({MODULE: types.SimpleNamespace(**{**vars(real_fx), fix.TARGET: getattr(
            real_fx._compile_fx_inner, "__wrapped__", real_fx._compile_fx_inner)})}).reason.endswith("outside of")
    else:  # torch 2.14 applies the settings in compile_fx_inner itself
        assert verdict.verdict == UPSTREAM_HAS_FIX and "get_cpp_wrapper_config itself" in verdict.reason, verdict


def _shaped_like_271(seen: list):
    """A module shaped as torch 2.7.1's compile_fx: compile_fx_inner hands the graph to _compile_fx_inner by name."""
    module = types.ModuleType("fake_compile_fx")
    exec(  # noqa: S102 - a module's source, so that the probe reads it as it reads torch's
        "def compile_fx_inner(gm, example_inputs, **kwargs):\n"
        "    return wrap(_compile_fx_inner)(gm, example_inputs, **kwargs)\n", module.__dict__)
    module.wrap = lambda f: f
    module._compile_fx_inner = lambda gm, example_inputs, **kw: seen.append(
        (kw.get("cpp_wrapper"), config.triton.store_cubin, config.triton.autotune_at_compile_time))
    module.get_cpp_wrapper_config = real_fx.get_cpp_wrapper_config
    module.config = config
    return module


def test_every_cpp_wrapper_compile_runs_under_the_settings_and_rolls_back(monkeypatch):
    seen: list = []
    module = _shaped_like_271(seen)
    monkeypatch.setattr(fix, "source_of", lambda obj: "return wrap(_compile_fx_inner)(gm, example_inputs, **kwargs)"
                        if obj is module.compile_fx_inner else "")
    modules = {MODULE: module}
    assert fix.probe(modules).verdict == NEEDED
    assert (config.triton.store_cubin, config.cpp_wrapper) == (False, False)  # as outside compile_fx's context
    shipped = module._compile_fx_inner
    patcher = Patcher()
    note = fix.apply(modules, patcher)
    assert note.endswith("every cpp_wrapper compile runs under get_cpp_wrapper_config()")
    module.compile_fx_inner(None, [], cpp_wrapper=True)  # a lazily compiled backward's call
    module.compile_fx_inner(None, [], cpp_wrapper=False)
    assert seen[0][:2] == (True, True) and seen[0][2] is not None, seen  # store_cubin on, autotune decided
    assert seen[1] == (False, False, config.triton.autotune_at_compile_time), seen  # untouched
    assert config.triton.store_cubin is False  # the settings end with the compile
    with config.patch({"triton.autotune_at_compile_time": False}):  # a user's explicit choice is kept
        module.compile_fx_inner(None, [], cpp_wrapper=True)
    assert seen[2] == (True, True, False), seen
    assert "already carries" in fix.probe(modules).reason and fix.apply(modules, Patcher()).startswith("nothing")
    patcher.rollback()
    assert module._compile_fx_inner is shipped


def test_a_compile_fx_inner_of_another_shape_is_not_guessed_about(monkeypatch):
    module = _shaped_like_271([])
    monkeypatch.setattr(fix, "source_of", lambda obj: "return something_else(gm)")
    verdict = fix.probe({MODULE: module})
    assert verdict.verdict not in (NEEDED, UPSTREAM_HAS_FIX) and "does not hand its graph to" in verdict.reason
