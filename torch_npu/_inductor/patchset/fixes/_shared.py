"""Small pieces the launch fixes of both wrapper layouts share."""
from __future__ import annotations

from .. import launch_codegen

#: The runtime helper's header (what the generated wrapper includes).
HEADER_PATH = launch_codegen.HELPER_DIR / launch_codegen.HELPER_HEADER


def helper_include_lines() -> list[str]:
    """What the generated wrapper's header needs for the runtime helper (the ABI define, then
    the include by absolute path), as launch_codegen writes it for every layout."""
    return list(launch_codegen.helper_include_lines())
