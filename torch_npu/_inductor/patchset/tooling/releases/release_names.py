"""What names a torch_npu release, shared by the commands that take one (``status --against-wheel``,
``launcher --real-runtime``)."""
from __future__ import annotations

import re

#: A torch_npu release: its torch line (major.minor), then the rest (patch, .postN, rcN).
RELEASE = re.compile(r"(\d+)\.(\d+)\.\d+(?:rc\d+)?(?:\.post\d+)?")


def torch_line(version: str) -> str:
    """``major.minor`` of a torch or torch_npu version (a local part such as ``+cpu`` ignored)."""
    return ".".join(version.split("+")[0].split(".")[:2])


def unknown_release(flag: str, version: str, known: list[str]) -> str:
    """The one line saying ``version`` is not a release on the package index, with those that are."""
    listed = ", ".join(known) if known else "none listed"
    return f"{flag}: torch-npu {version} is not a release on the package index; known releases: {listed}"
