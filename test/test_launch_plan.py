"""launch_plan: metadata (object or dict) -> immutable, validated SyncPlan."""
from __future__ import annotations

import collections
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_npu._inductor.patchset import launch_plan as lp
from torch_npu._inductor.patchset.tooling.commands.launcher import describe_plan
from torch_npu._inductor.patchset.tooling.sim import expected_memory as em
from torch_npu._inductor.patchset.tooling.sim.harness import expected_lock_content
from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES


def meta_obj(**fields):
    Meta = collections.namedtuple("KernelMetadata", sorted(fields))
    return Meta(**fields)


def test_absent_none_and_zero_mean_nothing():
    for md in ({}, {"workspace_size": None, "lock_num": None}, {"workspace_size": 0, "lock_num": 0, "lock_init_val": 0}):
        plan = lp.plan_from_metadata(md, kernel="k")
        assert not plan.needs_resources and plan.lock_layout == "none"
        assert "both pointers are null" in describe_plan(plan)


def test_object_and_dict_shapes_agree():
    fields = dict(name="k mix", workspace_size=64, lock_num=3, lock_init_val=-5, mix_mode="mix")
    assert lp.plan_from_metadata(fields) == lp.plan_from_metadata(meta_obj(**fields))
    assert lp.plan_from_metadata(fields).kernel == "k mix"


def test_lock_init_value_alias_and_conflict():
    assert lp.plan_from_metadata({"lock_num": 2, "lock_init_value": 9}, "k").lock_init_value == 9
    assert lp.plan_from_metadata({"lock_num": 2, "lock_init_val": 9, "lock_init_value": 9}, "k").lock_init_value == 9
    with pytest.raises(ValueError, match="disagree"):
        lp.plan_from_metadata({"lock_num": 2, "lock_init_val": 1, "lock_init_value": 2}, "k")


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("workspace_size", -1, "negative"),
        ("lock_num", -3, "negative"),
        ("workspace_size", True, "bool"),
        ("lock_num", 2.0, "float"),
        ("lock_init_val", "7", "str"),
        ("workspace_size", 1 << 63, "overflows int64"),
        ("lock_init_val", -(1 << 63) - 1, "below"),
        ("sync_block_lock_layout", 1 << 64, "overflows int64"),
        ("auto_tile_and_bind_subblock", 2, "not a boolean"),
        ("force_simt_only", "yes", "not a boolean"),
        ("mix_mode", 3, "not a string"),
    ],
)
def test_bad_values_name_kernel_field_and_value(field, value, words):
    with pytest.raises(ValueError) as info:
        lp.plan_from_metadata({field: value, "lock_num": 1} if field != "lock_num" else {field: value}, kernel="triton_k")
    text = str(info.value)
    assert "triton_k" in text and field in text and (repr(value) in text or str(value) in text)
    assert words in text


def test_int64_extremes_accepted():
    for v in (lp.INT64_MIN, lp.INT64_MAX, 0, -1):
        assert lp.plan_from_metadata({"lock_num": 1, "lock_init_val": v}, "k").lock_init_value == v


def test_lock_num_2pow32_is_packed_never_32GiB():
    plan = lp.plan_from_metadata({"lock_num": 1 << 32}, "k")
    assert plan.lock_layout == "packed" and (plan.ordered_locks, plan.unordered_locks) == (0, 1)
    assert plan.legacy_slots == 0
    assert em.lock_bytes(plan, 4) == (1 + 2 * 4) * 64  # not 32 GiB
    assert "cannot be a slot count" in describe_plan(plan) and "packed" in describe_plan(plan)
    plan = lp.plan_from_metadata({"lock_num": (3 << 32) | 5}, "k")
    assert (plan.ordered_locks, plan.unordered_locks) == (5, 3)


def test_packed_layout_and_mix_factor():
    layout = (1 << 32) | 2
    base = {"sync_block_lock_layout": layout, "lock_init_val": 4}
    plan = lp.plan_from_metadata(dict(base, mix_mode="mix", auto_tile_and_bind_subblock=True), "k")
    assert (plan.ordered_locks, plan.unordered_locks, plan.participant_factor) == (2, 1, 2)
    assert plan.lock_slots(48) == 2 * 8 + (1 + 2 * 96) * 8
    # beside an unordered lock the ordered lines start at 0, not 4
    assert sorted(set(expected_lock_content(plan, 48))) == [0, 96]
    for md in (dict(base, mix_mode="mix"), dict(base, mix_mode="aiv", auto_tile_and_bind_subblock=True),
               dict(base, mix_mode="aic", auto_tile_and_bind_subblock=True), base):
        assert lp.plan_from_metadata(md, "k").participant_factor == 1
    # triton-ascend compares case-insensitively, ignoring underscores
    assert lp.plan_from_metadata(dict(base, mix_mode="_MIX", auto_tile_and_bind_subblock=True), "k").participant_factor == 2
    with pytest.raises(ValueError, match="mix_mode='cube_vector'"):
        lp.plan_from_metadata(dict(base, mix_mode="cube_vector", auto_tile_and_bind_subblock=True), "k")
    # no unordered locks: the mix mode does not matter (no error, no factor)
    weird = lp.plan_from_metadata({"lock_num": 2, "mix_mode": "weird", "auto_tile_and_bind_subblock": True}, "k")
    assert (weird.lock_layout, weird.legacy_slots, weird.participant_factor) == ("legacy", 2, 1)


