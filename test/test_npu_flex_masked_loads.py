"""npu-flex-attention-masked-loads: the masked loads of torch_npu's own Flex Attention templates (the backward's
2-D loads, the forward's block-pointer loads).

(a) The pure edit (``masked_loads``) on the real template texts of every release that carries the lines, and the
    reading of those that do not; the probe and apply on the real modules of released wheels (in a child behind
    the wheel stand-ins), and their mechanics in this process on a module holding a wheel's real texts.
(b) triton-ascend's own front end (3.2.0, the tier's) on a kernel made of the template's lines (its
    ``load_checked_2d`` helper, the pointer line, the load line and the transpose after it): as shipped it refuses
    to compile with ``IS_DIVISIBLE`` or ``SAFE_HEAD_DIM`` false, corrected it compiles.
(c) The same kernels in triton-ascend's interpreter on a small [N, D] tensor whose block side equals the rounded
    head size (16): as shipped the load masks the wrong axis (exactly the other axis' mask), corrected it is the
    masked load, element for element.
(d) The forward's ``K_block_ptr`` load in triton-ascend's interpreter, made of the template's own lines (its
    ``load_checked_block`` helper, the ``tl.make_block_ptr`` statement, the load line) over a [KV_LEN, D] tensor
    followed by more memory: as shipped, a ragged last key block reads past the tensor's end and a head of 12
    reads the next key's values; corrected, neither.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from torch_npu._inductor.patchset import _applier, _declarations, masked_loads
from torch_npu._inductor.patchset._patching import NEEDED, UNRECOGNISED, UPSTREAM_HAS_FIX, Patcher
from torch_npu._inductor.patchset.fixes import npu_flex_masked_loads as fix

PATCH_ID = "npu-flex-attention-masked-loads"
MODULE = "torch_npu._inductor.kernel.flex_attention"
TEMPLATE = "flex_attention_backward_template"
FORWARD = "flex_attention_template"
#: Every release whose backward template carries the [N, D] pointers loaded with torch's [D, N] arguments, and whose
#: forward template loads its [head, sequence] K block with the flags of a [sequence, head] one.
CARRIERS = ("2.7.1.post4", "2.7.1.post6", "2.7.1.post8", "2.7.1.post10", "2.9.0.post9")
#: The three loads as they must read after the edit: each pair of arguments in its pointers' order.
CORRECTED = {
    "kT": "kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, QK_HEAD_DIM)",
    "vT": "vT = load_checked_2d(vT_ptrs, offs_n2, offs_v, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, V_HEAD_DIM)",
    "qT": "qT = load_checked_2d(qT_ptrs, offs_m1, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, Q_LEN, QK_HEAD_DIM)",
}
SHIPPED_K = "k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)"
CORRECTED_K = "k = load_checked_block(K_block_ptr, SAFE_HEAD_DIM, IS_DIVISIBLE)"
#: The forward's K load, in the module: 2.7.1.post4 .. post10, then 2.9.0.post9.
FORWARD_K_LINE = {"2.7.1.post4": 528, "2.7.1.post6": 528, "2.7.1.post8": 528, "2.7.1.post10": 528, "2.9.0.post9": 537}
IS_271 = torch.__version__.startswith("2.7.1")
needs_271 = pytest.mark.skipif(not IS_271, reason="torch_npu 2.7.1's Inductor code and the tier's triton-ascend run "
                                                  "on the 2.7.1 leg")


def fetched(release: str):
    """The folder holding ``release``'s ``torch_npu/_inductor/`` (its wheel's Python files, fetched and extracted
    once). Only an unreachable package index skips."""
    from torch_npu._inductor.patchset.tooling.releases import wheels

    try:
        return wheels.extracted_tree(release)
    except wheels.WheelUnavailable as exc:
        if exc.index_unreachable:
            pytest.skip(f"package index unreachable: {exc}")
        raise


def kernel_file(release: str, name: str = "flex_attention.py") -> str:
    """``torch_npu/_inductor/kernel/<name>`` of ``release``'s wheel."""
    return (fetched(release) / "torch_npu" / "_inductor" / "kernel" / name).read_text()


@functools.lru_cache(maxsize=None)
def shipped(release: str, name: str = TEMPLATE) -> masked_loads.Source:
    source = masked_loads.template_source(kernel_file(release), name)
    assert source.kind == "inline", (release, name, source)
    return source


# ---- (a) the edit on the real texts ------------------------------------------------------------------------------
@pytest.mark.parametrize("release", CARRIERS)
def test_the_edit_on_each_carrying_release(release):
    module_text, source = kernel_file(release), shipped(release)
    reading = masked_loads.read(source.text, source.first_line)
    assert reading.shape == masked_loads.SWAPPED, reading
    assert [ld.target for ld in reading.swapped] == ["kT", "vT", "qT"]
    # the fourth pointer-only load (do, [M, D] both in its pointers and its mask) is left as it is
    assert [(ld.target, ld.state) for ld in reading.loads if ld.state != masked_loads.SWAPPED] == [
        ("do", masked_loads.CONSISTENT)]
    # the lines named are the module's own lines of those loads
    file_lines = module_text.splitlines()
    for ld in reading.swapped:
        shown = int(re.search(rf"{ld.target} \(line (\d+)\)", reading.detail).group(1))
        assert file_lines[shown - 1] == source.text.splitlines()[ld.line - 1]
        assert file_lines[shown - 1].lstrip().startswith(f"{ld.target} = load_checked_2d({ld.target}_ptrs, offs_")
    fixed = masked_loads.corrected(source.text)
    before, after = source.text.splitlines(keepends=True), fixed.splitlines(keepends=True)
    assert len(before) == len(after)
    changed = {i: (b, a) for i, (b, a) in enumerate(zip(before, after)) if b != a}
    assert sorted(changed) == [ld.line - 1 for ld in reading.swapped]
    for (b, a), ld in zip((changed[i] for i in sorted(changed)), reading.swapped):
        assert a.strip() == CORRECTED[ld.target]
        assert a[: len(a) - len(a.lstrip())] == b[: len(b) - len(b.lstrip())] and a.endswith("\n")
    assert masked_loads.read(fixed).shape == masked_loads.CONSISTENT
    with pytest.raises(masked_loads.UnrecognisedTemplate, match="no load to correct: the text is consistent"):
        masked_loads.corrected(fixed)


#: The backward's index lines of the other operand, bounded only at the boundary block, as shipped.
UNBOUNDED = ("n = get_bounded_indices(offs_n2[None, :], KV_LEN if CHECK_BLOCK_BOUNDARY else None)",
             "m = get_bounded_indices(offs_m1[None, :], Q_LEN if CHECK_BLOCK_BOUNDARY else None)")


