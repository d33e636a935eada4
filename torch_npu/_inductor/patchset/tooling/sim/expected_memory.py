"""What a launch's memory must be, computed in Python apart from the C++ helper that provides it.

The runtime plan (:class:`~torch_npu._inductor.patchset.launch_plan.SyncPlan`) carries only what a launch
needs to know; the helper (``csrc/npu_launch_resources/sizes.h``) turns it into sizes and byte fills at run
time. The tests and tools check the helper against these (docs/design.md, "Sizes" and "Lock content, as
byte fills"). The lock content itself, slot by slot: ``harness.expected_lock_content``.
"""
from __future__ import annotations

from typing import Sequence

from ...launch_plan import SLOTS_PER_CACHE_LINE, SyncPlan, nonzero_byte_runs


def lock_bytes(plan: SyncPlan, block_num: int) -> int:
    """Bytes of the lock region of a launch of ``block_num`` blocks (after clamping)."""
    return plan.lock_slots(block_num) * 8


def workspace_bytes(plan: SyncPlan, grid: Sequence[int]) -> int:
    """Bytes of the workspace region: per launched program, times the grid."""
    if not plan.needs_workspace:
        return 0
    return plan.workspace_per_block * grid[0] * grid[1] * grid[2]


def _repeated_byte(value: int) -> bool:
    return len(set((value & ((1 << 64) - 1)).to_bytes(8, "little"))) == 1


def lock_fills(plan: SyncPlan, block_num: int) -> list[tuple[int, int, int]]:
    """``(offset, byte, count)`` byte fills, in order, that write the lock content: what the helper's
    ``for_each_lock_fill`` issues (one over the region, then each run of equal non-zero bytes of a slot
    whose value is not one repeated byte, then P's bytes at slot 0 of each unordered lock)."""
    total = lock_bytes(plan, block_num)
    if not total:
        return []
    common = 0 if plan.unordered_locks else plan.lock_init_value
    one = _repeated_byte(common)
    fills = [(0, common & 0xFF if one else 0, total)]
    if not one:
        for slot in range(total // 8):
            fills += [(slot * 8 + o, b, n) for o, b, n in nonzero_byte_runs(common)]
    p = plan.participants(block_num)
    per_unordered = (1 + 2 * p) * SLOTS_PER_CACHE_LINE * 8
    for u in range(plan.unordered_locks):
        start = plan.ordered_locks * SLOTS_PER_CACHE_LINE * 8 + u * per_unordered
        fills += [(start + o, b, n) for o, b, n in nonzero_byte_runs(p)]
    return fills
