"""torch-npu-inductor-patches: runtime patch set for torch_npu's Inductor backend.

Everything this project adds lives in this subpackage. Importing it is cheap
and has no side effects; patches are applied by :func:`apply` (explicitly) or
by the ``torch.backends`` entry point (``torch_npu_patchset_autoload``), which
defers each patch until its target modules are imported.

    >>> import torch_npu._inductor.patchset as patchset
    >>> patchset.apply()            # import targets that exist and patch them
    >>> patchset.status()           # one PatchStatus per declared patch
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["apply", "status", "PatchStatus", "__version__"]


def apply(ids=None, *, import_targets: bool = True):
    """Apply the declared patches now; returns their :class:`PatchStatus` list.

    ``import_targets`` imports each patch's target modules (when they can be
    found) instead of waiting for them; patches already settled are skipped,
    so calling this again is harmless.
    """
    from . import _applier

    return _applier.apply(ids, import_targets=import_targets)


def status():
    """Current :class:`PatchStatus` of every declared patch (applies nothing)."""
    from . import _applier

    return _applier.status()


def __getattr__(name):
    if name == "PatchStatus":
        from ._applier import PatchStatus

        return PatchStatus
    raise AttributeError(name)