@pytest.mark.parametrize("release", CARRIERS)
def test_the_backward_index_lines_are_bounded_as_their_siblings_are(release):
    """A document mask's ids read past their end (the matrix's document case, a host ACL uninitialised read): the dq
    block bounds the other operand's key indices, and the dK/dV block its query indices, only at the boundary block,
    while each bounds its own rows whenever IS_DIVISIBLE is false. ``bounded`` gives both lines their sibling's
    bound, changes nothing else, and leaves the forward (whose lines index without a subscript) alone."""
    text = shipped(release).text
    assert tuple(masked_loads.unbounded_indices(text)) == UNBOUNDED
    siblings = ["m = get_bounded_indices(offs_m2[:, None], Q_LEN if (not IS_DIVISIBLE or CHECK_BLOCK_BOUNDARY) else None)",
                "n = get_bounded_indices(offs_n1[:, None], KV_LEN if (not IS_DIVISIBLE or CHECK_BLOCK_BOUNDARY) else None)"]
    assert all(text.count(f"    {line}\n") == 1 for line in siblings)
    out = masked_loads.bounded(text)
    changed = [(b.strip(), a.strip()) for b, a in zip(text.splitlines(), out.splitlines()) if b != a]
    assert len(out.splitlines()) == len(text.splitlines()) and [b for b, _ in changed] == list(UNBOUNDED)
    assert all(a == b.replace(" if CHECK_BLOCK_BOUNDARY", " if (not IS_DIVISIBLE or CHECK_BLOCK_BOUNDARY)")
               for b, a in changed)
    assert masked_loads.unbounded_indices(out) == [] and masked_loads.bounded(out) == out
    forward = shipped(release, FORWARD).text
    assert masked_loads.unbounded_indices(forward) == [] and masked_loads.fixed(forward) == masked_loads.corrected(forward)
    assert masked_loads.fixed(text) == masked_loads.bounded(masked_loads.corrected(text))


@pytest.mark.parametrize("release", CARRIERS)
def test_the_forward_edit_on_each_carrying_release(release):
    """The forward's text is spliced from six module-level strings: its loads are named by the module's own lines
    (the line map), and exactly the K load changes."""
    module_text, source = kernel_file(release), shipped(release, FORWARD)
    assert len(source.line_map) == 6 and source.line_map[0][0] == 1
    reading = masked_loads.read(source.text, source.line_map)
    assert reading.shape == masked_loads.SWAPPED, reading
    assert [(ld.target, ld.state) for ld in reading.loads] == [
        ("q", masked_loads.CONSISTENT), ("k", masked_loads.SWAPPED), ("v", masked_loads.CONSISTENT)]
    assert masked_loads.block_layouts(source.text) == {
        "Q_block_ptr": ("sequence-first", "Q_LEN", "QK_HEAD_DIM"),
        "K_block_ptr": ("head-first", "QK_HEAD_DIM", "KV_LEN"),  # made twice, alike (normal and full blocks)
        "V_block_ptr": ("sequence-first", "KV_LEN", "V_HEAD_DIM")}
    line = FORWARD_K_LINE[release]
    assert reading.detail == (f"k (line {line}) passes (IS_DIVISIBLE, SAFE_HEAD_DIM), the flags of the transposed "
                              "block, for a block pointer shaped (QK_HEAD_DIM, KV_LEN)")
    assert module_text.splitlines()[line - 1].strip() == SHIPPED_K
    fixed = masked_loads.corrected(source.text)
    before, after = source.text.splitlines(keepends=True), fixed.splitlines(keepends=True)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert len(before) == len(after) and len(changed) == 1, changed
    assert changed[0] == (f"    {SHIPPED_K}\n", f"    {CORRECTED_K}\n")
    assert masked_loads.read(fixed).shape == masked_loads.CONSISTENT
    # every release carries the one text, forward and backward alike
    assert source.text == shipped(CARRIERS[0], FORWARD).text
    assert shipped(release).text == shipped(CARRIERS[0]).text


def test_releases_that_lower_with_other_templates_read_so():
    # 2.7.1.post11: torch's own template, imported under another name (its text is torch's module's)
    post11 = masked_loads.template_source(kernel_file("2.7.1.post11"), "upstream_" + TEMPLATE)
    assert post11.kind == "imported" and post11.origins == (("torch._inductor.kernel.flex_attention", TEMPLATE),)
    assert masked_loads.template_source(kernel_file("2.7.1.post11"), TEMPLATE).kind == "unknown"
    # 2.14.0 (as 2.10.0.post7 on): torch's own template wrapped as an NPUTritonTemplate
    newest = kernel_file("2.14.0", "flexattention_template.py")
    wrapped = masked_loads.template_source(newest, TEMPLATE)
    assert wrapped.kind == "imported" and "_wrap_upstream_template" in wrapped.detail, wrapped
    assert {m for m, _ in wrapped.origins} == {"torch._inductor.kernel.flex.flex_attention",
                                               "torch._inductor.kernel.flex_attention"}
    # the split dq / dkdv templates: no load of pointers built elsewhere in the whole module
    for release in ("2.7.1.post11", "2.14.0"):
        split = masked_loads.read(kernel_file(release, "flexattention_template.py"))
        assert split.shape == masked_loads.NO_POINTER_LOADS, (release, split)


@needs_271
def test_torch_271s_own_template_reads_consistent():
    import inspect

    importlib.import_module("torch._inductor.select_algorithm")  # torch 2.7.1: before the Flex module
    flex = importlib.import_module("torch._inductor.kernel.flex_attention")
    source = masked_loads.template_source(inspect.getsource(flex), TEMPLATE)
    reading = masked_loads.read(source.text)
    assert reading.shape == masked_loads.CONSISTENT, reading
    assert [ld.target for ld in reading.loads] == ["kT", "vT", "qT", "do"]
    forward = masked_loads.read(masked_loads.template_source(inspect.getsource(flex), FORWARD).text)
    assert forward.shape == masked_loads.CONSISTENT, forward
    assert [(ld.target, ld.args) for ld in forward.loads] == [
        ("q", ("Q_block_ptr", "IS_DIVISIBLE", "SAFE_HEAD_DIM")), ("k", ("K_block_ptr", "SAFE_HEAD_DIM", "IS_DIVISIBLE")),
        ("v", ("V_block_ptr", "IS_DIVISIBLE", "SAFE_HEAD_DIM"))]


# Texts of our own, for what the reader refuses (none is torch_npu's).
_HEAD = "offs_k = tl.arange(0, QK_HEAD_DIM_ROUNDED)\nkT_ptrs = K + offs_n2[:, None] * stride_kn + offs_k[None, :] * stride_kd\n"


@pytest.mark.parametrize("load, shape, says", [
    ("kT = load_checked_2d(kT_ptrs, offs_k, offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, KV_LEN)",
     masked_loads.SWAPPED, "kT (line 3) masks [offs_k, offs_n2] over pointers laid out [offs_n2, offs_k]"),
    ("kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, QK_HEAD_DIM)",
     masked_loads.CONSISTENT, "(kT) mask their pointers' own axes"),
    ("kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, KV_LEN, QK_HEAD_DIM)",
     masked_loads.UNKNOWN, "do not pair up as one head and one sequence axis"),
    ("kT = load_checked_2d(vT_ptrs, offs_n2, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, QK_HEAD_DIM)",
     masked_loads.UNKNOWN, "the layout of vT_ptrs, which kT loads, is not assigned once"),
    ("kT = load_checked_2d(kT_ptrs, offs_k,\n    offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, KV_LEN)",
     masked_loads.UNKNOWN, "calls load_checked_2d in a form not read here"),
    ("kT = load_checked_2d(K, offs_n2, offs_k, stride_kn, stride_kd, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, QK_HEAD_DIM)",
     masked_loads.NO_POINTER_LOADS, "no load_checked_2d or load_checked_block load of pointers built elsewhere"),
])
def test_the_reader_says_what_it_found(load, shape, says):
    reading = masked_loads.read(_HEAD + load + "\n")
    assert reading.shape == shape and says in reading.detail, reading
    if shape == masked_loads.SWAPPED:
        assert masked_loads.corrected(_HEAD + load + "  # kept\n").endswith(
            "kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, "
            "QK_HEAD_DIM)  # kept\n")
    else:
        with pytest.raises(masked_loads.UnrecognisedTemplate, match=f"the text is {shape}"):
            masked_loads.corrected(_HEAD + load + "\n")


