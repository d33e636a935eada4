"""Which Python runs a torch_npu release's own binaries on its own torch line, changing neither.

A wheel requires one torch (``Requires-Dist: torch==2.7.1+cpu``, ``torch==2.13.0.*``): Ascend machines run
a CPU build of it. This interpreter serves when its torch is that release; otherwise a virtual
environment with the CPU build (``torch==X+cpu``, when pip can find one: the package index and pip's
find-links) is made once, beside the test environments. Where neither exists the release cannot run
here, and :class:`LineUnavailable` says why in one line. The package index's CUDA builds of torch 2.10
and later cannot stand in: they register allocator keys that torch_npu registers again, and the import
aborts (docs/facts.md, "Lines after 2.7").

API:
    required_torch(release) -> str            "2.13.0"
    cpu_builds() -> list[str]                 "2.13.0+cpu", ... (pip index versions; no download)
    python_for(release) -> str                an interpreter path, or LineUnavailable
    assign(release, python) / unassign(release)   a caller's interpreter for a release none of the above serves
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from . import wheels
from .wheels import required_torch  # the fetch step's (the release's wheel or installed files say it)

__all__ = ["LineUnavailable", "required_torch", "cpu_builds", "python_for", "venv_root", "assign", "unassign"]

#: What a line's environment holds besides torch (torch_npu imports pyyaml without declaring it).
EXTRAS = ("pyyaml", "numpy")


#: Interpreters a caller assigned to releases (the release matrix: its environment of a torch line, the package
#: index's build), consulted only where neither this interpreter nor a CPU build serves.
_ASSIGNED: dict[str, str] = {}


def assign(release: str, python: str) -> None:
    _ASSIGNED[release] = python


def unassign(release: str) -> None:
    _ASSIGNED.pop(release, None)


class LineUnavailable(RuntimeError):
    """The release's torch line cannot run here (the message says why, in one line)."""


def _base(version: str) -> str:
    return version.split("+")[0]


@lru_cache(maxsize=1)
def cpu_builds() -> tuple[str, ...]:
    """torch versions pip can install as a CPU build (``X+cpu``), read with ``pip index versions``."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=300)
    m = re.search(r"^Available versions:\s*(.+)$", proc.stdout, re.M)
    return tuple(v.strip() for v in m.group(1).split(",") if v.strip().endswith("+cpu")) if m else ()


def venv_root() -> Path:
    return wheels.CACHE_ROOT


def _this_torch() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _line_venv(cpu_version: str) -> Path:
    """A virtual environment with torch ``cpu_version`` and :data:`EXTRAS` (made once: in a folder of
    its own, then renamed into place)."""
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    dest = venv_root() / f"venv-torch{cpu_version}-{py}"
    python = dest / "bin" / "python"
    if (dest / ".complete").exists():
        return python
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".venv-torch{cpu_version}-", dir=dest.parent))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
        proc = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               f"torch=={cpu_version}", *EXTRAS], capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            tail = " ".join(proc.stderr.strip().splitlines()[-2:])
            raise LineUnavailable(f"installing torch=={cpu_version} failed: {tail}")
        (tmp / ".complete").write_text(cpu_version + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / ".complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return python


def python_for(release: str) -> str:
    """The interpreter that runs ``release`` on its own torch line: this one when its torch is that
    release (any build: the CUDA build of 2.7.1 has no allocator-key registry), else a CPU build's
    environment; :class:`LineUnavailable` when there is none (``wheels.WheelUnavailable`` where the wheel that says
    which torch it requires cannot be had)."""
    want = required_torch(release)
    mine = _this_torch()
    if mine is not None and _base(mine) == want:
        return sys.executable
    cpu = [v for v in cpu_builds() if _base(v) == want]
    if not cpu and release in _ASSIGNED:
        return _ASSIGNED[release]
    if not cpu:
        raise LineUnavailable(
            f"torch_npu {release} requires torch {want}: no CPU build of it here (pip index versions torch), and "
            f"{'this interpreter has torch ' + mine if mine else 'this interpreter has no torch'} (a CUDA build of torch "
            f"2.10 or later aborts torch_npu's import: a duplicate allocator key, docs/facts.md)")
    return str(_line_venv(cpu[0]))
