// Size checks (overflow, cap) and ACL/allocator failures: the documented
// exception, and nothing left allocated.
#include <climits>

#include "test_support.h"

using namespace t;
using torch_npu_patchset::acquire_launch_resources;

namespace {
// Live objects that a failed launch must not leave behind. Pinned buffers are
// compared with what the helper's cache legitimately owns.
void check_nothing_leaked(const acl_sim::Counters &before) {
  auto c = acl_sim::counters();
  CHECK_EQ(c.live_workspace_dataptrs, 0u);
  CHECK_EQ(c.live_device_allocs, before.live_device_allocs);
  auto st = torch_npu_patchset::pinned_cache_stats();
  CHECK_EQ(c.live_pinned, st.entries + st.parked);
}
// After all copies ran, trimming the cache frees everything: no pinned or event leak.
void check_all_released() {
  sync_all();
  CHECK_EQ(torch_npu_patchset::trim_pinned_cache(), 0u);
  auto c = acl_sim::counters();
  CHECK_EQ(c.live_pinned, 0u);
  CHECK_EQ(c.live_events, 0u);
  CHECK_EQ(c.live_workspace_dataptrs, 0u);
}
}  // namespace

TEST_CASE(workspace_size_overflow_throws_before_allocation) {
  CHECK_THROWS(acquire_launch_resources("triton_big", stream(0), 1u << 20, 1u << 10, 1, 1, uint64_t(1) << 40, LockLayout{}),
               std::overflow_error, "triton_big", "workspace", "1099511627776", "1048576 x 1024 x 1");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(lock_size_overflow_throws_before_allocation) {
  LockLayout l;
  l.unordered = 0xFFFFFFFFu;
  l.participant_factor = 2;
  CHECK_THROWS(acquire_launch_resources("triton_locks", stream(0), 1, 1, 1, 0xFFFFFFFFu, 0, l), std::overflow_error,
               "triton_locks", "lock size", "unordered 4294967295", "4294967295 blocks x 2");
  CHECK_THROWS(acquire_launch_resources("triton_legacy", stream(0), 1, 1, 1, 1, 0, legacy(uint64_t(1) << 62, 1)),
               std::overflow_error, "triton_legacy");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(total_over_cap_throws_before_allocation) {
  torch_npu_patchset::set_max_launch_bytes(1 << 20);
  CHECK_THROWS(acquire_launch_resources("triton_cap", stream(0), 2, 1, 1, 2, 1 << 20, LockLayout{}), std::length_error,
               "triton_cap", "1048576", "2097152", "TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
  // just under the cap works
  LaunchResources r = acquire_launch_resources("triton_cap", stream(0), 1, 1, 1, 1, (1 << 20) - 1024, LockLayout{});
  CHECK(r.workspace() != nullptr);
}

TEST_CASE(lock_num_1_shl_32_is_caught_by_default_cap) {
  // DOMAIN.md 3: lock_num = 1 << 32 seen in the wild; * 8 = 32 GiB.
  CHECK_EQ(torch_npu_patchset::max_launch_bytes(), uint64_t(8) << 30);
  CHECK_THROWS(acquire_launch_resources("triton_unordered", stream(0), 1, 1, 1, 1, 0, legacy(uint64_t(1) << 32, 0)),
               std::length_error, "triton_unordered", "34359738368");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(env_cap_is_read) {
  // ctest runs this case with TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES=4096.
  const char *e = std::getenv("TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES");
  CHECK(e != nullptr);
  CHECK_EQ(torch_npu_patchset::max_launch_bytes(), 4096u);
  CHECK_THROWS(acquire_launch_resources("triton_env", stream(0), 1, 1, 1, 1, 8192, LockLayout{}), std::length_error,
               "triton_env", "4096");
}

TEST_CASE(error_message_format) {
  acl_sim::inject_fault("aclrtMemsetAsync", 1, 0x7bc83);
  CHECK_THROWS(acquire_launch_resources("triton_foo", stream(0), 1, 1, 1, 1, 0, legacy(2, 0)), std::runtime_error,
               "torch_npu_patchset: kernel 'triton_foo': aclrtMemsetAsync failed with error 0x7bc83");
}

TEST_CASE(fault_allocator_throws) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("malloc_with_stream", 1, 12345);
  CHECK_THROWS(acquire_launch_resources("triton_a", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), std::runtime_error,
               "triton_a", "malloc_with_stream", "bytes");
  check_nothing_leaked(before);
  CHECK_EQ(acl_sim::counters().async_copies + acl_sim::counters().memsets, 0u);
  // recovers
  LaunchResources r = acquire_launch_resources("triton_a", stream(0), 1, 1, 1, 1, 64, legacy(2, 7));
  CHECK(r.locks() != nullptr);
  r = LaunchResources();
  check_all_released();
}

TEST_CASE(fault_allocator_returns_null) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("malloc_with_stream", 1, acl_sim::kAllocReturnsNull);
  CHECK_THROWS(acquire_launch_resources("triton_n", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), std::runtime_error,
               "triton_n", "malloc_with_stream", "no memory");
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memset) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemsetAsync", 1, 0x1234);
  CHECK_THROWS(acquire_launch_resources("triton_m", stream(0), 1, 1, 1, 1, 64, legacy(2, 0)), std::runtime_error,
               "triton_m", "aclrtMemsetAsync", "0x1234");
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memcpy_async_on_new_content_frees_fresh_pinned_buffer) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemcpyAsync", 1, 0x2222);
  CHECK_THROWS(acquire_launch_resources("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), std::runtime_error,
               "triton_c", "aclrtMemcpyAsync", "0x2222");
  auto c = acl_sim::counters();
  CHECK_EQ(c.pinned_allocs, 1u);
  CHECK_EQ(c.pinned_frees, 1u);
  CHECK_EQ(c.live_pinned, 0u);
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().entries, 0u);
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memcpy_async_on_cached_content_keeps_entry) {
  { LaunchResources warm = acquire_launch_resources("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)); }
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemcpyAsync", 1, 0x2223);
  CHECK_THROWS(acquire_launch_resources("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), std::runtime_error,
               "triton_c", "aclrtMemcpyAsync", "0x2223");
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().entries, 1u);
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_malloc_host) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMallocHost", 1, 0x3333);
  CHECK_THROWS(acquire_launch_resources("triton_h", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), std::runtime_error,
               "triton_h", "aclrtMallocHost", "0x3333");
  CHECK_EQ(acl_sim::counters().async_copies, 0u);
  check_nothing_leaked(before);
  check_all_released();
}

namespace {
// One cache entry at most; content A cached. Returns after A's copy ran.
void cache_one_entry_with_a() {
  torch_npu_patchset::set_pinned_cache_limits(1, 1 << 20);
  LaunchResources r = acquire_launch_resources("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 7));
  r = LaunchResources();
  sync_all();
}
}  // namespace

TEST_CASE(fault_create_event_at_eviction_keeps_entry) {
  cache_one_entry_with_a();
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtCreateEvent", 1, 0x4444);
  CHECK_THROWS(acquire_launch_resources("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)), std::runtime_error,
               "triton_e", "aclrtCreateEvent", "0x4444");
  auto st = torch_npu_patchset::pinned_cache_stats();
  CHECK_EQ(st.entries, 1u);  // A still cached
  CHECK_EQ(st.parked, 0u);
  CHECK_EQ(acl_sim::counters().pinned_allocs, before.pinned_allocs);  // B's buffer never made
  CHECK_EQ(acl_sim::counters().live_events, 0u);
  check_nothing_leaked(before);
  // recovers: B evicts A now
  LaunchResources r = acquire_launch_resources("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8));
  r = LaunchResources();
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().evictions, 1u);
  check_all_released();
}

TEST_CASE(fault_record_event_at_eviction_keeps_entry) {
  cache_one_entry_with_a();
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtRecordEvent", 1, 0x5555);
  CHECK_THROWS(acquire_launch_resources("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)), std::runtime_error,
               "triton_e", "aclrtRecordEvent", "0x5555");
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().entries, 1u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);  // the created event was destroyed
  check_nothing_leaked(before);
  check_all_released();
}

namespace {
// A parked: evicted by B, waiting for its (already finished) copy to be confirmed.
void park_a() {
  cache_one_entry_with_a();
  LaunchResources r = acquire_launch_resources("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8));
  r = LaunchResources();
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().parked, 1u);
}
}  // namespace

TEST_CASE(fault_query_event_while_reaping) {
  park_a();
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtQueryEventStatus", 1, 0x6666);
  CHECK_THROWS(acquire_launch_resources("triton_q", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)), std::runtime_error,
               "triton_q", "aclrtQueryEventStatus", "0x6666");
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().parked, 1u);  // kept for a retry
  CHECK_EQ(acl_sim::counters().allocator_requests, before.allocator_requests);  // failed before allocating
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_destroy_event_while_reaping) {
  park_a();
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtDestroyEvent", 1, 0x7777);
  CHECK_THROWS(acquire_launch_resources("triton_d", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)), std::runtime_error,
               "triton_d", "aclrtDestroyEvent", "0x7777");
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_free_host_while_reaping) {
  park_a();
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtFreeHost", 1, 0x8888);
  CHECK_THROWS(acquire_launch_resources("triton_f", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)), std::runtime_error,
               "triton_f", "aclrtFreeHost", "0x8888");
  CHECK_EQ(torch_npu_patchset::pinned_cache_stats().parked, 1u);
  check_nothing_leaked(before);
  check_all_released();
}

TEST_MAIN()
