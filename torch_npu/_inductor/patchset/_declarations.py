"""The patch declarations (``patches/*.toml``) as validated values."""
from __future__ import annotations

import dataclasses
import functools

import torch_npu_patchset_autoload as _autoload

_REQUIRED = ("id", "title", "why", "upstream", "implementation", "hooks", "detection", "targets")


@dataclasses.dataclass(frozen=True)
class Declaration:
    id: str
    title: str
    why: str
    upstream: str
    implementation: str  # module with probe() and apply()
    hooks: tuple[str, ...]  # "module:qualname"
    alternative_hooks: tuple[tuple[str, ...], ...]  # tried in order when `hooks` is missing
    import_first: tuple[str, ...]
    detection: str
    torch_lines: tuple[str, ...]
    torch_npu_branches: tuple[str, ...]
    path: str
    #: layout description -> torch_npu releases read with that layout (``[targets.layouts]``)
    layouts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: what target-missing means for this patch (appended to that state's reason), if said
    missing_means: str = ""

    @property
    def hook_sets(self) -> tuple[tuple[str, ...], ...]:
        return (self.hooks, *self.alternative_hooks)


def modules_of(hooks) -> tuple[str, ...]:
    return tuple(_autoload.target_modules({"hooks": list(hooks)}))


def parse(table: dict) -> Declaration:
    where = table.get("_path", "<declaration>")
    missing = [k for k in _REQUIRED if k not in table]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    sets = [tuple(hooks) for hooks in _autoload.hook_sets(table)]
    for hooks in sets:
        bad = [h for h in hooks if not isinstance(h, str) or h.count(":") != 1 or not all(h.split(":"))]
        if not hooks or bad:
            raise ValueError(f"{where}: hooks must be non-empty 'module:qualname' strings, got {bad or hooks}")
    hooks = sets[0]
    targets = table["targets"]
    layouts = targets.get("layouts", {})
    if not isinstance(layouts, dict) or not all(
            isinstance(v, list) and all(isinstance(r, str) for r in v) for v in layouts.values()):
        raise ValueError(f"{where}: [targets.layouts] must map a layout description to a list of releases")
    return Declaration(
        id=table["id"],
        title=table["title"].strip(),
        why=" ".join(table["why"].split()),
        upstream=table["upstream"],
        implementation=table["implementation"],
        hooks=hooks,
        alternative_hooks=tuple(sets[1:]),
        import_first=tuple(table.get("import_first", ())),
        detection=" ".join(table["detection"].split()),
        torch_lines=tuple(targets.get("torch", ())),
        torch_npu_branches=tuple(targets.get("torch_npu_branches", ())),
        path=where,
        layouts=tuple((name, tuple(releases)) for name, releases in layouts.items()),
        missing_means=" ".join(str(table.get("missing_means", "")).split()),
    )


@functools.lru_cache(maxsize=None)
def load() -> tuple[Declaration, ...]:
    decls = tuple(parse(t) for t in _autoload.read_declarations())
    ids = [d.id for d in decls]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate patch ids: {dupes}")
    return decls
