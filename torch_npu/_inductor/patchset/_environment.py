"""What the status command reports about the environment."""
from __future__ import annotations

import importlib.metadata
import os
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
#: Environment variables of this project shown as "settings in force" (whatever is set, read or not).
SETTING_PREFIXES = ("TORCH_NPU_PATCHSET_", "TORCH_NPU_LAUNCH_")
#: torch's switch for its ``torch.backends`` entry points (ours among them).
TORCH_AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
ENTRY_POINT_GROUP = "torch.backends"


def _version(names) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def settings() -> dict[str, str]:
    """``TORCH_NPU_PATCHSET_*`` / ``TORCH_NPU_LAUNCH_*`` variables set in this process."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(SETTING_PREFIXES)}


def _entry_point_registered() -> bool:
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python 3.9: a dict of groups
        eps = importlib.metadata.entry_points().get(ENTRY_POINT_GROUP, ())
    return any(ep.value.split(":")[0].strip() == _autoload.__name__ for ep in eps)


def autoload_state() -> str:
    """``armed``, ``disabled`` or ``not run: <why>`` (why torch did not call the entry point)."""
    off = _autoload.disabled_ids()
    if _autoload.ACTIVE:
        return "armed"
    if off and "*" in off:
        return f"disabled ({_autoload.DISABLE_ENV}={os.environ.get(_autoload.DISABLE_ENV, '')})"
    if "torch" not in sys.modules:
        return "not run: torch is not imported yet"
    if os.environ.get(TORCH_AUTOLOAD_ENV, "1") == "0":
        return f"not run: {TORCH_AUTOLOAD_ENV}=0 (torch loads no {ENTRY_POINT_GROUP} entry points)"
    if not _entry_point_registered():
        return (f"not run: no {ENTRY_POINT_GROUP} entry point {_autoload.__name__} is installed "
                "(pip install the package; patches then apply only where status or apply() runs)")
    if not hasattr(sys.modules["torch"], "_import_device_backends"):
        return f"not run: torch {sys.modules['torch'].__version__} loads no {ENTRY_POINT_GROUP} entry points"
    return "not run: torch did not call the entry point (reason unknown)"


def describe() -> dict:
    env = {shown: _version(names) for shown, names in _DISTRIBUTIONS.items()}
    off = _autoload.disabled_ids()
    try:
        from . import _declarations

        known = [d.id for d in _declarations.load()]
    except Exception:  # broken declarations: status reports them through the failures below
        known = []
    unknown = _autoload.unknown_disabled_ids(known) if known else []
    env.update(
        {
            "python": platform.python_version(),
            "patchset": __version__,
            "autoload": autoload_state(),
            "autoload_failures": [f"{what}: {err}" for what, err in _autoload.FAILURES],
            # Only ids that name a patch are disabled; a typo is listed apart and disables nothing.
            "disabled": sorted(i for i in off if i not in unknown) if off else [],
            "disabled_unknown": unknown,
            "patch_ids": known,
            "settings": settings(),
            "declarations": str(_autoload.declarations_dir()),
            "torch_imported": "torch" in sys.modules,
        }
    )
    return env
