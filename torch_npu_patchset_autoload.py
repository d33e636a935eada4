"""``torch.backends`` entry point of torch-npu-inductor-patches.

torch calls :func:`autoload` from ``import torch``. This module therefore:

* imports only the standard library (importing anything under
  ``torch_npu._inductor`` would run a real torch_npu's heavy
  ``_inductor/__init__``, and ``torch._inductor`` costs seconds);
* never raises: torch turns an exception here into a failed ``import torch``,
  so every failure is logged and kept in :data:`FAILURES` for ``status``;
* applies nothing itself: it arms a post-import hook for each patch's target
  modules, and the patch set proper (``torch_npu._inductor.patchset``) is
  imported only once those modules have finished executing. A target already
  imported is patched at once. This also makes the order in which torch loads
  entry points (ours and torch_npu's) irrelevant.
* never makes a real torch_npu's ``_inductor/__init__`` run early: a torch-side
  target (the Flex template) is imported half way through
  ``torch._inductor.lowering``, so when ``torch_npu._inductor`` is a regular
  package that has not been imported yet, the patch set is loaded from its
  directory without importing that parent (see :func:`patchset_package`).

It also knows where the patch declarations live, so that the one place that
must find them before ``torch_npu._inductor`` may be imported is this one.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from pathlib import Path

LOGGER_NAME = "torch_npu._inductor.patchset"
PACKAGE = "torch_npu._inductor.patchset"
_PARENT = "torch_npu._inductor"
DISABLE_ENV = "TORCH_NPU_PATCHSET_DISABLE"
_log = logging.getLogger(LOGGER_NAME)

#: (what, repr(exception)) for every failure inside the entry point.
FAILURES: list[tuple[str, str]] = []
#: True once :func:`autoload` armed its hooks.
ACTIVE = False

_lock = threading.RLock()
_finder: "_PostImportFinder | None" = None


def declarations_dir() -> Path:
    """Directory of the ``*.toml`` patch declarations.

    A built wheel carries them in the package (``_declarations``); a source
    tree or editable install reads the top-level ``patches/`` in place.
    """
    override = os.environ.get("TORCH_NPU_PATCHSET_DECLARATIONS")
    if override:  # tests and experiments: another set of declarations
        return Path(override)
    here = Path(__file__).resolve().parent
    for candidate in (here / "torch_npu" / "_inductor" / "patchset" / "_declarations", here / "patches"):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate
    raise FileNotFoundError(f"no patch declarations next to {here}")


def read_declarations() -> list[dict]:
    """Raw declaration tables, in declared order (validation lives in the package)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python < 3.11 only
        import tomli as tomllib
    tables = []
    for path in sorted(declarations_dir().glob("*.toml")):
        with open(path, "rb") as f:
            table = tomllib.load(f)
        table["_path"] = str(path)
        tables.append(table)
    tables.sort(key=lambda t: (t.get("order", 1 << 30), t.get("id", "")))
    return tables


def disabled_ids(value: str | None = None) -> frozenset[str] | None:
    """Parse ``TORCH_NPU_PATCHSET_DISABLE``: ``None`` = all enabled,
    ``frozenset()`` never; ``{'*'}`` = everything off; else the listed ids."""
    value = os.environ.get(DISABLE_ENV, "") if value is None else value
    value = value.strip()
    if not value or value.lower() in ("0", "false", "no", "off"):
        return None
    if value.lower() in ("1", "true", "yes", "on", "all", "*"):
        return frozenset({"*"})
    return frozenset(part.strip() for part in value.split(",") if part.strip())


_warned_unknown = False
#: Set once warned, so that the processes this one starts (Inductor's compile workers import torch
#: too) do not repeat the warning for the same value.
_WARNED_ENV = "_TORCH_NPU_PATCHSET_WARNED_DISABLE"


def unknown_disabled_ids(known_ids) -> list[str]:
    """Ids listed in ``TORCH_NPU_PATCHSET_DISABLE`` that name no declared patch (a typo
    disables nothing: the patch it meant stays applied)."""
    off = disabled_ids()
    if not off or "*" in off:
        return []
    return sorted(off - set(known_ids))


def warn_unknown_disabled(known_ids) -> list[str]:
    """:func:`unknown_disabled_ids`, logged as a warning that names the valid ids, once per process and
    the processes it starts."""
    global _warned_unknown
    known_ids = list(known_ids)
    unknown = unknown_disabled_ids(known_ids)
    value = os.environ.get(DISABLE_ENV, "")
    with _lock:
        if unknown and not _warned_unknown and os.environ.get(_WARNED_ENV) != value:
            _warned_unknown = True
            os.environ[_WARNED_ENV] = value
            _log.warning("torch_npu._inductor.patchset: %s=%s names no patch: %s (it disables nothing); "
                         "valid ids: %s, or 1 for all", DISABLE_ENV, value,
                         ", ".join(unknown), ", ".join(known_ids))
    return unknown


