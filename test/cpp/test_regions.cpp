// Region carving, lock content and argument decoding of the launch helper,
// checked by the probe kernel in the host ACL simulation.
#include <climits>

#include "test_support.h"

using namespace t;
using torch_npu::inductor::kRegionAlignment;

namespace {
struct Combo {
  const char *name;
  uint64_t ws_per_block;
  LockLayout locks;
};
std::vector<Combo> combos() {
  std::vector<Combo> v;
  LockLayout none;
  LockLayout legacy;
  legacy.legacy_slots = 3;
  legacy.init_value = 7;
  LockLayout packed;
  packed.ordered = 2;
  packed.unordered = 1;
  packed.init_value = 0;
  v.push_back({"none", 0, none});
  v.push_back({"workspace_only", 100, none});
  v.push_back({"legacy_locks_only", 0, legacy});
  v.push_back({"packed_locks_only", 0, packed});
  v.push_back({"workspace_and_legacy_locks", 100, legacy});
  v.push_back({"workspace_and_packed_locks", 4096, packed});
  return v;
}
}  // namespace

TEST_CASE(regions_disjoint_and_aligned_for_every_combination) {
  aclrtStream s = stream(0);
  for (size_t base_offset : {size_t(0), size_t(32), size_t(100)}) {
    for (const Combo &c : combos()) {
      acl_sim::set_device_base_offset(base_offset);
      // Fresh stream block with this base offset: force growth with a big request first.
      acl_sim::reset_counters();
      const uint32_t gx = 3, gy = 2, gz = 1, blocks = 6;
      auto want = t::sizes(c.name, gx, gy, gz, blocks, c.ws_per_block, c.locks);
      LaunchResources r = acquire(c.name, s, gx, gy, gz, blocks, c.ws_per_block, c.locks);
      CHECK_EQ(r.lock_bytes(), want.lock_bytes);
      CHECK_EQ(r.workspace_bytes(), want.workspace_bytes);
      CHECK_EQ(r.workspace_bytes(), c.ws_per_block * gx * gy * gz);
      CHECK_EQ((r.locks() == nullptr), (r.lock_bytes() == 0));
      CHECK_EQ((r.workspace() == nullptr), (r.workspace_bytes() == 0));
      auto l = reinterpret_cast<uintptr_t>(r.locks());
      auto w = reinterpret_cast<uintptr_t>(r.workspace());
      CHECK_EQ(l % kRegionAlignment, 0u);
      CHECK_EQ(w % kRegionAlignment, 0u);
      CHECK(disjoint(l, r.lock_bytes(), w, r.workspace_bytes()));
      const bool any = r.lock_bytes() + r.workspace_bytes() != 0;
      CHECK_EQ(acl_sim::counters().allocator_requests, uint64_t(any ? 1 : 0));
      int32_t grid[3] = {int32_t(gx), int32_t(gy), int32_t(gz)};
      aclrtFuncHandle h = probe(c.name, r.lock_bytes(), r.workspace_bytes());
      uint64_t id = launch(h, s, r.locks(), r.workspace(), blocks, grid);
      r = LaunchResources();
      sync(s);
      auto rec = record(id);
      CHECK(rec.decoded);
      CHECK(!rec.regions_overlap);
      CHECK(rec.workspace_written);
      CHECK(rec.locks_unchanged);
      CHECK(rec.lock_slots_at_start == expected_locks(c.locks, blocks));
      CHECK_EQ(rec.grid[0], 3);
      CHECK_EQ(rec.grid[2], 1);
      CHECK_NO_SIM_ERRORS();
    }
  }
}

