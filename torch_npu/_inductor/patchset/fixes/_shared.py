"""Small pieces the launch fixes of both wrapper layouts share."""
from __future__ import annotations

from pathlib import Path

from .. import launch_codegen

HEADER_PATH = Path(__file__).resolve().parent.parent / "csrc" / launch_codegen.HELPER_HEADER


def helper_include_lines() -> list[str]:
    """What the generated wrapper's header needs for the runtime helper.

    ``launch_codegen.helper_include_lines()`` (the ABI define and the include)
    where the installed launch_codegen has it; else the include alone, by path.
    """
    lines = getattr(launch_codegen, "helper_include_lines", None)
    if lines is not None:
        return list(lines())
    return [f'#include "{HEADER_PATH}"']
