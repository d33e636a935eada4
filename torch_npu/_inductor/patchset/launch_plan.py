"""From a compiled Triton kernel's metadata to an immutable launch plan.

Pure Python, no torch import. A triton-ascend kernel may need, per launch,

* a **workspace**: ``workspace_size`` bytes per launched block, i.e.
  ``workspace_size * grid_0 * grid_1 * grid_2`` bytes (docs/design.md, "Sizes");
* **sync-block locks**, in one of two layouts:

  - *legacy* (triton-ascend <= 3.2): ``lock_num`` int64 slots, each holding
    ``lock_init_val`` when the kernel starts;
  - *packed* (triton-ascend 3.6): ``sync_block_lock_layout`` with the ordered
    lock count in the low 32 bits and the unordered one in the high 32 bits.
    Ordered locks take 8 int64 each, all ``lock_init_val``; unordered locks
    take ``(1 + 2 * P) * 8`` int64 each, slot 0 = P, the rest 0, where
    P = launch block count (after auto-blockify clamping) x the participant
    factor (2 for a cube+vector "mix" kernel tiled automatically into
    sub-blocks, else 1).

:func:`plan_from_metadata` reads either metadata shape (a namedtuple-like
object or a dict, which is also what torch_npu's saved params look like) and
returns a :class:`SyncPlan`. The plan travels to the C++ wrapper inside the
kernel's params dict under :data:`PARAMS_KEY` as a plain dict of ints, strings
and bools (:meth:`SyncPlan.to_dict`), so it survives anything that copies or
serialises those params.

The ``mix_mode`` values are triton-ascend's (read from its 3.2.0 backend):
``"aiv"`` = vector cores only, ``"aic"`` = cube cores only, ``"mix"`` = both;
triton-ascend itself compares case-insensitively after stripping underscores
and by prefix, and so do we. torch_npu 2.7.1.post11 applies the factor of 2
for ``mix_mode == "mix"`` with ``auto_tile_and_bind_subblock`` set, which is
the same rule.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Mapping

#: Key of the plan (as :meth:`SyncPlan.to_dict`) in a kernel's params dict.
PARAMS_KEY = "npu_sync_plan"

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_U32 = (1 << 32) - 1
SLOTS_PER_CACHE_LINE = 8  # int64 slots in one 64-byte cache line
#: The most byte fills an init value may take per launch: a repeated byte (0, as BiSheng reports, or -1) takes one,
#: other values one per run of equal non-zero bytes per slot. Only values no known compiler reports exceed it.
MAX_INIT_VALUE_FILLS = 64

LAYOUT_NONE = "none"
LAYOUT_LEGACY = "legacy"
LAYOUT_PACKED = "packed"
_LAYOUTS = (LAYOUT_NONE, LAYOUT_LEGACY, LAYOUT_PACKED)

# Metadata field names, canonical first.
_INIT_NAMES = ("lock_init_val", "lock_init_value")
# triton-ascend's "SIMT only" flag: force_simt_only (torch_npu 2.7.1), is_pure_simt (newer releases).
SIMT_FLAGS = ("force_simt_only", "is_pure_simt")
#: The sync fields torch_npu itself records in a kernel's params (2.7.1.post11 and later).
RAW_SYNC_FIELDS = ("workspace_size", "lock_num", "sync_block_lock_layout") + _INIT_NAMES
_MISSING = object()


def nonzero_byte_runs(value: int) -> list[tuple[int, int, int]]:
    """``(offset, byte, count)`` for each run of equal non-zero bytes of ``value`` as a little-endian int64."""
    data = (value & ((1 << 64) - 1)).to_bytes(8, "little")
    runs, start = [], 0
    for end in range(1, 9):
        if end == 8 or data[end] != data[start]:
            if data[start]:
                runs.append((start, data[start], end - start))
            start = end
    return runs


def _one_byte(value: int) -> bool:
    """True when every byte of ``value`` as an int64 is the same."""
    return len(set((value & ((1 << 64) - 1)).to_bytes(8, "little"))) == 1


def _field(metadata: Any, name: str) -> Any:
    return metadata.get(name, _MISSING) if isinstance(metadata, Mapping) else getattr(metadata, name, _MISSING)


def _absent(value: Any) -> bool:
    return value is _MISSING or value is None


def _as_int(kernel: str, name: str, value: Any, lo: int, hi: int) -> int:
    if _absent(value):
        return 0
    if isinstance(value, bool):
        raise ValueError(f"kernel {kernel!r}: metadata field {name}={value!r} is a bool, expected an integer")
    try:
        number = operator.index(value)  # ints and integer-like (numpy) values only
    except TypeError:
        raise ValueError(
            f"kernel {kernel!r}: metadata field {name}={value!r} is a {type(value).__name__}, expected an integer"
        ) from None
    if number < lo:
        what = "negative" if lo == 0 else f"below {lo}"
        raise ValueError(f"kernel {kernel!r}: metadata field {name}={number} is {what}")
    if number > hi:
        raise ValueError(f"kernel {kernel!r}: metadata field {name}={number} overflows int64 (max {hi})")
    return number


def _as_flag(kernel: str, name: str, value: Any) -> bool:
    if _absent(value):
        return False
    if isinstance(value, int) and value in (0, 1):  # bools included
        return bool(value)
    raise ValueError(f"kernel {kernel!r}: metadata field {name}={value!r} is not a boolean")


def _agreed(kernel: str, metadata: Any, names: tuple[str, ...], parse, default):
    """One value read under several names (aliases), which must agree; ``default`` when none is present."""
    values = {n: parse(n, _field(metadata, n)) for n in names if not _absent(_field(metadata, n))}
    if len(set(values.values())) > 1:
        raise ValueError(f"kernel {kernel!r}: metadata fields disagree: " + ", ".join(f"{n}={v}" for n, v in values.items()))
    return next(iter(values.values()), default)


def mix_mode_kind(mix_mode: str) -> str:
    """``"vector"``, ``"cube"``, ``"mix"``, ``""`` (absent) or ``"unknown"``."""
    norm = mix_mode.lower().strip("_")
    if not norm:
        return ""
    return next((kind for prefix, kind in (("aiv", "vector"), ("aic", "cube"), ("mix", "mix"))
                 if norm.startswith(prefix)), "unknown")


@dataclasses.dataclass(frozen=True)
class SyncPlan:
    """What one kernel needs per launch, immutable; the sizes that depend on the launch are the C++ helper's.

    The same sizes, the lock content and the helper's byte fills, computed in Python for the tests
    and the tools to compare against: ``tooling/sim/expected_memory.py``.
    """

    kernel: str
    workspace_per_block: int = 0  # bytes per launched block
    lock_layout: str = LAYOUT_NONE  # none | legacy | packed
    legacy_slots: int = 0  # legacy layout: int64 slots
    ordered_locks: int = 0  # packed layout
    unordered_locks: int = 0  # packed layout
    participant_factor: int = 1  # packed layout: participants per launched block
    lock_init_value: int = 0  # legacy slots and ordered-only locks start at this
    simt_only: bool = False  # the kernel has no lock / workspace arguments at all
    mix_mode: str = ""
    lock_source: str = ""  # which metadata field the lock layout came from, and how it was read

    def __post_init__(self) -> None:
        k = self.kernel
        if not isinstance(k, str):
            raise ValueError(f"plan kernel name must be a str, got {k!r}")
        for name in ("workspace_per_block", "legacy_slots", "ordered_locks", "unordered_locks"):
            _as_int(k, name, getattr(self, name), 0, INT64_MAX)
        _as_int(k, "lock_init_value", self.lock_init_value, INT64_MIN, INT64_MAX)
        if self.lock_layout not in _LAYOUTS:
            raise ValueError(f"kernel {k!r}: plan field lock_layout={self.lock_layout!r} is not one of {_LAYOUTS}")
        if self.participant_factor not in (1, 2) or isinstance(self.participant_factor, bool):
            raise ValueError(f"kernel {k!r}: plan field participant_factor={self.participant_factor!r} is not 1 or 2")
        if self.ordered_locks > _U32 or self.unordered_locks > _U32:
            raise ValueError(f"kernel {k!r}: packed lock counts must fit 32 bits")
        legacy = self.legacy_slots > 0
        packed = self.ordered_locks > 0 or self.unordered_locks > 0
        expected = LAYOUT_PACKED if packed else LAYOUT_LEGACY if legacy else LAYOUT_NONE
        if (legacy and packed) or self.lock_layout != expected:
            raise ValueError(f"kernel {k!r}: plan field lock_layout={self.lock_layout!r} does not match its counts "
                             f"(legacy_slots={self.legacy_slots}, ordered={self.ordered_locks}, "
                             f"unordered={self.unordered_locks})")
        if not isinstance(self.simt_only, bool):
            raise ValueError(f"kernel {k!r}: plan field simt_only={self.simt_only!r} is not a bool")
        if not isinstance(self.mix_mode, str) or not isinstance(self.lock_source, str):
            raise ValueError(f"kernel {k!r}: plan fields mix_mode and lock_source must be strings")
        _bounded_fills(self)

    @property
    def needs_locks(self) -> bool:
        return not self.simt_only and self.lock_layout != LAYOUT_NONE

    @property
    def needs_workspace(self) -> bool:
        return not self.simt_only and self.workspace_per_block > 0

    @property
    def needs_resources(self) -> bool:
        """True when a launch must call the runtime helper."""
        return self.needs_locks or self.needs_workspace

    def participants(self, block_num: int) -> int:
        return block_num * self.participant_factor

    def lock_slots(self, block_num: int) -> int:
        """int64 lock slots for a launch of ``block_num`` blocks (after clamping)."""
        if not self.needs_locks:
            return 0
        if self.lock_layout == LAYOUT_LEGACY:
            return self.legacy_slots
        per_unordered = (1 + 2 * self.participants(block_num)) * SLOTS_PER_CACHE_LINE
        return self.ordered_locks * SLOTS_PER_CACHE_LINE + self.unordered_locks * per_unordered

    def init_value_fills(self) -> int:
        """Byte fills the init value takes beyond the region's first one (0: a repeated byte, or unordered locks)."""
        if not self.needs_locks or self.unordered_locks or _one_byte(self.lock_init_value):
            return 0
        return self.lock_slots(0) * len(nonzero_byte_runs(self.lock_init_value))

    # -- plain-dict form -----------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SyncPlan":
        if isinstance(data, SyncPlan):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"a sync plan must be a dict, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"sync plan for {data.get('kernel')!r} has unknown fields {unknown}")
        if "kernel" not in data:
            raise ValueError("sync plan has no kernel name")
        return cls(**dict(data))


