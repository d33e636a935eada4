"""The patch declarations (``patches/*.toml``) as validated values."""
from __future__ import annotations

import dataclasses
import functools
import sys

import torch_npu_patchset_autoload as _autoload

_REQUIRED = ("id", "title", "why", "upstream", "remove_when", "implementation", "hooks", "detection", "targets")
#: Text fields, shown by ``status --verbose`` (or read by the applier): each a non-empty string.
_TEXT = ("id", "title", "why", "upstream", "remove_when", "implementation", "detection")
_OPTIONAL = ("order", "alternative_hooks", "import_first", "missing_means", "_path")


class DeclarationError(ValueError):
    """A declaration that cannot be used: one line naming its file and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Declaration:
    id: str
    title: str
    why: str  # why the patch exists (short; the rules themselves are in docs/design.md)
    upstream: str  # where the fix stands upstream
    remove_when: str  # when this patch can be deleted
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
        raise DeclarationError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:  # a misspelt key (remove-when) would otherwise be dropped without a word
        raise DeclarationError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                               f"known: {', '.join(_REQUIRED + _OPTIONAL[:-1])}")
    bad = [k for k in _TEXT + ("missing_means",) if k in table and (not isinstance(table[k], str)
                                                                     or not table[k].strip())]
    if bad:
        raise DeclarationError(f"{where}: {', '.join(bad)} must be non-empty text")
    if not isinstance(table["targets"], dict):
        raise DeclarationError(f"{where}: targets must be a table ([targets])")
    sets = [tuple(hooks) for hooks in _autoload.hook_sets(table)]
    for hooks in sets:
        bad = [h for h in hooks if not isinstance(h, str) or h.count(":") != 1 or not all(h.split(":"))]
        if not hooks or bad:
            raise DeclarationError(f"{where}: hooks must be non-empty 'module:qualname' strings, got {bad or hooks}")
    hooks = sets[0]
    targets = table["targets"]
    layouts = targets.get("layouts", {})
    if not isinstance(layouts, dict) or not all(
            isinstance(v, list) and all(isinstance(r, str) for r in v) for v in layouts.values()):
        raise DeclarationError(f"{where}: [targets.layouts] must map a layout description to a list of releases")
    return Declaration(
        id=table["id"],
        title=table["title"].strip(),
        why=" ".join(table["why"].split()),
        upstream=" ".join(table["upstream"].split()),
        remove_when=" ".join(table["remove_when"].split()),
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


def _tables() -> list[dict]:
    try:
        return _autoload.read_declarations()
    except ValueError as exc:  # a TOML syntax error, which does not say in which file
        raise DeclarationError(f"{_unparsable() or _autoload.declarations_dir()}: not valid TOML: {exc}") from None


def _unparsable():
    """The first declaration file that does not parse, or None."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python < 3.11 only
        import tomli as tomllib
    for path in sorted(_autoload.declarations_dir().glob("*.toml")):
        try:
            tomllib.loads(path.read_text())
        except ValueError:
            return path
    return None


@functools.lru_cache(maxsize=None)
def load() -> tuple[Declaration, ...]:
    decls = tuple(parse(t) for t in _tables())
    ids = [d.id for d in decls]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise DeclarationError(f"duplicate patch ids: {dupes}")
    return decls