def hook_sets(table: dict) -> list[list[str]]:
    """A declaration's ``hooks``, then each of its ``alternative_hooks`` sets
    (where other releases keep the same objects)."""
    return [list(table.get("hooks", []))] + [list(alt) for alt in table.get("alternative_hooks", [])]


def target_modules(table: dict) -> list[str]:
    """Modules a declaration may hook, from its ``module:qualname`` entries."""
    mods: list[str] = []
    for hooks in hook_sets(table):
        for hook in hooks:
            mod = hook.split(":", 1)[0]
            if mod not in mods:
                mods.append(mod)
    return mods


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader; runs the callback once the module executed."""

    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback(module.__name__)

    def __getattr__(self, name):  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that only wraps the loaders of watched module names."""

    def __init__(self, callback):
        self.watched: set[str] = set()
        self._callback = callback
        self._local = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.watched:
            return None
        busy = self._local.__dict__.setdefault("busy", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader, self._callback)
        return spec


#: Watched modules whose code has run (importlib still marks them as
#: initialising while our loader's callback runs).
_executed: set[str] = set()


def _imported(name: str) -> bool:
    """True once module ``name`` has finished executing."""
    module = sys.modules.get(name)
    if module is None:
        return False
    if name in _executed:
        return True
    spec = getattr(module, "__spec__", None)
    return not getattr(spec, "_initializing", False)


def _heavy_parent_on_path() -> bool:
    """True when ``torch_npu/_inductor`` on sys.path is a regular package (a
    real torch_npu), whose ``__init__`` an import of our subpackage would run."""
    for entry in sys.path:
        try:
            if (Path(entry or ".") / "torch_npu" / "_inductor" / "__init__.py").is_file():
                return True
        except (OSError, ValueError):
            continue
    return False


def patchset_package():
    """``torch_npu._inductor.patchset``, imported without running a real
    torch_npu's ``_inductor/__init__`` before torch_npu itself does.

    When the parent is a regular package not imported yet, the subpackage is
    loaded from the directory installed beside this module and registered
    under its real name; its own imports are relative or ``from`` imports, so
    they resolve without the parent. The parent gets its ``patchset``
    attribute when it is imported later. Otherwise this is a plain import.
    """
    module = sys.modules.get(PACKAGE)
    if module is not None:
        return module
    pkg_dir = Path(__file__).resolve().parent / "torch_npu" / "_inductor" / "patchset"
    if _PARENT in sys.modules or not (pkg_dir / "__init__.py").is_file() or not _heavy_parent_on_path():
        return importlib.import_module(PACKAGE)
    spec = importlib.util.spec_from_file_location(PACKAGE, pkg_dir / "__init__.py",
                                                  submodule_search_locations=[str(pkg_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(PACKAGE, None)
        raise
    if _finder is not None:
        _finder.watched.add(_PARENT)  # to bind parent.patchset once torch_npu imports it
    _log.debug("%s: loaded from %s without importing %s", PACKAGE, pkg_dir, _PARENT)
    return module


def _on_imported(name: str) -> None:
    """A watched module finished executing: apply every patch now complete."""
    with _lock:
        _executed.add(name)
        if _finder is not None:
            _finder.watched.discard(name)
        try:
            if name == _PARENT and PACKAGE in sys.modules and not hasattr(sys.modules[name], "patchset"):
                sys.modules[name].patchset = sys.modules[PACKAGE]
            patchset_package()
            importlib.import_module(PACKAGE + "._applier").apply_ready(trigger=name)
        except Exception as exc:  # never break the user's import
            FAILURES.append((f"applying after import of {name}", repr(exc)))
            _log.warning("torch_npu._inductor.patchset: applying after import of %s failed: %r", name, exc)


def autoload() -> None:
    """Entry point called by ``import torch``. Never raises."""
    global ACTIVE, _finder
    try:
        with _lock:
            if ACTIVE:
                return
            off = disabled_ids()
            if off is not None and "*" in off:
                _log.debug("torch_npu._inductor.patchset: disabled by %s", DISABLE_ENV)
                return
            tables = read_declarations()
            warn_unknown_disabled(table.get("id") for table in tables)
            watched = {
                mod
                for table in tables
                if off is None or table.get("id") not in off
                for mod in target_modules(table)
            }
            _finder = _PostImportFinder(_on_imported)
            _finder.watched = {m for m in watched if not _imported(m)}
            sys.meta_path.insert(0, _finder)
            ACTIVE = True
            ready = sorted(watched - _finder.watched)
        for name in ready:
            _on_imported(name)
    except Exception as exc:
        FAILURES.append(("autoload", repr(exc)))
        _log.warning("torch_npu._inductor.patchset: autoload failed: %r", exc)