TEST_CASE(regions_do_not_depend_on_allocator_base_alignment) {
  // Make the stream block start 32 bytes past a 512-byte boundary.
  acl_sim::set_device_base_offset(32);
  {
    at::Tensor probe_block = at_npu::native::allocate_workspace(1, stream(3));
    CHECK_EQ(reinterpret_cast<uintptr_t>(probe_block.data_ptr()) % 512, 32u);  // precondition: misaligned base
  }
  aclrtStream s = stream(1);
  LockLayout l;
  l.legacy_slots = 4;
  l.init_value = 7;
  LaunchResources r = acquire("k", s, 1, 1, 1, 1, 1 << 20, l);  // new block (growth)
  CHECK_EQ(reinterpret_cast<uintptr_t>(r.locks()) % 512, 0u);
  CHECK_EQ(reinterpret_cast<uintptr_t>(r.workspace()) % 512, 0u);
  aclrtFuncHandle h = probe("k", r.lock_bytes(), r.workspace_bytes());
  int32_t grid[3] = {1, 1, 1};
  uint64_t id = launch(h, s, r.locks(), r.workspace(), 1, grid);
  r = LaunchResources();
  sync(s);
  CHECK(record(id).workspace_written);  // the whole workspace was inside the allocation
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(init_values_seen_by_kernel) {
  aclrtStream s = stream(0);
  const int64_t values[] = {0, -1, 7, INT64_MIN, INT64_MAX};
  for (int64_t v : values) {
    for (int packed = 0; packed < 2; ++packed) {
      LockLayout l;
      if (packed)
        l.ordered = 3;
      else
        l.legacy_slots = 5;
      l.init_value = v;
      acl_sim::reset_counters();
      aclrtFuncHandle h = probe("init", packed ? 3 * 64 : 5 * 8, 256);
      uint64_t id = helper_launch("init", h, s, 2, 1, 1, 2, 128, l);
      sync(s);
      auto rec = record(id);
      CHECK_EQ(rec.distinct_lock_values.size(), 1u);
      CHECK_EQ(rec.distinct_lock_values[0], v);
      CHECK_EQ(rec.lock_slots_at_start.size(), size_t(packed ? 24 : 5));
      const bool uniform = v == 0;  // a byte fill only for zero
      auto c = acl_sim::counters();
      CHECK_EQ(c.memsets, uint64_t(uniform ? 1 : 0));
      CHECK_EQ(c.async_copies, uint64_t(uniform ? 0 : 1));
      CHECK_EQ(c.sync_copies, 0u);
      CHECK_EQ(c.allocator_requests, 1u);
      CHECK_NO_SIM_ERRORS();
    }
  }
}

TEST_CASE(packed_layouts_match_domain_rule) {
  aclrtStream s = stream(0);
  struct P {
    uint32_t ordered, unordered, factor;
  };
  const P cases[] = {{3, 0, 1}, {0, 2, 1}, {0, 2, 2}, {2, 3, 1}, {2, 3, 2}, {1, 1, 2}};
  const uint32_t block_num = 5;
  for (const P &p : cases) {
    LockLayout l;
    l.ordered = p.ordered;
    l.unordered = p.unordered;
    l.participant_factor = p.factor;
    l.init_value = 9;
    const uint64_t P_ = uint64_t(block_num) * p.factor;
    const uint64_t want_bytes = p.ordered * 64ull + p.unordered * (1 + 2 * P_) * 64ull;
    // grid larger than block_num: auto-blockify clamped the launch to 5 blocks
    LaunchResources r = acquire("packed", s, 8, 1, 1, block_num, 64, l);
    CHECK_EQ(r.lock_bytes(), want_bytes);
    CHECK_EQ(r.workspace_bytes(), 8u * 64u);  // per program grid, not per launched block
    aclrtFuncHandle h = probe("packed", want_bytes, r.workspace_bytes());
    int32_t grid[3] = {8, 1, 1};
    uint64_t id = launch(h, s, r.locks(), r.workspace(), block_num, grid);
    r = LaunchResources();
    sync(s);
    auto rec = record(id);
    auto want = expected_locks(l, block_num);
    CHECK_EQ(rec.lock_slots_at_start.size(), want.size());
    CHECK(rec.lock_slots_at_start == want);
    // spot checks of the rule itself
    if (p.unordered) {
      size_t first_unordered = p.ordered * 8;
      CHECK_EQ(rec.lock_slots_at_start[first_unordered], int64_t(P_));
      CHECK_EQ(rec.lock_slots_at_start[first_unordered + 1], 0);
      CHECK_EQ(rec.lock_slots_at_start.back(), 0);
    }
    if (p.ordered) CHECK_EQ(rec.lock_slots_at_start[0], p.unordered ? 0 : 9);  // zeroed beside unordered locks
    CHECK_NO_SIM_ERRORS();
  }
}

TEST_CASE(zero_grid_makes_no_acl_call) {
  LockLayout l;
  l.legacy_slots = 4;
  l.init_value = 3;
  acl_sim::reset_counters();
  for (int d = 0; d < 3; ++d) {
    uint32_t g[3] = {4, 4, 4};
    g[d] = 0;
    LaunchResources r = acquire("zero", stream(0), g[0], g[1], g[2], 1, 128, l);
    CHECK(r.locks() == nullptr);
    CHECK(r.workspace() == nullptr);
    CHECK_EQ(r.total_bytes(), 0u);
  }
  auto c = acl_sim::counters();
  CHECK_EQ(c.allocator_requests + c.memsets + c.async_copies + c.sync_copies + c.pinned_allocs, 0u);
}

TEST_CASE(no_locks_no_workspace_makes_no_allocator_request) {
  acl_sim::reset_counters();
  LaunchResources r = acquire("plain", stream(0), 4, 2, 1, 8, 0, LockLayout{});
  CHECK(r.locks() == nullptr && r.workspace() == nullptr);
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(legacy_and_packed_together_rejected) {
  LockLayout l;
  l.legacy_slots = 2;
  l.ordered = 1;
  CHECK_FAILS(acquire("triton_mixed", stream(0), 1, 1, 1, 1, 0, l), ACL_ERROR_INVALID_PARAM,
              "'triton_mixed'", "lock_num 2", "sync_block_lock_layout (1 ordered, 0 unordered)");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(unordered_locks_need_participants) {
  LockLayout l;
  l.unordered = 1;
  CHECK_FAILS(acquire("triton_u", stream(0), 1, 1, 1, 0, 0, l), ACL_ERROR_INVALID_PARAM, "'triton_u'",
              "block_num 0");
  l.participant_factor = 0;
  CHECK_FAILS(acquire("triton_u", stream(0), 1, 1, 1, 4, 0, l), ACL_ERROR_INVALID_PARAM, "'triton_u'",
              "participant_factor 0");
}

TEST_CASE(ffts_address_and_argument_order_decoded) {
  aclrtStream s = stream(0);
  LockLayout l;
  l.legacy_slots = 2;
  l.init_value = 5;
  aclrtFuncHandle h = probe("ffts", 16, 64, 0, true);
  uint64_t id = helper_launch("ffts", h, s, 1, 1, 1, 1, 64, l, true);
  sync(s);
  auto rec = record(id);
  CHECK(rec.ffts_ok);
  CHECK(rec.lock_slots_at_start == std::vector<int64_t>({5, 5}));
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(probe_flags_wrong_pointer_presence) {
  // The probe must be able to fail: hand it a lock pointer of nullptr while it expects locks.
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("bad", 16, 0);
  int32_t grid[3] = {1, 1, 1};
  launch(h, s, nullptr, nullptr, 1, grid);
  sync(s);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kBadArguments) >= 1);
}

TEST_MAIN()
