"""Correct the masked loads of torch_npu's own Flex Attention templates (2.7.1.post4 .. post10, 2.9.0.post9): the
backward's ``kT`` / ``vT`` / ``qT`` pointers are laid out ``[N, D]`` but loaded with the mask of torch's ``[D, N]``
layout, and the forward's ``[head, sequence]`` ``K_block_ptr`` is loaded with the bounds checks of a
``[sequence, head]`` block (:mod:`..masked_loads` says how that is read and corrected).

torch's ``TritonTemplate.__init__`` compiles the ``source`` text into a Jinja template (``self.template``) and
keeps no copy of the text, so the text is recovered from the template's module: the ``source=`` expression of
its constructor call, evaluated over the module's own string constants. The live Jinja template must be the
compilation of exactly that text (its code object is compared), else the probe refuses to guess. ``apply``
compiles the corrected text with the template's own ``_template_from_string`` and puts it on the same
template object (the lowering and ``TritonTemplate.all_templates`` hold that object). Nothing else torch 2.7.1
keeps is derived from the text: the kernel's code cache keys on the rendered code, which changes with it.
torch >= 2.9 also keeps generated code per template (``_generated_code_cache``, keyed on the call, not the
text): it is replaced by an empty one.

The forward and the backward template of a module are judged each on its own text and corrected only where
that text is swapped; the patch is needed when either is, and refuses both when either cannot be read (one
half corrected on a layout it does not know is still a guess). Releases that lower with torch's own templates
(2.7.1.post11, 2.10.0.post7 and later) or with rewritten templates (split fwd / dq / dkdv ones) read
``upstream-has-fix``; releases without ``torch_npu/_inductor/kernel/`` leave the hooked modules missing
(``target-missing``).
"""
from __future__ import annotations

import functools
import inspect
import sys

from .. import masked_loads
from .._patching import NEEDED, UPSTREAM_HAS_FIX, Probe

_ATTR = "template"  # TritonTemplate.__init__: self.template = self._template_from_string(source)
_CODE_CACHE = "_generated_code_cache"  # torch >= 2.9: generated code per call, not keyed on the text

#: (module, backward template, forward template) where torch_npu keeps the templates the NPU compiles, per layout.
LOCATIONS = (
    # post4 .. post10, 2.9.0.post9: torch_npu's own texts
    ("torch_npu._inductor.kernel.flex_attention", "flex_attention_backward_template", "flex_attention_template"),
    # 2.10.0.post7 on: torch's own templates, wrapped
    ("torch_npu._inductor.kernel.flexattention_template", "flex_attention_backward_template",
     "flex_attention_template"),
    # 2.7.1.post11: torch's own templates, under other names
    ("torch_npu._inductor.kernel.flex_attention", "upstream_flex_attention_backward_template",
     "upstream_flex_attention_template"),
    # split fwd / dq / dkdv templates
    ("torch_npu._inductor.kernel.flexattention_template", "flex_attention_bwd_dq_mask_out",
     "flex_attention_fwd_mask_out"),
)
#: The split layout's backward templates.
SPLIT_PREFIX = "flex_attention_bwd_"


def _unknown(what_differs: str) -> Probe:
    """The project's wording for a target that is there in a shape this patch does not know."""
    return Probe.unrecognised(f"unrecognised layout: {what_differs}")


class _Found:
    """What the probe read of one template: the template, where, its text as shipped and whether ours is on it."""

    def __init__(self, probe: Probe, template=None, where: str = "", text: str = "", ours: bool = False):
        self.probe, self.template, self.where, self.text, self.ours = probe, template, where, text, ours

    @property
    def to_correct(self) -> bool:
        return self.probe.verdict == NEEDED and not self.ours


class _Inspection:
    """The verdict on the module's templates together (``probe``) and on each (``halves``, backward first)."""

    def __init__(self, probe: Probe, halves: tuple[_Found, ...] = ()):
        self.probe, self.halves = probe, halves

    @property
    def ours(self) -> bool:
        """Whether every template that needs the correction carries ours (and none is unreadable)."""
        needed = [h for h in self.halves if h.probe.verdict == NEEDED]
        return self.probe.verdict == NEEDED and all(h.ours for h in needed)