def test_a_pointer_block_laid_out_twice_differently_is_not_guessed():
    text = _HEAD + "kT_ptrs = K + offs_k[:, None] * stride_kd + offs_n2[None, :] * stride_kn\n" + \
        "kT = load_checked_2d(kT_ptrs, offs_k, offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, KV_LEN)\n"
    assert masked_loads.pointer_layouts(text)["kT_ptrs"] is None
    assert masked_loads.read(text).shape == masked_loads.UNKNOWN


def _block_ptr(shape: str, block_shape: str = "(QK_HEAD_DIM_ROUNDED, BLOCK_N)", name: str = "K_block_ptr") -> str:
    return (f"    {name} = tl.make_block_ptr(\n        base=K,\n        shape={shape},\n"
            f"        strides=(stride_kk, stride_kn),\n        offsets=(0, kv_start),\n"
            f"        block_shape={block_shape},\n        order=(0, 1)\n    )\n")


_K_HEAD_FIRST = _block_ptr("(QK_HEAD_DIM, KV_LEN)")


@pytest.mark.parametrize("text, shape, says", [
    (_K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.SWAPPED,
     "k (line 9) passes (IS_DIVISIBLE, SAFE_HEAD_DIM), the flags of the transposed block, for a block pointer shaped "
     "(QK_HEAD_DIM, KV_LEN)"),
    (_K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr, SAFE_HEAD_DIM, IS_DIVISIBLE)\n", masked_loads.CONSISTENT,
     "its 1 load_checked_block load(s) of pointers built elsewhere (k) mask their pointers' own axes"),
    # positional arguments, [sequence, head]: the flags in the helper's own order fit
    ("    V_block_ptr = tl.make_block_ptr(V, (KV_LEN, V_HEAD_DIM), (s, t), (0, 0), (BLOCK_N, V_HEAD_DIM_ROUNDED), "
     "(1, 0))\n    v = load_checked_block(V_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.CONSISTENT,
     "(v) mask their pointers' own axes"),
    (_K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, IS_DIVISIBLE)\n", masked_loads.UNKNOWN,
     "k's flags are not IS_DIVISIBLE and SAFE_HEAD_DIM"),
    (_K_HEAD_FIRST + "    k = load_checked_block(V_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.UNKNOWN,
     "the shape of block pointer V_block_ptr, which k loads, is not made once in the text"),
    # a shape naming no head dimension, or a block_shape whose rounded head is elsewhere: not guessed
    (_block_ptr("(D, KV_LEN)") + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n",
     masked_loads.UNKNOWN, "is not made once"),
    (_block_ptr("(QK_HEAD_DIM, KV_LEN)", "(BLOCK_N, QK_HEAD_DIM_ROUNDED)")
     + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.UNKNOWN, "is not made once"),
    # made twice, with different shapes
    (_K_HEAD_FIRST + _block_ptr("(KV_LEN, QK_HEAD_DIM)", "(BLOCK_N, QK_HEAD_DIM_ROUNDED)")
     + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.UNKNOWN, "is not made once"),
    # a make_block_ptr whose parentheses never close (a Jinja line in it, say)
    ("    K_block_ptr = tl.make_block_ptr(\n        base=K, {{ shape }}\n    )\n"
     "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n", masked_loads.UNKNOWN, "is not made once"),
    (_K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr,\n        IS_DIVISIBLE, SAFE_HEAD_DIM)\n",
     masked_loads.UNKNOWN, "calls load_checked_block in a form not read here"),
    (_K_HEAD_FIRST + "    qk = tl.dot(q, load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM))\n",
     masked_loads.UNKNOWN, "line 9 calls load_checked_block in a form not read here"),
    (_K_HEAD_FIRST + "    k = tl.load(K_block_ptr)\n", masked_loads.NO_POINTER_LOADS,
     "no load_checked_2d or load_checked_block load of pointers built elsewhere"),
])
def test_the_reader_says_what_it_found_of_block_loads(text, shape, says):
    reading = masked_loads.read(text)
    assert reading.shape == shape and says in reading.detail, reading
    if shape == masked_loads.SWAPPED:
        fixed = masked_loads.corrected(text.replace("SAFE_HEAD_DIM)\n", "SAFE_HEAD_DIM)  # kept\n"))
        assert fixed == _K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr, SAFE_HEAD_DIM, IS_DIVISIBLE)  # kept\n"
    else:
        with pytest.raises(masked_loads.UnrecognisedTemplate, match=f"the text is {shape}"):
            masked_loads.corrected(text)


def test_a_line_map_names_the_modules_lines():
    """A text spliced from literals at module lines 11 and 1 (in that order): its line 3 is the second literal's
    first line."""
    assert masked_loads.template_source('B = """x\ny\n"""\n' + "\n" * 7 + 'A = """\nz\n"""\n' + "\n" * 28
                                        + 'T = TritonTemplate(name="t", grid=None, source=A + B)\n', "T").line_map \
        == ((1, 11), (3, 1))
    text = "\n\n" + _K_HEAD_FIRST + "    k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)\n"
    assert "k (line 108) passes" in masked_loads.read(text, ((1, 40), (3, 100))).detail
    assert "k (line 50) passes" in masked_loads.read(text, 40).detail


# ---- (a) probe and apply on a module holding a release's real texts -----------------------------------------------
_FIXTURE = """from torch._inductor.select_algorithm import TritonTemplate

SOURCE = {text!r}
{name} = TritonTemplate(name={template_name!r}, grid=None, source=SOURCE)
"""


def _fixture(backward: str, forward: str, stem: str) -> str:
    """A module shaped as torch_npu 2.7.1.post10's: both templates built from the given texts by torch's own
    TritonTemplate (named ``<stem>_bwd`` / ``<stem>_fwd``)."""
    return (_FIXTURE.format(text=backward, name=TEMPLATE, template_name=f"{stem}_bwd")
            + _FIXTURE.split("\n", 1)[1].replace("SOURCE", "FORWARD_SOURCE").format(
                text=forward, name=FORWARD, template_name=f"{stem}_fwd"))


def _texts(variant: str) -> tuple[str, str]:
    """(backward, forward) texts: each as post10 ships it or corrected."""
    backward, forward = shipped("2.7.1.post10").text, shipped("2.7.1.post10", FORWARD).text
    fix_bwd, fix_fwd = {"shipped": (False, False), "forward-only": (True, False), "backward-only": (False, True),
                        "both-fit": (True, True)}[variant]
    return (masked_loads.corrected(backward) if fix_bwd else backward,
            masked_loads.corrected(forward) if fix_fwd else forward)


