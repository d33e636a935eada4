// Region carving and lock content of the launch helper on a released torch_npu's runtime (its caching
// allocator, its task queue), checked by the host ACL library's probe kernel: every combination of
// workspace and lock layout, every layout's content as the kernel sees it, byte fills only.
#include <climits>

#include "real_support.h"

using namespace t;
using torch_npu::inductor::kRegionAlignment;

namespace {
struct Combo {
  const char *name;
  uint64_t ws_per_block;
  LockLayout locks;
};
std::vector<Combo> combos() {
  return {{"none", 0, LockLayout{}},
          {"workspace_only", 100, LockLayout{}},
          {"legacy_locks_only", 0, legacy(3, 7)},
          {"packed_locks_only", 0, packed(2, 1)},
          {"ordered_locks_only", 0, packed(3, 0, 1, -2)},
          {"workspace_and_legacy_locks", 100, legacy(3, 7)},
          {"workspace_and_packed_locks", 4096, packed(2, 1)},
          {"workspace_and_mix_locks", 520, packed(1, 2, 2)},
          {"odd_workspace_and_one_slot", 1, legacy(1, 0)}};
}

// Every layout the compilers report, and a few they never do (the helper handles them all).
std::vector<LockLayout> layouts() {
  std::vector<LockLayout> v;
  for (int64_t init : {int64_t(0), int64_t(-1), int64_t(7), int64_t(0x0101010101010101), int64_t(0x1234),
                       int64_t(INT64_MIN), int64_t(INT64_MAX), int64_t(-256)}) {
    v.push_back(legacy(5, init));
    v.push_back(packed(3, 0, 1, init));
  }
  for (uint32_t factor : {1u, 2u})
    for (uint32_t ordered : {0u, 1u, 3u})
      for (uint32_t unordered : {1u, 2u}) v.push_back(packed(ordered, unordered, factor, 9));  // init ignored: zeroed
  return v;
}

// Fills for_each_lock_fill issues for a layout (counted independently: one
// over the region, plus one per run of equal non-zero bytes of every slot
// written with a value that is not one repeated byte).
uint64_t runs_of_nonzero_bytes(uint64_t v) {
  uint64_t n = 0;
  for (int b = 0; b < 8;) {
    const uint8_t byte = uint8_t(v >> (8 * b));
    int e = b + 1;
    while (e < 8 && uint8_t(v >> (8 * e)) == byte) ++e;
    n += byte != 0;
    b = e;
  }
  return n;
}
uint64_t expected_fills(const LockLayout &l, uint32_t block_num) {
  const std::vector<int64_t> content = expected_locks(l, block_num);
  if (content.empty()) return 0;
  const uint64_t common = l.unordered != 0 ? 0 : uint64_t(l.init_value);
  const bool one_byte = common == (common & 0xff) * UINT64_C(0x0101010101010101);
  uint64_t n = 1;
  if (!one_byte) n += content.size() * runs_of_nonzero_bytes(common);
  n += l.unordered * runs_of_nonzero_bytes(uint64_t(block_num) * l.participant_factor);
  return n;
}
}  // namespace

TEST_CASE(regions_disjoint_and_aligned_for_every_combination) {
  for (uint64_t base_offset : {uint64_t(0), uint64_t(32), uint64_t(100)}) {
    for (const Combo &c : combos()) {
      acl_host_set_device_base_offset(base_offset);
      aclrtStream own = fresh_stream(8);  // torch_npu's allocator has no block cached: a new segment
      c10_npu::NPUCachingAllocator::resetAccumulatedStats(0);
      const uint32_t gx = 3, gy = 2, gz = 1, blocks_ = 6;
      const LaunchSizes want = sizes(c.name, gx, gy, gz, blocks_, c.ws_per_block, c.locks);
      aclrtFuncHandle h = probe(c.name, want.lock_bytes, want.workspace_bytes);
      Launch L = generated_launch(c.name, h, own, gx, gy, gz, blocks_, c.ws_per_block, c.locks);
      drain();
      const LaunchRegions &r = L.regions;
      CHECK_EQ(r.sizes.lock_bytes, want.lock_bytes);
      CHECK_EQ(r.sizes.workspace_bytes, c.ws_per_block * gx * gy * gz);
      CHECK_EQ((r.locks == nullptr), (want.lock_bytes == 0));
      CHECK_EQ((r.workspace == nullptr), (want.workspace_bytes == 0));
      const auto l = reinterpret_cast<uintptr_t>(r.locks), w = reinterpret_cast<uintptr_t>(r.workspace);
      CHECK_EQ(l % kRegionAlignment, 0u);
      CHECK_EQ(w % kRegionAlignment, 0u);
      CHECK(disjoint(l, want.lock_bytes, w, want.workspace_bytes));
      const bool any = want.total_bytes != 0;
      const Blocks b = blocks();
      CHECK_EQ(b.requests, int64_t(any ? 1 : 0));  // one request of torch_npu's caching allocator, or none
      CHECK_EQ(b.live, int64_t(any ? 1 : 0));      // its own, held until its kernel finished
      settle_held();
      CHECK_EQ(blocks().live, 0);
      CHECK_EQ(L.rc->load(), ACL_SUCCESS);
      sync(own);
      auto rec = record(L.id->load());
      if (any) {  // both regions inside the one segment torch_npu's allocator took from the device, whatever its base
        const Extent &e = l ? rec.lock_extent : rec.workspace_extent;
        CHECK_EQ(e.base % 512, base_offset % 512);
        if (l) CHECK(l + want.lock_bytes <= e.base + e.size);
        if (w) {
          CHECK(w + want.workspace_bytes <= e.base + e.size);
          CHECK_EQ(rec.workspace_extent.base, e.base);
        }
      }
      CHECK(rec.decoded);
      CHECK(!rec.regions_overlap);
      CHECK(rec.workspace_written);
      CHECK(rec.locks_unchanged);
      CHECK(rec.lock_slots_at_start == expected_locks(c.locks, blocks_));
      CHECK_EQ(rec.lock_overrun + rec.workspace_overrun, 0u);
      CHECK_EQ(rec.grid[0], 3);
      CHECK_EQ(rec.grid[1], 2);
      CHECK_NO_SIM_ERRORS();
    }
  }
}

