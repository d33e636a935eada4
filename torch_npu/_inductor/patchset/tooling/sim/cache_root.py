"""Where every cache the project writes lives: ``$TORCH_NPU_PATCHSET_CACHE``, else ``~/.cache/torch-npu-inductor-patches``.

The torch environments (.ci/env.sh), the wheels, the host ACL library and launcher builds, the harness renders and
the end-to-end tier's results all go under it, so that one variable moves them all. The narrower variables
``TORCH_NPU_PATCHSET_WHEEL_CACHE`` and ``TORCH_NPU_PATCHSET_BUILD_CACHE`` still override their own part.
"""
from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "TORCH_NPU_PATCHSET_CACHE"


def root() -> Path:
    return Path(os.environ.get(VARIABLE) or Path.home() / ".cache" / "torch-npu-inductor-patches").expanduser()
