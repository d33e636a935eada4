"""npu-empty-cache-launch-memory: ``torch.npu.empty_cache()`` returns the launch memory the C++ wrappers keep.

The runtime helper keeps one caching-allocator block per calling thread and stream (docs/design.md, "When the block
goes back"); torch_npu's allocator runs the helper's free-memory callback at a cache miss, but its ``emptyCache``
runs no callback. ``torch.npu.graph`` synchronises and calls ``empty_cache`` as it starts a capture, and during a
capture the allocator neither runs its out-of-memory retry nor takes a block back: so the blocks kept by an eager
warm-up stayed allocated through the capture, where an operator's cached workspace would have been freed at its
start (issue 53). The patch hands every idle kept block back (``launch_memory_back.give_back``) before torch_npu's
``empty_cache`` runs, which then synchronises the device and frees them with the rest of the cache.
"""
from __future__ import annotations

import functools

from .. import launch_memory_back
from .._patching import NEEDED, Probe, source_of

MODULE = "torch_npu.npu.memory"
PACKAGE = "torch_npu.npu"
_MARK = "__torch_npu_patchset_empty_cache__"


def probe(modules) -> Probe:
    memory = modules[MODULE]
    fn = getattr(memory, "empty_cache", None)
    if not callable(fn):
        return Probe.unrecognised(f"{MODULE} has no empty_cache")
    exported = getattr(modules[PACKAGE], "empty_cache", None)
    if exported is not None and exported not in (fn, getattr(fn, "__wrapped__", None)):
        return Probe.unrecognised(f"{PACKAGE}.empty_cache is not {MODULE}.empty_cache")
    if getattr(fn, _MARK, False):
        return Probe.needed(f"{MODULE}.empty_cache already hands the kept launch memory back (nothing left to do)")
    if launch_memory_back.SYMBOL in source_of(fn):
        return Probe.upstream_has_fix(f"{MODULE}.empty_cache hands the kept launch memory back itself")
    if "_npu_emptyCache" not in source_of(fn):
        return Probe.unrecognised(f"{MODULE}.empty_cache does not call torch_npu._C._npu_emptyCache")
    return Probe.needed(f"{MODULE}.empty_cache runs no free-memory callback: launch memory kept by the C++ "
                        "wrappers stays allocated (a graph capture started after an eager warm-up cannot use it)")


def apply(modules, patcher):
    verdict = probe(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    memory = modules[MODULE]
    upstream = memory.empty_cache
    if getattr(upstream, _MARK, False):
        return "nothing changed: already installed"

    @functools.wraps(upstream)
    def empty_cache():
        launch_memory_back.give_back()  # first: the device synchronisation that follows covers their launches
        return upstream()

    setattr(empty_cache, _MARK, True)
    patcher.setattr(memory, "empty_cache", empty_cache)
    package = modules[PACKAGE]
    if getattr(package, "empty_cache", None) is not upstream:  # (a package that does not re-export it)
        return f"{MODULE}.empty_cache: the kept launch memory goes back first ({PACKAGE} exports no empty_cache)"
    patcher.setattr(package, "empty_cache", empty_cache)  # torch.npu.empty_cache, what torch.npu.graph calls
    return f"{MODULE}.empty_cache and {PACKAGE}.empty_cache: the kept launch memory goes back first"
