"""Applies the declared patches: feature-detected, idempotent, all-or-nothing.

One :class:`PatchStatus` per declaration, kept for the life of the process.
A patch is applied only when its target modules are imported and its hooked
objects resolve, its probe says upstream lacks the fix, and it is not
disabled through ``TORCH_NPU_PATCHSET_DISABLE``. Settled states (applied,
upstream-has-fix, disabled, failed) are never re-evaluated, so nothing is
applied twice; ``pending`` and ``target-missing`` are re-evaluated.

``target-missing`` means no module of any of a patch's hook sets exists (the
code it fixes is not installed). When a target module exists but the objects
it hooks do not resolve in it, that is a layout the patch does not know, which
may well carry the bug: the state is ``failed``, and the reason says what is
missing where.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Iterable

import torch_npu_patchset_autoload as _autoload

from . import _declarations
from ._patching import NEEDED, UPSTREAM_HAS_FIX, FixModule, Patcher

log = logging.getLogger(_autoload.LOGGER_NAME)

APPLIED = "applied"
UPSTREAM = "upstream-has-fix"
TARGET_MISSING = "target-missing"
DISABLED = "disabled"
FAILED = "failed"
PENDING = "pending"  # in-process only: waiting for a target module's first import
_UNRESOLVED = "unresolved"  # internal: a hook set's modules exist, its objects do not
_STILL_IMPORTING = " (still being imported)"
SETTLED = frozenset({APPLIED, UPSTREAM, DISABLED, FAILED})


@dataclasses.dataclass
class PatchStatus:
    id: str
    state: str
    reason: str
    targets: tuple[str, ...]
    note: str = ""  # what the patch did, e.g. which upstream code it replaced

    @property
    def label(self) -> str:
        return f"{FAILED}: {self.reason}" if self.state == FAILED else self.state

    @classmethod
    def from_json(cls, row: dict) -> "PatchStatus":
        return cls(row["id"], row["state"], row["reason"], tuple(row["targets"]), row.get("note", ""))

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "state": self.state,
            "reason": self.reason,
            "targets": list(self.targets),
            "note": self.note,
        }


_lock = threading.RLock()
_status: dict[str, PatchStatus] = {}
_applied: dict[str, tuple[ModuleType, dict[str, ModuleType]]] = {}  # id -> (fix module, targets)


def _initial(decl) -> PatchStatus:
    return PatchStatus(decl.id, PENDING, "waiting for its target modules to be imported", decl.hooks)


def status() -> list[PatchStatus]:
    with _lock:
        rows = [dataclasses.replace(_status.setdefault(d.id, _initial(d))) for d in _declarations.load()]
    for row in rows:
        # Something imported later (say, torch_npu's own copy of a fix) may
        # have replaced what we installed; a fix can tell through superseded().
        fix, modules = _applied.get(row.id, (None, None))
        check = getattr(fix, "superseded", None)
        if row.state == APPLIED and check is not None:
            try:
                by = check(modules)
            except Exception as exc:
                by = f"could not check ({type(exc).__name__}: {exc})"
            if by:
                row.note = f"{row.note}; since superseded: {by}" if row.note else f"since superseded: {by}"
    return rows


def _module_findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing
        return False


def _resolve(hook: str, modules: dict[str, ModuleType]):
    module_name, qualname = hook.split(":", 1)
    obj = modules[module_name]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _gather_set(decl, hooks, import_targets: bool) -> tuple[str, str, dict[str, ModuleType]]:
    """(state, reason, modules) for one hook set: PENDING/TARGET_MISSING/FAILED,
    or '' when every module is imported and every hooked object resolves."""
    modules: dict[str, ModuleType] = {}
    for name in _declarations.modules_of(hooks):
        if not _autoload._imported(name):
            if not import_targets:
                still = _STILL_IMPORTING if name in sys.modules else ""
                return PENDING, f"{name} not imported yet{still}", modules
            try:
                # Some targets cannot be imported first (torch 2.7.1's
                # kernel.flex_attention): import what the declaration says,
                # before even looking the target up.
                for first in decl.import_first:
                    if _module_findable(first):
                        importlib.import_module(first)
                if not _module_findable(name):
                    return TARGET_MISSING, f"module {name} not found", modules
                importlib.import_module(name)
            except Exception as exc:
                return FAILED, f"importing {name} raised {type(exc).__name__}: {exc}", modules
        modules[name] = sys.modules[name]
    for hook in hooks:
        try:
            _resolve(hook, modules)
        except AttributeError as exc:
            return _UNRESOLVED, f"{hook} does not resolve ({exc})", modules
    return "", "", modules


def _gather(decl, import_targets: bool) -> tuple[str, str, dict[str, ModuleType], tuple[str, ...]]:
    """The first hook set that is present wins; (state, reason, modules, hooks).

    None present: PENDING if some set still waits for an import; else FAILED
    (unrecognised layout) if some set's modules exist without its objects;
    else TARGET_MISSING."""
    results = []
    for hooks in decl.hook_sets:
        state, reason, modules = _gather_set(decl, hooks, import_targets)
        if state in ("", FAILED):
            return state, reason, modules, hooks
        if state == PENDING and reason.endswith(_STILL_IMPORTING):
            # A module of an earlier layout is half way through its import (it imported one of a
            # later layout's modules): its objects are not there yet, so wait rather than let the
            # later layout decide.
            return state, reason, modules, hooks
        results.append((state, reason, modules, hooks))
    for wanted in (PENDING, _UNRESOLVED, TARGET_MISSING):
        found = [r for r in results if r[0] == wanted]
        if found:
            break
    state, reason, modules, hooks = found[0]
    if state == _UNRESOLVED:
        reasons = "; ".join(r[1] for r in found)
        return FAILED, f"unrecognised layout: its target module is there, but {reasons}", modules, hooks
    if state == TARGET_MISSING and decl.alternative_hooks:
        reason += f" (nor any of {len(decl.alternative_hooks)} alternative hook set(s))"
    if state == TARGET_MISSING and decl.missing_means:
        reason += f": {decl.missing_means}"
    return state, reason, modules, hooks


def _settle(decl, st: PatchStatus, import_targets: bool) -> None:
    off = _autoload.disabled_ids()
    if off is not None and ("*" in off or decl.id in off):
        st.state, st.reason = DISABLED, f"{_autoload.DISABLE_ENV}={os.environ.get(_autoload.DISABLE_ENV, '')}"
        return
    state, reason, modules, hooks = _gather(decl, import_targets)
    st.targets = hooks
    if st.state in SETTLED:
        return  # importing a target ran the import hook, which settled it
    if state == PENDING and st.state == TARGET_MISSING:
        return  # the hook does not import; what an import found missing stays so
    if state:
        st.state, st.reason = state, reason
        return
    try:
        fix = importlib.import_module(decl.implementation)
        if not isinstance(fix, FixModule):
            raise TypeError(f"{decl.implementation} is not a fix module: it needs probe(modules) and "
                            f"apply(modules, patcher)")
        probe = fix.probe(modules)
    except NotImplementedError as exc:
        st.state, st.reason = FAILED, str(exc) or "not implemented"
        return
    except Exception as exc:
        st.state, st.reason = FAILED, f"probe raised {type(exc).__name__}: {exc}"
        return
    if probe.verdict == UPSTREAM_HAS_FIX:
        st.state, st.reason = UPSTREAM, probe.reason
        return
    if probe.verdict != NEEDED:
        st.state, st.reason = FAILED, probe.reason
        return
    patcher = Patcher()
    try:
        note = fix.apply(modules, patcher)
    except Exception as exc:
        patcher.rollback()
        st.state, st.reason = FAILED, f"apply raised {type(exc).__name__}: {exc} (rolled back)"
        return
    st.state, st.reason, st.note = APPLIED, probe.reason, note or ""
    _applied[decl.id] = (fix, modules)


def apply(ids: Iterable[str] | None = None, *, import_targets: bool = True) -> list[PatchStatus]:
    wanted = None if ids is None else set(ids)
    decls = _declarations.load()
    _autoload.warn_unknown_disabled(d.id for d in decls)  # a typo disables nothing: say so, once
    if wanted is not None:
        unknown = wanted - {d.id for d in decls}
        if unknown:
            raise ValueError(f"unknown patch ids {sorted(unknown)}; known: {[d.id for d in decls]}")
    with _lock:
        for decl in decls:
            if wanted is not None and decl.id not in wanted:
                continue
            st = _status.setdefault(decl.id, _initial(decl))
            if st.state in SETTLED:
                continue
            _settle(decl, st, import_targets)
            level = logging.WARNING if st.state == FAILED else logging.DEBUG
            log.log(level, "patch %s: %s (%s)", decl.id, st.label, st.reason)
    return status()


def apply_ready(trigger: str = "") -> list[PatchStatus]:
    """Apply the patches whose target modules are all imported (import hook)."""
    log.debug("import of %s: applying ready patches", trigger)
    return apply(import_targets=False)


def _reset_for_tests() -> None:
    with _lock:
        _status.clear()
        _applied.clear()
        _declarations.load.cache_clear()
