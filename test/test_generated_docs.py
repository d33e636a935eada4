"""Generated docs carry no path of the machine that made them (issue 25): a reader elsewhere cannot
use one, and it tells them nothing about the result."""
from __future__ import annotations

from pathlib import Path

import pytest

from torch_npu._inductor.patchset.tooling.releases import release_matrix

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Measured results written into the tree besides docs/ (benchmarks/README.md carries the benchmark tables).
OTHER = ("benchmarks/README.md",)


@pytest.mark.parametrize("doc", [f"docs/{p.name}" for p in sorted(DOCS.glob("*.md"))] + list(OTHER))
def test_no_absolute_path_of_this_machine(doc):
    text = (ROOT / doc).read_text()
    found = release_matrix.ABSOLUTE_PATH.findall(text)
    assert not found, f"{doc} names paths of the machine that wrote it: {found[:5]}"


def test_the_matrix_drops_the_interpreter_path_from_the_torch_it_names():
    assert release_matrix._no_paths("installed torch 2.7.1+cu126 (/root/.cache/x/venv/bin/python)") == (
        "installed torch 2.7.1+cu126")
    assert release_matrix._no_paths("members of torch-2.13.0+cpu-cp311.whl") == "members of torch-2.13.0+cpu-cp311.whl"
    assert release_matrix.ABSOLUTE_PATH.findall("see /tmp/build/x.so and /work/main/docs") == [
        "/tmp/build/x.so", "/work/main/docs"]