def combined(halves) -> Probe:
    """One verdict for the templates of a module: unrecognised when any is (the first such reason), needed when
    any is (every needed one's reason), else upstream-has-fix (every reason)."""
    for half in halves:
        if half.probe.verdict not in (NEEDED, UPSTREAM_HAS_FIX):
            return half.probe
    needed = [h.probe.reason for h in halves if h.probe.verdict == NEEDED]
    if needed:
        return Probe.needed("; ".join(needed))
    return Probe.upstream_has_fix("; ".join(h.probe.reason for h in halves))


def locate(modules) -> tuple[str, str, str]:
    """(module name, backward attribute, forward attribute) of the first layout whose module in the applier's
    ``modules`` holds both templates."""
    for module_name, backward, forward in LOCATIONS:
        module = modules.get(module_name)
        if module is not None and hasattr(module, backward) and hasattr(module, forward):
            return module_name, backward, forward
    raise LookupError("no Flex Attention forward and backward templates at "
                      + ", ".join(f"{m}.{b} / {f}" for m, b, f in LOCATIONS))


def _module_text(module) -> str:
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=16)
def _compiled(cls, text: str):
    """The code Jinja compiles ``text`` to, through the template class's own environment (cached: the
    status table asks again on every call)."""
    template = cls._template_from_string(text)
    return None if template is None else template.root_render_func.__code__


def _compiled_from(template, text: str) -> bool:
    """Whether the template's live Jinja template is the compilation of ``text``."""
    live = getattr(getattr(template, _ATTR, None), "root_render_func", None)
    return live is not None and _compiled(type(template), text) == live.__code__


def _judge_text(template, where: str, text: str, shipped_by: str, first_line=1) -> _Found:
    """The verdict on a template whose text (``text``, as its module ships it, numbered in its module as
    ``first_line`` says: see :func:`masked_loads.read`) was recovered."""
    reading = masked_loads.read(text, first_line)
    if reading.shape == masked_loads.UNKNOWN:
        return _Found(_unknown(f"{where}: its text has loads this patch does not know: {reading.detail}"))
    if _compiled_from(template, text):
        if reading.shape == masked_loads.SWAPPED:
            return _Found(Probe.needed(f"{where} ({shipped_by}): {reading.detail}"), template, where, text)
        return _Found(Probe.upstream_has_fix(f"{where} ({shipped_by}): {reading.detail}"), template, where, text)
    if reading.shape == masked_loads.SWAPPED and _compiled_from(template, masked_loads.fixed(text)):
        return _Found(Probe.needed(f"{where} already has this patch set's corrected loads (nothing left to do)"),
                      template, where, text, ours=True)
    return _Found(_unknown(f"{where}'s Jinja template is not compiled from the text {shipped_by} gives it "
                           "(replaced after import?)"))


def _split(modules, module_name: str) -> _Inspection:
    """The split fwd / dq / dkdv layout: some of its templates' texts are built by calls, so the module's whole
    text is read (every template text in it is spliced from that text)."""
    text = _module_text(modules[module_name])
    if not text:
        return _Inspection(_unknown(f"the source of {module_name} cannot be read"))
    reading = masked_loads.read(text)
    if reading.shape in (masked_loads.CONSISTENT, masked_loads.NO_POINTER_LOADS):
        return _Inspection(Probe.upstream_has_fix(f"torch_npu's split Flex Attention templates ({module_name}): "
                                                  f"in the module's text, {reading.detail}"))
    return _Inspection(_unknown(f"{module_name} (split Flex Attention templates, which this patch does not "
                                f"edit): {reading.shape}: {reading.detail}"))