def test_upstream_post11_marker_lock_num_equals_layout():
    layout = (1 << 32) | 2
    plan = lp.plan_from_metadata({"sync_block_lock_layout": layout, "lock_num": layout}, "k")
    assert plan.lock_layout == "packed"
    with pytest.raises(ValueError, match="conflict"):
        lp.plan_from_metadata({"sync_block_lock_layout": layout, "lock_num": 7}, "k")


def test_simt_only_needs_nothing():
    plan = lp.plan_from_metadata({"force_simt_only": True, "workspace_size": 64, "lock_num": 4}, "k")
    assert plan.simt_only and not plan.needs_resources and em.lock_bytes(plan, 8) == 0
    assert "SIMT-only" in describe_plan(plan)


def test_plan_is_frozen_plain_and_round_trips():
    for s in SAMPLES:
        plan = lp.plan_from_metadata(s.metadata, kernel=s.kernel)
        with pytest.raises(dataclasses.FrozenInstanceError):
            plan.kernel = "x"
        d = plan.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert all(type(v) in (int, str, bool) for v in d.values())
        assert lp.SyncPlan.from_dict(d) == plan
        assert lp.plan_from_params({lp.PARAMS_KEY: d}, "ignored") == plan
    with pytest.raises(ValueError, match="unknown fields"):
        lp.SyncPlan.from_dict({"kernel": "k", "bogus": 1})
    with pytest.raises(ValueError, match="lock_layout"):
        lp.SyncPlan(kernel="k", lock_layout="legacy")


def test_plan_from_raw_params_without_stored_plan():
    params = {"workspace_size": 16, "lock_num": 2, "lock_init_val": 3, "mix_mode": "aiv", "force_simt_only": False}
    plan = lp.plan_from_params(params, "k")
    assert (plan.workspace_per_block, plan.legacy_slots, plan.lock_init_value) == (16, 2, 3)


def test_raw_fields_of_the_launch_win_over_a_stored_plan():
    # torch_npu 2.13's grouped launches: {**group params (with our stored plan), **variant load_meta}.
    stored = lp.plan_from_metadata({"workspace_size": 16, "lock_num": 2}, kernel="group").to_dict()
    variant = {lp.PARAMS_KEY: stored, "workspace_size": 64, "lock_num": 0, "sync_block_lock_layout": 1 << 32,
               "mix_mode": "mix", "auto_tile_and_bind_subblock": True, "lock_init_val": 0}
    plan = lp.plan_from_params(variant, "variant")
    assert (plan.workspace_per_block, plan.unordered_locks, plan.participant_factor) == (64, 1, 2)
    assert lp.plan_from_params({lp.PARAMS_KEY: stored, "mix_mode": "aiv"}, "k") == lp.SyncPlan.from_dict(stored)


@pytest.mark.parametrize("fields, simt", [({"is_pure_simt": True}, True), ({"force_simt_only": True}, True),
                                         ({"is_pure_simt": False, "force_simt_only": False}, False), ({}, False)])
def test_simt_only_flag_under_either_name(fields, simt):
    assert lp.plan_from_metadata({"name": "k", **fields}).simt_only is simt


def test_disagreeing_simt_flags_are_an_error_naming_both():
    with pytest.raises(ValueError, match=r"'k'.*force_simt_only=True, is_pure_simt=False"):
        lp.plan_from_metadata({"name": "k", "force_simt_only": True, "is_pure_simt": False})


@given(
    workspace=st.integers(0, lp.INT64_MAX),
    lock_num=st.integers(0, lp.INT64_MAX),
    init=st.integers(lp.INT64_MIN, lp.INT64_MAX),
    mix=st.sampled_from(["aiv", "aic", "mix", ""]),
    tile=st.booleans(),
)
def test_any_valid_int64_metadata_gives_a_consistent_plan(workspace, lock_num, init, mix, tile):
    metadata = {"workspace_size": workspace, "lock_num": lock_num, "lock_init_val": init, "mix_mode": mix,
                "auto_tile_and_bind_subblock": tile}
    init_bytes = (init & (2**64 - 1)).to_bytes(8, "little")
    slots = lock_num if lock_num < 1 << 32 else (lock_num & 0xFFFFFFFF) * 8 if not lock_num >> 32 else 0
    if len(set(init_bytes)) > 1 and slots * _nonzero_runs(init_bytes) > lp.MAX_INIT_VALUE_FILLS:
        with pytest.raises(ValueError, match="lock_init_val"):
            lp.plan_from_metadata(metadata, "k")
        return
    plan = lp.plan_from_metadata(metadata, "k")
    assert lp.SyncPlan.from_dict(plan.to_dict()) == plan
    if lock_num >= 1 << 32:
        assert plan.lock_layout == "packed" and plan.legacy_slots == 0
    else:
        assert plan.legacy_slots == lock_num
    # The layout rule (docs/design.md), derived here independently: one 64-byte line per
    # ordered lock, (1 + 2P) * 8 int64 per unordered lock, P = blocks x factor.
    factor = 2 if (mix == "mix" and tile) else 1
    if lock_num >= 1 << 32:
        p = 1 * factor
        expected = (lock_num & 0xFFFFFFFF) * 64 + (lock_num >> 32) * (1 + 2 * p) * 8 * 8
    else:
        expected = lock_num * 8
    assert em.lock_bytes(plan, 1) == expected