def plan_from_metadata(metadata: Any, kernel: str | None = None) -> SyncPlan:
    """Validate a compiled kernel's metadata (object or dict) into a :class:`SyncPlan`; ``ValueError``
    naming kernel (``kernel``, default the metadata's ``name``), field and value if a value is unusable.

    Unusable: negative, non-integer (``bool`` included), int64-overflowing or contradictory.
    """
    if kernel is None:
        name = _field(metadata, "name")
        kernel = name if isinstance(name, str) else "<unnamed kernel>"
    k = kernel

    workspace = _as_int(k, "workspace_size", _field(metadata, "workspace_size"), 0, INT64_MAX)
    lock_num = _as_int(k, "lock_num", _field(metadata, "lock_num"), 0, INT64_MAX)
    layout = _as_int(k, "sync_block_lock_layout", _field(metadata, "sync_block_lock_layout"), 0, INT64_MAX)

    init = _agreed(k, metadata, _INIT_NAMES, lambda n, v: _as_int(k, n, v, INT64_MIN, INT64_MAX), 0)

    mix_mode = "" if _absent(_field(metadata, "mix_mode")) else _field(metadata, "mix_mode")
    if not isinstance(mix_mode, str):
        raise ValueError(f"kernel {k!r}: metadata field mix_mode={mix_mode!r} is not a string")
    auto_tile = _as_flag(k, "auto_tile_and_bind_subblock", _field(metadata, "auto_tile_and_bind_subblock"))
    simt_only = _agreed(k, metadata, SIMT_FLAGS, lambda n, v: _as_flag(k, n, v), False)

    legacy_slots = ordered = unordered = 0
    source = ""
    if layout:
        # torch_npu 2.7.1.post11 also stores max(lock_num, layout) as lock_num,
        # a "has locks" marker: equal values are that marker, not a conflict.
        if lock_num and lock_num != layout:
            raise ValueError(f"kernel {k!r}: metadata fields conflict: sync_block_lock_layout={layout} and "
                             f"lock_num={lock_num}; cannot tell which lock layout the kernel was compiled for")
        ordered, unordered = layout & _U32, layout >> 32
        source = f"sync_block_lock_layout={layout:#x} (low 32 bits ordered, high 32 bits unordered)"
    elif lock_num >= 1 << 32:
        ordered, unordered = lock_num & _U32, lock_num >> 32
        source = (f"lock_num={lock_num}, which is >= 2**32 and so cannot be a slot count: read as the packed "
                  f"sync_block_lock_layout encoding ({ordered} ordered, {unordered} unordered), not as a "
                  f"{lock_num * 8}-byte request")
    elif lock_num:
        legacy_slots = lock_num
        source = f"lock_num={lock_num} (legacy int64 slot count)"
    if unordered > INT64_MAX >> 32:  # keeps every later size computation in range
        raise ValueError(f"kernel {k!r}: unordered lock count {unordered} overflows int64 once laid out")

    factor = 1
    if unordered:
        kind = mix_mode_kind(mix_mode)
        if kind == "unknown" and auto_tile:
            raise ValueError(f"kernel {k!r}: metadata field mix_mode={mix_mode!r} is not one of triton-ascend's "
                             f"'aiv', 'aic', 'mix'; the unordered locks' participant count depends on it")
        if kind == "mix" and auto_tile:
            factor = 2

    lock_layout = LAYOUT_PACKED if (ordered or unordered) else LAYOUT_LEGACY if legacy_slots else LAYOUT_NONE
    return _bounded_fills(SyncPlan(
        kernel=k, workspace_per_block=workspace, lock_layout=lock_layout, legacy_slots=legacy_slots,
        ordered_locks=ordered, unordered_locks=unordered, participant_factor=factor, lock_init_value=init,
        simt_only=simt_only, mix_mode=mix_mode, lock_source=source))