def _imported(template, where: str, origins) -> _Found:
    """A template that is another module's (torch's own, or a wrapper sharing its Jinja template)."""
    for module_name, name in origins:
        module = sys.modules.get(module_name)
        other = getattr(module, name, None) if module is not None else None
        if other is None or getattr(other, _ATTR, None) is not getattr(template, _ATTR, None):
            continue
        source = masked_loads.template_source(_module_text(module), name)
        if source.kind == "inline":
            found = _judge_text(template, where, source.text, f"{module_name}.{name}, line {source.line}",
                                source.line_map or source.first_line)
            if found.probe.verdict == NEEDED:  # another module's text: not this patch's to edit
                return _Found(_unknown(f"{where} is {module_name}.{name}, whose loads this patch would have to "
                                       f"correct in that module: {found.probe.reason}"))
            return found
        if module_name.startswith("torch."):
            return _Found(Probe.upstream_has_fix(
                f"{where} is torch's own template {module_name}.{name}, not a torch_npu text this patch edits "
                f"(torch keeps its text elsewhere, not read here: {source.detail or source.kind})"))
        return _Found(_unknown(f"{where} is {module_name}.{name}, whose text is not read here "
                               f"({source.detail or source.kind})"))
    names = ", ".join(f"{m}.{n}" for m, n in origins)
    return _Found(_unknown(f"{where} is imported ({names}) but is none of those templates"))


def _one(modules, module_name: str, attr: str) -> _Found:
    """The verdict on one module-level template."""
    template = getattr(modules[module_name], attr)
    where = f"{module_name}.{attr}"
    if not hasattr(template, _ATTR) or not callable(getattr(type(template), "_template_from_string", None)):
        return _Found(_unknown(f"{where} is a {type(template).__name__}, not a TritonTemplate with a Jinja "
                               "template"))
    text = _module_text(modules[module_name])
    if not text:
        return _Found(_unknown(f"the source of {module_name} cannot be read"))
    source = masked_loads.template_source(text, attr)
    if source.kind == "imported":
        return _imported(template, where, source.origins)
    if source.kind != "inline":
        return _Found(_unknown(f"{where}: {source.detail}"))
    return _judge_text(template, where, source.text, f"{module_name.rsplit('.', 1)[1]}.py line {source.line}",
                       source.line_map or source.first_line)


def _inspect(modules) -> _Inspection:
    try:
        module_name, backward, forward = locate(modules)
    except LookupError as exc:
        return _Inspection(_unknown(str(exc)))
    if backward.startswith(SPLIT_PREFIX):
        return _split(modules, module_name)
    halves = (_one(modules, module_name, backward), _one(modules, module_name, forward))
    return _Inspection(combined(halves), halves)


def probe(modules) -> Probe:
    return _inspect(modules).probe


def _fresh_code_cache(cache):
    """An empty cache of the same class, registered to be cleared with Inductor's fresh caches as the
    original was."""
    fresh = type(cache)()
    register = getattr(sys.modules.get("torch._inductor.utils"), "clear_on_fresh_cache", None)
    if register is not None:
        register(fresh)
    return fresh


def apply(modules, patcher):
    found = _inspect(modules)
    if found.probe.verdict != NEEDED:
        return f"nothing changed: {found.probe.reason}"
    todo = [h for h in found.halves if h.to_correct]
    if not todo:
        return "nothing changed: the corrected loads are already installed"
    # Every text compiled before anything is installed: a failure leaves nothing half done.
    compiled = [type(h.template)._template_from_string(masked_loads.fixed(h.text)) for h in todo]
    if any(c is None for c in compiled):
        raise RuntimeError("torch could not compile the corrected template (no jinja2)")
    notes = []
    for half, jinja in zip(todo, compiled):
        patcher.setattr(half.template, _ATTR, jinja)
        cache = getattr(half.template, _CODE_CACHE, None)
        if cache is not None:
            patcher.setattr(half.template, _CODE_CACHE, _fresh_code_cache(cache))
        fixed = masked_loads.read(half.text).swapped
        bounds = masked_loads.unbounded_indices(half.text)
        notes.append(f"{half.where}: {len(fixed)} load(s) now masked along their pointers' own axes "
                     f"({', '.join(ld.target for ld in fixed)})"
                     + (f", {len(bounds)} index line(s) bounded when not IS_DIVISIBLE" if bounds else ""))
    return "; ".join(notes)


def superseded(modules) -> str | None:
    """What replaced our corrected templates after we installed them."""
    found = _inspect(modules)
    if found.ours:
        return None
    return found.probe.reason if found.probe.verdict != NEEDED else (
        "; ".join(h.probe.reason for h in found.halves if h.to_correct))