def _load_module(path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def npu_module(tmp_path, request):
    """A module shaped as torch_npu 2.7.1.post10's, its templates built from its real texts (as shipped, unless
    the test is parametrized with a ``variant`` of ``_texts``), for the in-process mechanics."""
    importlib.import_module("torch._inductor.select_algorithm")
    from torch._inductor.select_algorithm import TritonTemplate

    variant = getattr(request, "param", "shipped")
    stem = f"masked_loads_{re.sub(r'[^A-Za-z0-9_]', '_', request.node.name)}"
    path = tmp_path / f"{stem}.py"
    path.write_text(_fixture(*_texts(variant), stem))
    yield _load_module(path, path.stem)
    for suffix in ("_bwd", "_fwd"):
        TritonTemplate.all_templates.pop(stem + suffix, None)


@needs_271
def test_probe_then_apply_is_idempotent_and_rolls_back(npu_module):
    modules = {MODULE: npu_module}
    backward, forward = getattr(npu_module, TEMPLATE), getattr(npu_module, FORWARD)
    shipped_jinja = backward.template, forward.template
    verdict = fix.probe(modules)
    assert verdict.verdict == NEEDED, verdict
    assert "kT (line " in verdict.reason and "vT (line " in verdict.reason and "qT (line " in verdict.reason
    assert f"{MODULE}.{FORWARD} (" in verdict.reason and "k (line " in verdict.reason
    p1, p2 = Patcher(), Patcher()
    note = fix.apply(modules, p1)
    assert p1.changes == 2 and note == (f"{MODULE}.{TEMPLATE}: 3 load(s) now masked along their pointers' own axes "
                                        "(kT, vT, qT), 2 index line(s) bounded when not IS_DIVISIBLE; "
                                        f"{MODULE}.{FORWARD}: 1 load(s) now masked along their "
                                        "pointers' own axes (k)"), note
    installed = backward.template, forward.template
    assert installed[0] is not shipped_jinja[0] and installed[1] is not shipped_jinja[1]
    for template in (backward, forward):  # the same objects, which the lowering holds
        assert type(template).all_templates[template.name] is template
    assert fix._compiled_from(backward, masked_loads.fixed(shipped("2.7.1.post10").text))
    assert fix._compiled_from(forward, masked_loads.fixed(shipped("2.7.1.post10", FORWARD).text))
    ours = fix.probe(modules)
    assert ours.verdict == NEEDED and ours.reason.count("already has this patch set's corrected loads") == 2
    assert fix.superseded(modules) is None
    assert "nothing changed" in fix.apply(modules, p2) and p2.changes == 0
    assert (backward.template, forward.template) == installed
    p1.rollback()
    assert (backward.template, forward.template) == shipped_jinja
    assert fix.probe(modules).reason == verdict.reason


@needs_271
@pytest.mark.parametrize("npu_module, corrects", [("forward-only", FORWARD), ("backward-only", TEMPLATE)],
                         indirect=["npu_module"])
def test_each_template_is_corrected_only_where_its_text_is_swapped(npu_module, corrects):
    """One template already fits (its text as corrected, compiled by the module itself): the patch is still
    needed, for the other one, and leaves the fitting one's Jinja template as it is."""
    modules = {MODULE: npu_module}
    other = FORWARD if corrects == TEMPLATE else TEMPLATE
    untouched = getattr(npu_module, other).template
    verdict = fix.probe(modules)
    assert verdict.verdict == NEEDED and f"{MODULE}.{other}" not in verdict.reason, verdict
    p = Patcher()
    note = fix.apply(modules, p)
    assert p.changes == 1 and note.startswith(f"{MODULE}.{corrects}: ") and other not in note, note
    assert getattr(npu_module, other).template is untouched
    assert fix.superseded(modules) is None
    p.rollback()


@needs_271
@pytest.mark.parametrize("npu_module", ["both-fit"], indirect=True)
def test_both_templates_fitting_read_upstream_has_fix(npu_module):
    verdict = fix.probe({MODULE: npu_module})
    assert verdict.verdict == UPSTREAM_HAS_FIX, verdict
    assert "(kT, vT, qT, do) mask their pointers' own axes" in verdict.reason
    assert "(q, k, v) mask their pointers' own axes" in verdict.reason
    p = Patcher()
    assert fix.apply({MODULE: npu_module}, p).startswith("nothing changed") and p.changes == 0


@needs_271
def test_the_code_cache_of_newer_torch_is_emptied_with_the_text(npu_module):
    """torch >= 2.9 (2.9.0.post9's) keeps generated code per template, keyed on the call: replaced by an empty
    one with the text, the original put back on roll back."""
    class CodeCache(dict):
        pass

    templates = getattr(npu_module, TEMPLATE), getattr(npu_module, FORWARD)
    old = [CodeCache(entry="code of the shipped text") for _ in templates]
    for template, cache in zip(templates, old):
        template._generated_code_cache = cache
    p = Patcher()
    fix.apply({MODULE: npu_module}, p)
    assert p.changes == 4
    for template in templates:
        assert type(template._generated_code_cache) is CodeCache and not template._generated_code_cache
    p.rollback()
    assert [t._generated_code_cache for t in templates] == old
    assert all(t._generated_code_cache is cache for t, cache in zip(templates, old))


@needs_271
def test_the_applier_applies_it_and_rolls_it_back_when_apply_fails(npu_module, monkeypatch):
    decl = next(d for d in _declarations.load() if d.id == PATCH_ID)
    monkeypatch.setitem(sys.modules, MODULE, npu_module)
    templates = getattr(npu_module, TEMPLATE), getattr(npu_module, FORWARD)
    shipped_jinja = [t.template for t in templates]
    real_apply = fix.apply

    def apply_then_fail(modules, patcher):
        real_apply(modules, patcher)
        assert all(t.template is not j for t, j in zip(templates, shipped_jinja))
        raise RuntimeError("boom after install")

    monkeypatch.setattr(fix, "apply", apply_then_fail)
    st = _applier.PatchStatus(decl.id, _applier.PENDING, "", decl.hooks)
    _applier._settle(decl, st, import_targets=False)
    assert st.state == _applier.FAILED and "rolled back" in st.reason, st
    assert [t.template for t in templates] == shipped_jinja
    monkeypatch.setattr(fix, "apply", real_apply)
    st = _applier.PatchStatus(decl.id, _applier.PENDING, "", decl.hooks)
    _applier._settle(decl, st, import_targets=False)
    assert st.state == _applier.APPLIED and "(kT, vT, qT), 2 index line(s) bounded" in st.note and st.note.endswith("(k)"), st
    assert all(t.template is not j for t, j in zip(templates, shipped_jinja))


@needs_271
@pytest.mark.parametrize("replaced", [TEMPLATE, FORWARD])
def test_a_template_replaced_after_import_is_not_guessed_about(npu_module, replaced):
    modules = {MODULE: npu_module}
    template = getattr(npu_module, replaced)
    p = Patcher()
    fix.apply(modules, p)
    p.setattr(template, "template", type(template)._template_from_string("{{ something_else }}"))
    assert f"{MODULE}.{replaced}'s Jinja template is not compiled from the text" in fix.superseded(modules)
    verdict = fix.probe(modules)
    assert verdict.verdict == UNRECOGNISED and verdict.reason.startswith("unrecognised layout: "), verdict
    assert fix.apply(modules, Patcher()).startswith("nothing changed: unrecognised layout")
    p.rollback()


@needs_271
@pytest.mark.parametrize("odd, says", [
    ("backward", "do not pair up"),
    ("forward", "k's flags are not IS_DIVISIBLE and SAFE_HEAD_DIM"),
    ("missing forward", "no Flex Attention forward and backward templates at"),
])
def test_a_text_with_a_load_it_does_not_know_is_unrecognised(tmp_path, odd, says):
    """Either template unreadable refuses both: the other's correction is not installed on its own."""
    from torch._inductor.select_algorithm import TritonTemplate

    backward, forward = _texts("shipped")
    if odd == "backward":
        backward = backward.replace(
            "kT = load_checked_2d(kT_ptrs, offs_k, offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, "
            "KV_LEN)", "kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, "
            "KV_LEN, QK_HEAD_DIM)")
    elif odd == "forward":
        forward = forward.replace(SHIPPED_K, "k = load_checked_block(K_block_ptr, IS_DIVISIBLE, IS_DIVISIBLE)")
    stem = f"masked_loads_odd_{odd.replace(' ', '_')}"
    text = _fixture(backward, forward, stem)
    if odd == "missing forward":
        text = text.split("\nFORWARD_SOURCE")[0]
    path = tmp_path / f"{stem}.py"
    path.write_text(text)
    try:
        module = _load_module(path, path.stem)
        verdict = fix.probe({MODULE: module})
        p = Patcher()
        note = fix.apply({MODULE: module}, p)
    finally:
        for suffix in ("_bwd", "_fwd"):
            TritonTemplate.all_templates.pop(stem + suffix, None)
    assert verdict.verdict == UNRECOGNISED and says in verdict.reason, verdict
    assert note.startswith("nothing changed: unrecognised layout") and p.changes == 0


def _module_from(tmp_path, name: str, text: str, register_as: str | None = None, monkeypatch=None):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(register_as or name, path)
    module = importlib.util.module_from_spec(spec)
    if register_as:
        monkeypatch.setitem(sys.modules, register_as, module)
    spec.loader.exec_module(module)
    return module


@needs_271
def test_the_other_layouts_read_upstream_has_fix(tmp_path, monkeypatch):
    """Modules shaped as the layouts that carry no such load: torch's templates under other names (2.7.1.post11,
    their text read from torch's module), torch's templates wrapped where torch keeps their text elsewhere
    (2.10.0.post7 on), and the split fwd / dq / dkdv templates (their module's text, post11's sources)."""
    from torch._inductor.select_algorithm import TritonTemplate

    importlib.import_module("torch._inductor.select_algorithm")
    torch_flex = importlib.import_module("torch._inductor.kernel.flex_attention")
    post11 = _module_from(tmp_path, "post11_like", "from torch._inductor.kernel.flex_attention import (\n"
                          f"    {TEMPLATE} as upstream_{TEMPLATE},\n    {FORWARD} as upstream_{FORWARD},\n)\n")
    verdict = fix.probe({MODULE: post11})
    assert verdict.verdict == UPSTREAM_HAS_FIX and "(kT, vT, qT, do) mask their pointers' own axes" in verdict.reason
    assert "(q, k, v) mask their pointers' own axes" in verdict.reason, verdict
    assert getattr(post11, f"upstream_{TEMPLATE}") is getattr(torch_flex, TEMPLATE)

    newer = "torch._inductor.kernel.flex.flex_attention"  # torch >= 2.9 keeps the text in a .jinja file
    text = ("def load_template(name):\n    return '{{ x }}'\n\n"
            "from torch._inductor.select_algorithm import TritonTemplate\n"
            f"{TEMPLATE} = TritonTemplate(name='masked_loads_elsewhere', grid=None, source=load_template('x'))\n"
            f"{FORWARD} = TritonTemplate(name='masked_loads_elsewhere_fwd', grid=None, source=load_template('y'))\n")
    try:
        elsewhere = _module_from(tmp_path, "torch_elsewhere", text, register_as=newer, monkeypatch=monkeypatch)
        wrapped = _module_from(tmp_path, "newer_like", textwrap.dedent(f"""
            import copy
            from {newer} import {TEMPLATE} as _upstream, {FORWARD} as _upstream_fwd


            def _wrap_upstream_template(upstream):
                wrapped = copy.copy(upstream)
                wrapped.name = "masked_loads_wrapped_" + upstream.name
                return wrapped


            {TEMPLATE} = _wrap_upstream_template(_upstream)
            {FORWARD} = _wrap_upstream_template(_upstream_fwd)
        """))
        verdict = fix.probe({"torch_npu._inductor.kernel.flexattention_template": wrapped})
    finally:
        TritonTemplate.all_templates.pop("masked_loads_elsewhere", None)
        TritonTemplate.all_templates.pop("masked_loads_elsewhere_fwd", None)
    assert getattr(wrapped, TEMPLATE).template is getattr(elsewhere, TEMPLATE).template
    assert verdict.verdict == UPSTREAM_HAS_FIX, verdict
    for name in (TEMPLATE, FORWARD):
        assert f"is torch's own template {newer}.{name}, not a torch_npu text this patch edits" in verdict.reason

    split_file = kernel_file("2.7.1.post11", "flexattention_template.py")
    dq = masked_loads.template_source(split_file, "flex_attention_bwd_dq_mask_out")
    fwd = masked_loads.template_source(split_file, "flex_attention_fwd_mask_out")
    assert dq.kind == fwd.kind == "inline", (dq, fwd)
    split = _module_from(tmp_path, "split_like",
                         _FIXTURE.format(text=dq.text, name="flex_attention_bwd_dq_mask_out",
                                         template_name="masked_loads_split")
                         + _FIXTURE.split("\n", 1)[1].replace("SOURCE", "FWD_SOURCE").format(
                             text=fwd.text, name="flex_attention_fwd_mask_out", template_name="masked_loads_split_fwd"))
    try:
        verdict = fix.probe({"torch_npu._inductor.kernel.flexattention_template": split})
    finally:
        TritonTemplate.all_templates.pop("masked_loads_split", None)
        TritonTemplate.all_templates.pop("masked_loads_split_fwd", None)
    assert verdict.verdict == UPSTREAM_HAS_FIX and "split Flex Attention templates" in verdict.reason, verdict
    assert "no load_checked_2d or load_checked_block load of pointers built elsewhere" in verdict.reason


# ---- (a) probe and apply on the released wheels' own modules ------------------------------------------------------
_LIVE = textwrap.dedent('''
    import json, sys
    from torch_npu._inductor.patchset.tooling.releases import wheels
    wheels.load(sys.argv[1])
    import importlib
    from torch_npu._inductor.patchset import _applier
    MODULE, ID = "torch_npu._inductor.kernel.flex_attention", sys.argv[2]
    try:
        module = importlib.import_module(MODULE)
    except ModuleNotFoundError:
        module = None
    templates = [getattr(module, n, None) for n in ("flex_attention_backward_template", "flex_attention_template")]
    before = [getattr(t, "template", None) for t in templates]
    out = {"row": next(r.to_json() for r in _applier.apply(import_targets=True) if r.id == ID)}
    if None not in templates:
        from torch._inductor.select_algorithm import TritonTemplate
        after = [t.template for t in templates]
        out.update(replaced=[a is not b for a, b in zip(after, before)],
                   registered=[TritonTemplate.all_templates[t.name] is t for t in templates])
        _applier._reset_for_tests()  # a second apply, from a clean applier state
        out["again"] = next(r.to_json() for r in _applier.apply(import_targets=True) if r.id == ID)
        out["untouched_by_again"] = [t.template is a for t, a in zip(templates, after)]
    print(json.dumps(out))
''')


@functools.lru_cache(maxsize=None)
def live(release: str) -> dict:
    fetched(release)
    proc = subprocess.run([sys.executable, "-c", _LIVE, release, PATCH_ID], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_271
def test_applied_on_post10s_own_module_once():
    out = live("2.7.1.post10")
    assert out["row"]["state"] == "applied", out
    assert out["row"]["note"] == (f"{MODULE}.{TEMPLATE}: 3 load(s) now masked along their pointers' own axes "
                                  "(kT, vT, qT), 2 index line(s) bounded when not IS_DIVISIBLE; "
                                  f"{MODULE}.{FORWARD}: 1 load(s) now masked along their pointers' own axes (k)"), out
    for line in (1041, 1091, 1241):  # post10's lines of the three backward loads
        assert f"(line {line})" in out["row"]["reason"], out
    assert "k (line 528) passes (IS_DIVISIBLE, SAFE_HEAD_DIM)" in out["row"]["reason"], out  # the forward's K load
    assert out["replaced"] == [True, True] and out["registered"] == [True, True], out
    assert out["again"]["state"] == "applied" and out["again"]["note"].startswith("nothing changed"), out
    assert out["untouched_by_again"] == [True, True], out


@needs_271
def test_post11_lowers_with_torchs_template_whose_loads_fit():
    out = live("2.7.1.post11")
    row = out["row"]
    assert row["state"] == UPSTREAM_HAS_FIX, row
    assert row["targets"] == [f"{MODULE}:upstream_{TEMPLATE}", f"{MODULE}:upstream_{FORWARD}"], row
    assert "torch._inductor.kernel.flex_attention.flex_attention_backward_template" in row["reason"]
    assert "(kT, vT, qT, do) mask their pointers' own axes" in row["reason"], row
    assert "(q, k, v) mask their pointers' own axes" in row["reason"], row


@needs_271
def test_a_release_without_torch_npus_templates_is_target_missing():
    row = live("2.7.1")["row"]
    assert row["state"] == "target-missing" and "no Flex Attention templates of its own" in row["reason"], row


# ---- (b), (c) the template's own lines through triton-ascend ------------------------------------------------------
def _code_line(text: str, pattern: str) -> str:
    """The one statement of the text that matches (it may be written, alike, in several of its functions)."""
    found = {ln.strip() for ln in text.splitlines() if re.match(pattern, ln.strip())}
    assert len(found) == 1, (pattern, found)
    return found.pop()


def _helper(text: str, name: str = masked_loads.HELPER) -> str:
    """The template's ``@triton.jit def <name>(...)`` as the text has it."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {name}("))
    assert lines[start - 1].strip() == "@triton.jit"
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t)"):
        end += 1
    return "\n".join(lines[start - 1:end]) + "\n"


def probe_kernel(text: str, load: masked_loads.Load) -> dict:
    """A Triton kernel made of the template's own lines for ``load``: its ``load_checked_2d`` helper, the line that
    lays the pointers out, the load line and the transpose after it (the sequence offsets a block from 0, the
    head offsets as the template defines them); it stores the transposed block. Returns its source and the names of
    its arguments by role."""
    lines = text.splitlines()
    ptr_line = _code_line(text, rf"{load.pointer}\s*=\s")
    rows, cols = masked_loads.pointer_layouts(text)[load.pointer]
    heads = masked_loads.head_offsets(text)
    head, seq = (rows, cols) if rows in heads else (cols, rows)
    assert head in heads and seq not in heads, (rows, cols, heads)
    head_def = _code_line(text, rf"{head}\s*=\s*tl\.arange\(")
    transpose = next(ln.strip() for ln in lines[load.line:] if ln.strip() and not ln.strip().startswith("#"))
    assert transpose == f"{load.target} = tl.trans({load.target})", transpose  # the "# pta" transpose
    terms, expr = [], ast.parse(ptr_line).body[0].value
    while isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        terms.insert(0, expr.right)
        expr = expr.left
    base = expr.id
    stride = {term.left.value.id: term.right.id for term in terms}  # offs[...] * stride
    axis = {load.args[1]: (load.args[5], load.args[7]), load.args[2]: (load.args[6], load.args[8])}
    (seq_flag, seq_len), (head_flag, head_dim) = axis[seq], axis[head]
    rounded = ast.unparse(ast.parse(head_def).body[0].value.args[-1])
    constexprs = [seq_flag, head_flag, head_dim, rounded, "BLOCK"]
    params = [base, "OUT", stride[seq], stride[head], seq_len] + [f"{c}: tl.constexpr" for c in constexprs]
    body = [f"{seq} = tl.arange(0, BLOCK)", head_def, ptr_line, lines[load.line - 1].strip(), transpose,
            f"tl.store(OUT + {head}[:, None] * BLOCK + {seq}[None, :], {load.target})"]
    source = ("import triton\nimport triton.language as tl\n\n\n" + _helper(text) + "\n\n@triton.jit\n"
              f"def probe_kernel({', '.join(params)}):\n" + "".join(f"    {b}\n" for b in body))
    return {"source": source, "pointers": [base, "OUT"], "ints": [stride[seq], stride[head], seq_len],
            "flags": (seq_flag, head_flag), "dims": (head_dim, rounded)}


def block_probe_kernel(text: str, load: masked_loads.Load) -> dict:
    """A Triton kernel made of the template's own lines for the block-pointer ``load``: its ``load_checked_block``
    helper, the ``tl.make_block_ptr`` statement of the pointer it loads, the load line; it stores the block as
    loaded. Returns its source and the names of its arguments by role."""
    made = [stmt for _, stmt in masked_loads.make_block_ptr_statements(text)
            if stmt is not None and stmt.targets[0].id == load.pointer]
    assert made and all(ast.dump(m) == ast.dump(made[0]) for m in made), load.pointer
    call = made[0].value
    part = {k.arg: k.value for k in call.keywords}
    names = {k: [ast.unparse(e) for e in part[k].elts] for k in ("shape", "strides", "offsets", "block_shape")}
    order, _, _ = masked_loads.block_layouts(text)[load.pointer]
    head_at = 0 if order == "head-first" else 1
    seq_len, head_dim = names["shape"][1 - head_at], names["shape"][head_at]
    offsets = [o for o in names["offsets"] if o != "0"]
    assert len(offsets) == 1 and offsets[0].isidentifier(), names["offsets"]  # the sequence's start, a name
    rows, cols = names["block_shape"]
    ints = [*names["strides"], seq_len, offsets[0]]
    constexprs = [*load.args[1:], head_dim, rows, cols]
    params = [ast.unparse(part["base"]), "OUT", *ints] + [f"{c}: tl.constexpr" for c in sorted(set(constexprs))]
    body = [ast.unparse(made[0]), text.splitlines()[load.line - 1].strip(),
            f"tl.store(OUT + tl.arange(0, {rows})[:, None] * {cols} + tl.arange(0, {cols})[None, :], {load.target})"]
    source = ("import triton\nimport triton.language as tl\n\n\n" + _helper(text, masked_loads.BLOCK_HELPER)
              + "\n\n@triton.jit\n" f"def probe_kernel({', '.join(params)}):\n" + "".join(f"    {b}\n" for b in body))
    return {"source": source, "ints": ints, "order": order, "strides": names["strides"], "seq_len": seq_len,
            "head_dim": head_dim, "block_shape": (rows, cols)}


#: (b): the front end's cases: (IS_DIVISIBLE, SAFE_HEAD_DIM, head size). The last compiles as shipped too.
FRONT_END_CASES = {"off the 128 grid": (False, True, 64), "head size 80": (True, False, 80),
                   "both": (False, False, 80), "neither": (True, True, 64)}
#: (c): (sequence length, IS_DIVISIBLE, SAFE_HEAD_DIM, head size), a 16-wide block over a head rounded to 16.
BLOCK = 16
RUN_CASES = {"13 of 16 rows, head 16": (13, False, True, 16), "16 rows, head 12": (16, True, False, 12)}
FRONT_END_RELEASES = ("2.7.1.post10", "2.9.0.post9")
#: (d): (KV_LEN, the block's first key, IS_DIVISIBLE, SAFE_HEAD_DIM, head size): a 16-key block, the head rounded
#: to 16. The first is the last block of 20 keys; the second a whole block over a head of 12.
FORWARD_RUN_CASES = {"keys 16..31 of 20, head 16": (20, 16, False, True, 16),
                     "keys 0..15 of 16, head 12": (16, 0, True, False, 12)}

_CHILD = textwrap.dedent('''
    import importlib.util, json, os, sys

    def kernel(path, interpret):  # triton.jit reads TRITON_INTERPRET when it decorates
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        name = os.path.basename(path)[:-3] + ("_run" if interpret else "_compile")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.probe_kernel

    def innermost(exc):
        while exc.__cause__ is not None:
            exc = exc.__cause__
        return f"{type(exc).__name__}: {exc}"

    results = {}
    jobs = json.load(open(sys.argv[1]))
    # Every compile before any run: running in the interpreter patches triton.language for good.
    for key, job in sorted(jobs.items(), key=lambda kv: kv[1]["mode"] != "compile"):
        if job["mode"] == "compile":
            from triton._C.libtriton import ir
            from triton.backends.compiler import GPUTarget
            from triton.compiler import ASTSource
            from triton.compiler.compiler import make_backend

            backend = make_backend(GPUTarget("npu", "Ascend910B1", 0))
            options = backend.parse_options({})
            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            source = ASTSource(kernel(job["path"], False), dict(job["signature"]), constants=job["constants"])
            try:
                source.make_ir(options, backend.get_codegen_implementation(),
                               getattr(backend, "get_module_map", dict)(), context)
                results[key] = "compiled"
            except Exception as exc:
                results[key] = innermost(exc)
        else:
            import torch

            memory = torch.arange(job["numel"], dtype=torch.float32) + 1
            out = torch.full(job["out"], -1.0)
            kernel(job["path"], True)[(1,)](memory, out, *job["ints"], **job["constants"])
            results[key] = out.tolist()
    print(json.dumps(results))
''')


def _forward_loads(release: str) -> dict:
    """{(target, variant): (load, text)}: the forward's K load as shipped and corrected, and its V load (which the
    edit leaves, read as fitting) as shipped."""
    text = shipped(release, FORWARD).text
    fixed = masked_loads.corrected(text)
    before = {ld.target: ld for ld in masked_loads.read(text).loads}
    after = {ld.target: ld for ld in masked_loads.read(fixed).loads}
    return {("k", "shipped"): (before["k"], text), ("k", "corrected"): (after["k"], fixed),
            ("v", "shipped"): (before["v"], text)}


def _block_constants(k: dict, divisible: bool, safe: bool, size: int, rounded: int) -> tuple[dict, list[int]]:
    """The constexpr values of a ``block_probe_kernel`` (the flags, the head size, the block's sides: the rounded
    head where the head is, BLOCK keys), and the block's shape."""
    block = [BLOCK, BLOCK]
    block[0 if k["order"] == "head-first" else 1] = rounded
    values = {"IS_DIVISIBLE": divisible, "SAFE_HEAD_DIM": safe, k["head_dim"]: size, **dict(zip(k["block_shape"], block))}
    return values, block


def _forward_jobs(folder) -> dict:
    jobs = {}
    for release in FRONT_END_RELEASES:
        for (target, variant), (load, text) in _forward_loads(release).items():
            k = block_probe_kernel(text, load)
            path = folder / f"fwd_{release.replace('.', '_')}_{target}_{variant}.py"
            path.write_text(k["source"])
            head_at = 0 if k["order"] == "head-first" else 1
            for case, (divisible, safe, size) in FRONT_END_CASES.items():
                values, _ = _block_constants(k, divisible, safe, size, 1 << (size - 1).bit_length())
                jobs[f"{release}|fwd-{target}|{variant}|compile|{case}"] = {
                    "mode": "compile", "path": str(path),
                    "signature": [(n, "*fp32") for n in ("K" if target == "k" else "V", "OUT")]
                    + [(n, "i32") for n in k["ints"]] + [(n, "constexpr") for n in sorted(values)],
                    "constants": values}
            for case, (length, start, divisible, safe, size) in FORWARD_RUN_CASES.items():
                values, block = _block_constants(k, divisible, safe, size, BLOCK)
                strides = [size, size]
                strides[head_at] = 1  # a [KV_LEN, D] tensor, row-major
                jobs[f"{release}|fwd-{target}|{variant}|run|{case}"] = {
                    "mode": "run", "path": str(path), "numel": length * size + BLOCK * BLOCK, "out": block,
                    "ints": [*strides, length, start], "constants": values}
    return jobs


def _loads(release: str) -> dict:
    """{target: (shipped load, corrected load, shipped text, corrected text)} of the loads the edit corrects."""
    text = shipped(release).text
    fixed = masked_loads.corrected(text)
    after = {ld.target: ld for ld in masked_loads.read(fixed).loads}
    return {ld.target: (ld, after[ld.target], text, fixed) for ld in masked_loads.read(text).swapped}


@pytest.fixture(scope="module")
def triton_ascend(tmp_path_factory) -> dict:
    """Every (b), (c) and (d) job run in one child, with the tier's triton-ascend first on the path."""
    from torch_npu._inductor.patchset.tooling.e2e import stand_ins

    folder = tmp_path_factory.mktemp("masked_loads_kernels")
    jobs = {}
    for release in FRONT_END_RELEASES:
        for target, both in _loads(release).items():
            for variant, (load, text) in (("shipped", (both[0], both[2])), ("corrected", (both[1], both[3]))):
                k = probe_kernel(text, load)
                path = folder / f"k_{release.replace('.', '_')}_{target}_{variant}.py"
                path.write_text(k["source"])
                head_dim, rounded = k["dims"]
                for case, (divisible, safe, size) in FRONT_END_CASES.items():
                    jobs[f"{release}|{target}|{variant}|compile|{case}"] = {
                        "mode": "compile", "path": str(path),
                        "signature": [(n, "*fp32") for n in k["pointers"]] + [(n, "i32") for n in k["ints"]]
                        + [(n, "constexpr") for n in (*k["flags"], *k["dims"], "BLOCK")],
                        "constants": {k["flags"][0]: divisible, k["flags"][1]: safe, head_dim: size,
                                      rounded: 1 << (size - 1).bit_length(), "BLOCK": BLOCK}}
                for case, (length, divisible, safe, size) in RUN_CASES.items():
                    jobs[f"{release}|{target}|{variant}|run|{case}"] = {
                        "mode": "run", "path": str(path), "numel": BLOCK * size + BLOCK, "out": [BLOCK, BLOCK],
                        "ints": [size, 1, length],
                        "constants": {k["flags"][0]: divisible, k["flags"][1]: safe, head_dim: size, rounded: BLOCK,
                                      "BLOCK": BLOCK}}
    jobs.update(_forward_jobs(folder))
    (folder / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stand_ins.triton_ascend_dir()),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(folder / "jobs.json")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_271
@pytest.mark.parametrize("release", FRONT_END_RELEASES)
@pytest.mark.parametrize("target", ["kT", "vT", "qT"])
def test_triton_ascends_front_end_refuses_the_shipped_loads_and_compiles_the_corrected(triton_ascend, release, target):
    got = {case: {v: triton_ascend[f"{release}|{target}|{v}|compile|{case}"] for v in ("shipped", "corrected")}
           for case in FRONT_END_CASES}
    for case in ("off the 128 grid", "head size 80", "both"):
        assert got[case]["shipped"].startswith("ValueError: Cannot broadcast"), (case, got[case])
        assert got[case]["corrected"] == "compiled", (case, got[case])
    assert got["neither"] == {"shipped": "compiled", "corrected": "compiled"}  # no mask, nothing to refuse
    if target == "kT":  # the seed job's message: a [1, 16] mask for [16, 64] pointers
        assert got["off the 128 grid"]["shipped"].endswith("[1, 16], [16, 64]"), got


def _expected(length: int, divisible: bool, safe: bool, size: int, rows_by_head: bool) -> torch.Tensor:
    """The transposed [D, N] block of a [N, D] tensor (row n, column d at n * size + d of the kernel's memory,
    whose element i holds i + 1), masked as a load masks it: by its pointers' axes, or (``rows_by_head``) with the
    head dimension's mask on the rows and the sequence's on the columns, which is what the shipped call does."""
    n = torch.arange(BLOCK)[:, None]
    d = torch.arange(BLOCK)[None, :]
    value = (n * size + d + 1).float()
    if rows_by_head:
        keep = ((n < size) | safe) & ((d < length) | divisible)
    else:
        keep = ((n < length) | divisible) & ((d < size) | safe)
    return torch.where(keep, value, torch.zeros(())).T


@needs_271
@pytest.mark.parametrize("release", FRONT_END_RELEASES)
@pytest.mark.parametrize("target", ["kT", "vT", "qT"])
@pytest.mark.parametrize("case", list(RUN_CASES))
def test_with_block_equal_to_the_head_the_shipped_load_masks_the_other_axis(triton_ascend, release, target, case):
    length, divisible, safe, size = RUN_CASES[case]
    shipped_out = torch.tensor(triton_ascend[f"{release}|{target}|shipped|run|{case}"])
    corrected_out = torch.tensor(triton_ascend[f"{release}|{target}|corrected|run|{case}"])
    want = _expected(length, divisible, safe, size, rows_by_head=False)
    assert torch.equal(corrected_out, want)
    assert torch.equal(shipped_out, _expected(length, divisible, safe, size, rows_by_head=True))
    assert not torch.equal(shipped_out, want)


def _block_as_loaded(length: int, start: int, size: int, check_seq: bool, check_head: bool) -> torch.Tensor:
    """The [head, key] block (rounded head 16, 16 keys from ``start``) of a [length, size] tensor in the kernel's
    memory (element i holds i + 1, the tensor first, more memory after it), read with the given bounds checks
    (an unchecked element is read from wherever its address falls)."""
    d = torch.arange(BLOCK)[:, None]
    n = start + torch.arange(BLOCK)[None, :]
    keep = ((d < size) | (not check_head)) & ((n < length) | (not check_seq))
    return torch.where(keep, (n * size + d + 1).float(), torch.zeros(()))


@needs_271
@pytest.mark.parametrize("release", FRONT_END_RELEASES)
def test_triton_ascends_front_end_compiles_the_forward_loads_either_way(triton_ascend, release):
    """Nothing refuses the shipped forward: its K block's checks are on the wrong dimensions, not of the wrong
    shape, so only the reads themselves tell."""
    for case in FRONT_END_CASES:
        for target, variant in (("k", "shipped"), ("k", "corrected"), ("v", "shipped")):
            assert triton_ascend[f"{release}|fwd-{target}|{variant}|compile|{case}"] == "compiled", (case, target)


@needs_271
@pytest.mark.parametrize("release", FRONT_END_RELEASES)
@pytest.mark.parametrize("case", list(FORWARD_RUN_CASES))
def test_the_forwards_shipped_k_load_reads_past_k_and_the_next_keys(triton_ascend, release, case):
    length, start, divisible, safe, size = FORWARD_RUN_CASES[case]
    numel = length * size  # K's own elements; the kernel's memory goes on after them
    got = {v: torch.tensor(triton_ascend[f"{release}|fwd-k|{v}|run|{case}"]) for v in ("shipped", "corrected")}
    # load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM) on a [head, key] block checks the head unless
    # IS_DIVISIBLE and the keys unless SAFE_HEAD_DIM: each flag guards the other's dimension
    assert torch.equal(got["shipped"], _block_as_loaded(length, start, size, check_seq=not safe,
                                                        check_head=not divisible))
    assert torch.equal(got["corrected"], _block_as_loaded(length, start, size, check_seq=not divisible,
                                                          check_head=not safe))
    past_the_end = {v: int((out > numel).sum()) for v, out in got.items()}
    padding_read = {v: int((out[size:] != 0).sum()) for v, out in got.items()}  # head rows past the head size
    if not divisible:  # the last block of 20 keys: keys 20..31 read, 16 elements each, all past K's end
        assert past_the_end == {"shipped": (start + BLOCK - length) * size, "corrected": 0}, past_the_end
        assert padding_read == {"shipped": 0, "corrected": 0}
    else:  # head 12: rows 12..15 of each key read the next key's first four values, the last key's past K's end
        assert padding_read == {"shipped": (BLOCK - size) * BLOCK, "corrected": 0}, padding_read
        assert past_the_end == {"shipped": BLOCK - size, "corrected": 0}, past_the_end
        assert torch.equal(got["shipped"][size:, :-1], got["shipped"][:BLOCK - size, 1:])  # the next key's values
    # the V load, which the edit leaves: [key, head], its flags in the helper's order, in bounds as shipped
    v = torch.tensor(triton_ascend[f"{release}|fwd-v|shipped|run|{case}"])
    assert torch.equal(v, _block_as_loaded(length, start, size, check_seq=not divisible, check_head=not safe).T)
