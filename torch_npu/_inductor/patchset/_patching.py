"""What a fix module is (:class:`FixModule`) and the two small values it works with:
a probe verdict and a patcher.

A fix module (``fixes/<id>.py``) defines

    def probe(modules: dict[str, ModuleType]) -> Probe
    def apply(modules: dict[str, ModuleType], patcher: Patcher) -> str | None

``apply`` makes every change through ``patcher`` so that the applier can undo
all of them if anything raises half way: a patch is applied whole or not at
all. It may return a short note for the status table. Optionally,

    def superseded(modules) -> str | None

says what has since replaced the patch's work (status reports it).
"""
from __future__ import annotations

import dataclasses
import inspect
from types import ModuleType
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

NEEDED = "needed"
UPSTREAM_HAS_FIX = "upstream-has-fix"
UNRECOGNISED = "unrecognised"

_MISSING = object()


@runtime_checkable
class FixModule(Protocol):
    """The contract of a ``fixes/<id>.py`` module (the applier calls nothing else)."""

    def probe(self, modules: Mapping[str, ModuleType]) -> "Probe": ...

    def apply(self, modules: Mapping[str, ModuleType], patcher: "Patcher") -> Optional[str]: ...


@dataclasses.dataclass(frozen=True)
class Probe:
    verdict: str  # NEEDED | UPSTREAM_HAS_FIX | UNRECOGNISED
    reason: str

    @classmethod
    def needed(cls, reason: str) -> "Probe":
        return cls(NEEDED, reason)

    @classmethod
    def upstream_has_fix(cls, reason: str) -> "Probe":
        return cls(UPSTREAM_HAS_FIX, reason)

    @classmethod
    def unrecognised(cls, what_differs: str) -> "Probe":
        return cls(UNRECOGNISED, what_differs)


def source_of(obj: Any) -> str:
    """Source text of a hooked function, or '' when it cannot be read (a
    probe then treats the shape as unrecognised rather than guessing)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


class Patcher:
    """Records attribute replacements so they can be rolled back as one."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def setattr(self, owner: Any, name: str, value: Any) -> None:
        # Read from __dict__ where there is one, so an inherited attribute is
        # restored by deleting ours rather than by copying the parent's down.
        own = vars(owner) if hasattr(owner, "__dict__") else {}
        previous = own.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        setattr(owner, name, value)
        self._undo.append((owner, name, previous))

    @property
    def changes(self) -> int:
        return len(self._undo)

    def rollback(self) -> None:
        while self._undo:
            owner, name, previous = self._undo.pop()
            if previous is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, previous)
