"""Give the launch memory the C++ wrappers keep back to torch_npu's caching allocator (runs in the user's job).

Each compiled wrapper that includes the runtime helper exports ``torch_npu_launch_resources_give_back``
(``csrc/npu_launch_resources/kept.h``): it hands every idle kept block back with its stream recorded as a use.
The wrappers are loaded by torch and AOTInductor, privately (``RTLD_LOCAL``), so the function is found in each
loaded library that exports it. ``give_back()`` is what ``torch.npu.empty_cache()`` calls first
(patch ``npu-empty-cache-launch-memory``): the device synchronisation and the frees that follow then return those
blocks to the driver, as they return an operator's cached workspace (docs/design.md, "When the block goes back").
"""
from __future__ import annotations

import ctypes
import os

SYMBOL = "torch_npu_launch_resources_give_back"

_checked: dict[str, object] = {}  # library path -> its give-back function, or None


def _loaded_libraries() -> list[str]:
    """Paths of the shared objects mapped into this process (Linux), in the order they appear."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return []
    paths = (f[5].strip() for f in fields if len(f) == 6)  # an anonymous mapping has no path
    return list(dict.fromkeys(p for p in paths if p.startswith("/") and ".so" in os.path.basename(p)))


def _give_back_of(path: str):
    if path not in _checked:
        fn = None
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            fn = getattr(lib, SYMBOL)
            fn.restype, fn.argtypes = ctypes.c_size_t, []
        except (OSError, AttributeError):
            fn = None
        _checked[path] = fn
    return _checked[path]


def give_back() -> int:
    """Every idle block the loaded wrappers keep goes back to the caching allocator; how many."""
    return sum(fn() for fn in map(_give_back_of, _loaded_libraries()) if fn is not None)
