"""What the status command reports about the environment."""
from __future__ import annotations

import importlib.metadata
import platform
import sys

import torch_npu_patchset_autoload as _autoload

from . import __version__

# distribution name -> the name shown; first found wins.
_DISTRIBUTIONS = {
    "torch": ("torch",),
    "torch_npu": ("torch-npu", "torch_npu"),
    "triton-ascend": ("triton-ascend", "triton_ascend"),
}


def _version(names) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def describe() -> dict:
    env = {shown: _version(names) for shown, names in _DISTRIBUTIONS.items()}
    off = _autoload.disabled_ids()
    env.update(
        {
            "python": platform.python_version(),
            "patchset": __version__,
            "autoload": "armed" if _autoload.ACTIVE else ("disabled" if off and "*" in off else "not run"),
            "autoload_failures": [f"{what}: {err}" for what, err in _autoload.FAILURES],
            "disabled": sorted(off) if off else [],
            "declarations": str(_autoload.declarations_dir()),
            "torch_imported": "torch" in sys.modules,
        }
    )
    return env