TEST_CASE(regions_do_not_depend_on_allocator_base_alignment) {
  acl_host_set_device_base_offset(32);  // every new segment starts 32 bytes past a 512-byte boundary
  aclrtStream own = fresh_stream(8);
  const LockLayout l = legacy(4, 7);
  aclrtFuncHandle h = probe("k", 32, 1 << 20);
  Launch L = generated_launch("k", h, own, 1, 1, 1, 1, 1 << 20, l);
  drain();
  sync(own);
  auto rec = record(L.id->load());
  CHECK_EQ(rec.lock_extent.base % 512, 32u);  // precondition: a misaligned block
  CHECK_EQ(reinterpret_cast<uintptr_t>(L.regions.locks) % 512, 0u);
  CHECK_EQ(reinterpret_cast<uintptr_t>(L.regions.workspace) % 512, 0u);
  CHECK(rec.workspace_written);  // the whole workspace was inside the block
  CHECK_EQ(rec.workspace_overrun, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(lock_content_seen_by_kernel_for_every_layout) {
  aclrtStream s = stream(0);
  for (uint32_t block_num : {1u, 5u, 300u}) {  // P = 300 x 2 = 600 needs two byte runs
    for (const LockLayout &l : layouts()) {
      const LaunchSizes want = sizes("layout", block_num, 1, 1, block_num, 64, l);
      aclrtFuncHandle h = probe("layout", want.lock_bytes, want.workspace_bytes);
      const Counters c0 = counters();
      const Blocks b0 = blocks();
      const uint64_t id = helper_launch("layout", h, s, block_num, 1, 1, block_num, 64, l);
      const Counters c = counters();
      sync(s);
      const auto rec = record(id);
      const std::vector<int64_t> content = expected_locks(l, block_num);
      CHECK_MSG(rec.lock_slots_at_start == content,
                "legacy " << l.legacy_slots << " ordered " << l.ordered << " unordered " << l.unordered << " factor "
                          << l.participant_factor << " init " << l.init_value << " blocks " << block_num);
      // byte fills only, as many as the content needs; nothing page-locked, no host copy
      CHECK_EQ(c.memsets - c0.memsets, expected_fills(l, block_num));
      CHECK_EQ(c.async_copies + c.sync_copies + c.pinned_allocs - c0.async_copies - c0.sync_copies - c0.pinned_allocs,
               0u);
      // the thread's kept block is reused without an event; a larger one replaces it (the old one given back
      // behind its last kernel: one event)
      const int64_t requests = blocks().requests - b0.requests;
      CHECK(requests == 0 || requests == 1);
      CHECK(c.events_recorded - c0.events_recorded <= 1u);  // (recorded by the launch after the one that grew)
      CHECK_NO_SIM_ERRORS();
    }
  }
}

TEST_CASE(zero_grid_takes_nothing) {
  const Counters c0 = counters();
  for (int d = 0; d < 3; ++d) {
    uint32_t g[3] = {4, 4, 4};
    g[d] = 0;
    LaunchMemory m("zero", stream(0), g[0], g[1], g[2], 1, 128, legacy(4, 3));
    CHECK(m.regions().locks == nullptr);
    CHECK(m.regions().workspace == nullptr);
    CHECK_EQ(m.regions().sizes.total_bytes, 0u);
    m.handed();
  }
  const Counters c = counters();
  CHECK_EQ(blocks().requests, 0);
  CHECK_EQ(c.memsets + c.async_copies + c.pinned_allocs, c0.memsets + c0.async_copies + c0.pinned_allocs);
}

TEST_CASE(no_locks_no_workspace_takes_nothing) {
  const Counters c0 = counters();
  LaunchMemory m("plain", stream(0), 4, 2, 1, 8, 0, LockLayout{});
  CHECK(m.regions().locks == nullptr && m.regions().workspace == nullptr);
  CHECK_EQ(m.regions().write_locks("plain", stream(0)), ACL_SUCCESS);  // nothing to write
  m.handed();
  CHECK_EQ(blocks().requests, 0);
  CHECK_EQ(counters().memsets, c0.memsets);
}

TEST_CASE(ffts_address_and_argument_order_decoded) {
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("ffts", 16, 64, 0, true);
  uint64_t id = helper_launch("ffts", h, s, 1, 1, 1, 1, 64, legacy(2, 5), true);
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
  CHECK(error_count("bad-arguments") >= 1);
}
