"""What the real-runtime benchmark measures: its cells, layouts, kernel times and the order of its children.

Declarations and pure functions only, shared by ``real_runtime_bench.py`` (builds and runs) and
``real_runtime_bench_report.py`` (the figures).
"""
from __future__ import annotations

from typing import Sequence

from ..sim.samples import Sample

FLOOR_RELEASE, OWN_FIX_RELEASE = "2.7.1.post10", "2.7.1.post11"
#: cell -> (release, rendering)
CELLS = {
    "floor": (FLOOR_RELEASE, "upstream"),
    "own-fix": (OWN_FIX_RELEASE, "upstream"),
    "patch-post10": (FLOOR_RELEASE, "patched"),
    "patch-post11": (OWN_FIX_RELEASE, "patched"),
}
PATCH_SET = ("patch-post10", "patch-post11")
#: Cells whose verdict needs a kernel still running while the next launch's lambda runs: the own fix's synchronous
#: ``aclrtMemcpy`` waits for no stream (CANN's runtime copies at once, ``api_impl.cc:2745-2774``; so does the host ACL
#: library), so it writes the next launch's locks while the kernel before, whose regions alias them, may still write
#: there. The child makes that overlap by construction in a held check (``real_runtime_bench_child.py``), beside the
#: timed batches.
HELD_CHECK = ("own-fix",)
HELD_LAUNCHES = 4  # calls behind the hold: the second kernel on starts where the one before left the locks
GRID = 4  # launched blocks (below the 48-core clamp)
#: The layouts: what compilers report (BiSheng: lock init value 0; docs/facts.md) and the init-7 layout.
LAYOUTS = {
    "ordered": ("workspace 256 B/block + 16 legacy lock slots, init 0 (what compilers report)",
                {"workspace_size": 256, "lock_num": 16}),
    "unordered": ("workspace 256 B/block + packed layout, 1 unordered lock (what compilers report)",
                  {"workspace_size": 256, "sync_block_lock_layout": 1 << 32}),
    "init7": ("workspace 256 B/block + 16 legacy lock slots, init 7 (no known compiler reports it)",
              {"workspace_size": 256, "lock_num": 16, "lock_init_val": 7}),
    "mib": ("workspace 256 KiB/block + 16 legacy lock slots, init 0: a 1 MiB block, as a Flex backward's are MiB-sized",
            {"workspace_size": 256 << 10, "lock_num": 16}),
}
REPORTED = ("ordered", "unordered")  # the layouts the goals name
KERNEL_US = (0, 20, 100)
FULL = {"launches": 2000, "gated": 1000, "rounds": 2, "warmup": 50, "repeats": 3}
QUICK = {"launches": 300, "gated": 200, "rounds": 1, "warmup": 20, "repeats": 1}
GATED_MAX = 4000  # torch_npu's task queue holds 4096 tasks: more behind a held gate would never be queued


def bench_samples() -> tuple[Sample, ...]:
    return tuple(Sample(f"bench-{key}", title, {"name": f"triton_red_bench_{key} aiv", "mix_mode": "aiv",
                                                 "parallel_mode": "simd", "force_simt_only": False, **fields},
                        "*fp32,*fp32,i32", (GRID, 1, 1)) for key, (title, fields) in LAYOUTS.items())


SAMPLE_BY_KEY = {s.key: s for s in bench_samples()}


def child_plan(kernel_us: Sequence[int], repeats: int, cells: Sequence[str] = tuple(CELLS)) -> list[tuple[int, str]]:
    """(kernel us, release) of every child, in the order they run: per repeat and kernel time each release's child
    once, the order rotated so that none is always first."""
    releases = list(dict.fromkeys(CELLS[c][0] for c in cells))
    out, turn = [], 0
    for _rep in range(repeats):
        for k in kernel_us:
            out += [(k, releases[(turn + i) % len(releases)]) for i in range(len(releases))]
            turn += 1
    return out


def cells_of(release: str, cells: Sequence[str] = tuple(CELLS)) -> list[tuple[str, str]]:
    """(cell, rendering) that a child of ``release`` measures."""
    return [(c, CELLS[c][1]) for c in cells if CELLS[c][0] == release]