def _nonzero_runs(data: bytes) -> int:
    """Runs of equal non-zero bytes (counted here without launch_plan's helper)."""
    return sum(1 for i, b in enumerate(data) if b and (i == 0 or data[i - 1] != b))


def _apply(fills, size: int) -> bytes:
    buf = bytearray(b"\xab" * size)  # garbage: every byte must be written
    for offset, byte, count in fills:
        assert 0 <= offset and offset + count <= size and 0 <= byte < 256 and count > 0
        buf[offset:offset + count] = bytes([byte]) * count
    return bytes(buf)


@given(
    layout=st.sampled_from(["legacy", "ordered", "unordered", "both"]),
    count=st.integers(1, 6),
    init=st.one_of(st.sampled_from([0, -1, 1, 5, 256, 0x0101010101010101, lp.INT64_MIN]), st.integers(-300, 300)),
    blocks=st.one_of(st.integers(1, 300), st.sampled_from([65535, 70000, 2**32 - 1])),
    factor=st.sampled_from([1, 2]),
)
def test_lock_fills_write_exactly_the_lock_content(layout, count, init, blocks, factor):
    """The byte fills (what the helper issues, mirrored in expected_memory.lock_fills) leave exactly the
    lock content (harness.expected_lock_content),
    and take 1 fill for a one-byte init value and 1 + runs(P) per unordered lock otherwise."""
    ordered = count if layout in ("ordered", "both") else 0
    unordered = count if layout in ("unordered", "both") else 0
    if blocks > 300 and unordered:
        blocks = 300 + blocks % 7  # the content of (1 + 2P) lines each is built in memory below
    fields = dict(kernel="k", lock_layout="legacy" if layout == "legacy" else "packed",
                  legacy_slots=count if layout == "legacy" else 0, ordered_locks=ordered,
                  unordered_locks=unordered, participant_factor=factor if unordered else 1, lock_init_value=init)
    init_bytes = (init & (2**64 - 1)).to_bytes(8, "little")
    slots = count if layout == "legacy" else ordered * 8
    common_fills = 0 if unordered or len(set(init_bytes)) == 1 else slots * _nonzero_runs(init_bytes)
    if common_fills > lp.MAX_INIT_VALUE_FILLS:
        with pytest.raises(ValueError, match="lock_init_val"):
            lp.SyncPlan(**fields)
        return
    plan = lp.SyncPlan(**fields)
    content = expected_lock_content(plan, blocks)
    want = b"".join((v & (2**64 - 1)).to_bytes(8, "little") for v in content)
    fills = em.lock_fills(plan, blocks)
    assert _apply(fills, len(want)) == want
    p_bytes = plan.participants(blocks).to_bytes(8, "little")
    assert len(fills) == 1 + common_fills + unordered * _nonzero_runs(p_bytes)


def test_what_compilers_report_takes_one_fill_plus_one_per_unordered_lock():
    """BiSheng reports init 0: the content is one zero fill, plus one byte per unordered lock while P < 256."""
    plan = lp.plan_from_metadata({"sync_block_lock_layout": (3 << 32) | 2, "mix_mode": "mix",
                                  "auto_tile_and_bind_subblock": True}, "k")
    assert len(em.lock_fills(plan, 48)) == 1 + 3
    assert len(em.lock_fills(lp.plan_from_metadata({"lock_num": 1 << 20}, "k"), 1)) == 1


def test_init_value_beyond_the_fill_bound_is_rejected_naming_kernel_field_and_value():
    # 0x0102: two runs of non-zero bytes per slot; 32 slots = 64 fills (accepted), 33 = 66 (rejected)
    assert lp.plan_from_metadata({"lock_num": 32, "lock_init_val": 0x0102}, "k").init_value_fills() == 64
    with pytest.raises(ValueError) as info:
        lp.plan_from_metadata({"lock_num": 33, "lock_init_val": 0x0102}, "triton_odd")
    text = str(info.value)
    assert "triton_odd" in text and "lock_init_val=258" in text and "66 byte fills" in text
    # a one-byte value is one fill however many slots
    assert lp.plan_from_metadata({"lock_num": 1 << 20, "lock_init_val": -1}, "k").init_value_fills() == 0
    # with unordered locks the init value is not written (all zero but P): never rejected for it
    assert lp.plan_from_metadata({"sync_block_lock_layout": (1 << 32) | 9, "lock_init_val": 0x0102},
                                 "k").init_value_fills() == 0