def _bounded_fills(plan: SyncPlan) -> SyncPlan:
    """``plan``, or ``ValueError`` if its init value would take more than MAX_INIT_VALUE_FILLS byte fills."""
    fills = plan.init_value_fills()
    if fills > MAX_INIT_VALUE_FILLS:
        raise ValueError(
            f"kernel {plan.kernel!r}: metadata field lock_init_val={plan.lock_init_value} would take {fills} byte "
            f"fills per launch ({plan.lock_slots(0)} slots x {len(nonzero_byte_runs(plan.lock_init_value))} runs of "
            f"non-zero bytes; at most {MAX_INIT_VALUE_FILLS}): no known compiler reports such a value (BiSheng reports 0)"
        )
    return plan


def plan_from_params(params: Mapping[str, Any], kernel: str) -> SyncPlan:
    """The plan for one launch, from the params torch_npu hands its launcher code.

    torch_npu 2.7.1.post11 and later record the raw ``workspace_size`` /
    ``lock_num`` / ``lock_init_val`` / ``sync_block_lock_layout`` fields of the
    launch themselves; when present they are used (a grouped launch's variant
    overrides them per variant, while a stored plan was saved for the group).
    Otherwise the plan the kernel-sync-metadata patch stored; a params dict
    with neither gives the empty plan (the kernel needs nothing).
    """
    if any(not _absent(_field(params, name)) for name in RAW_SYNC_FIELDS):
        return plan_from_metadata(params, kernel)
    stored = params.get(PARAMS_KEY)
    if stored is not None:
        return SyncPlan.from_dict(stored)
    return plan_from_metadata(params, kernel)
