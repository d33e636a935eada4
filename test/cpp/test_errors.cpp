// Size checks (overflow, cap) and ACL/allocator failures: the documented ACL
// code and message, no exception, and nothing left allocated. Housekeeping
// failures never fail a launch.
#include <climits>

#include "test_support.h"

using namespace t;

namespace {
// Live objects that a failed launch must not leave behind. Pinned buffers are
// compared with what the helper's image cache legitimately owns.
void check_nothing_leaked(const acl_sim::Counters &before) {
  auto c = acl_sim::counters();
  CHECK_EQ(c.live_workspace_dataptrs, 0u);
  CHECK_EQ(c.live_device_allocs, before.live_device_allocs);
  auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(c.live_pinned, st.entries + st.retired);
}
// After all copies ran, trimming the cache frees everything: no pinned or event leak.
void check_all_released() {
  sync_all();
  CHECK_EQ(torch_npu::inductor::trim_pinned_cache(), 0u);
  auto c = acl_sim::counters();
  CHECK_EQ(c.live_pinned, 0u);
  CHECK_EQ(c.live_events, 0u);
  CHECK_EQ(c.live_workspace_dataptrs, 0u);
}
}  // namespace

TEST_CASE(workspace_size_overflow_fails_before_allocation) {
  CHECK_FAILS(acquire("triton_big", stream(0), 1u << 20, 1u << 10, 1, 1, uint64_t(1) << 40, LockLayout{}),
              ACL_ERROR_INVALID_PARAM, "'triton_big'", "workspace", "1099511627776", "1048576 x 1024 x 1");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(lock_size_overflow_fails_before_allocation) {
  LockLayout l;
  l.unordered = 0xFFFFFFFFu;
  l.participant_factor = 2;
  CHECK_FAILS(acquire("triton_locks", stream(0), 1, 1, 1, 0xFFFFFFFFu, 0, l), ACL_ERROR_INVALID_PARAM,
              "'triton_locks'", "lock size", "4294967295 unordered", "4294967295 blocks x 2");
  CHECK_FAILS(acquire("triton_legacy", stream(0), 1, 1, 1, 1, 0, legacy(uint64_t(1) << 62, 1)), ACL_ERROR_INVALID_PARAM,
              "'triton_legacy'", "lock_num 4611686018427387904");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(total_over_cap_fails_before_allocation) {
  torch_npu::inductor::set_max_launch_bytes(1 << 20);
  CHECK_FAILS(acquire("triton_cap", stream(0), 2, 1, 1, 2, 1 << 20, LockLayout{}), ACL_ERROR_INVALID_PARAM,
              "'triton_cap'", "1048576", "2097152", "TORCH_NPU_LAUNCH_MAX_BYTES");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
  // just under the cap works
  LaunchResources r = acquire("triton_cap", stream(0), 1, 1, 1, 1, (1 << 20) - 1024, LockLayout{});
  CHECK(r.workspace() != nullptr);
}

TEST_CASE(lock_num_1_shl_32_is_caught_by_default_cap) {
  // lock_num = 1 << 32 has been reported for unordered locks; * 8 = 32 GiB.
  CHECK_EQ(torch_npu::inductor::max_launch_bytes(), uint64_t(8) << 30);
  CHECK_FAILS(acquire("triton_unordered", stream(0), 1, 1, 1, 1, 0, legacy(uint64_t(1) << 32, 0)),
              ACL_ERROR_INVALID_PARAM, "'triton_unordered'", "34359738368");
  CHECK_EQ(acl_sim::counters().allocator_requests, 0u);
}

TEST_CASE(env_cap_is_read) {
  // ctest runs this case with TORCH_NPU_LAUNCH_MAX_BYTES=4096.
  const char *e = std::getenv("TORCH_NPU_LAUNCH_MAX_BYTES");
  CHECK(e != nullptr);
  CHECK_EQ(torch_npu::inductor::max_launch_bytes(), 4096u);
  CHECK_FAILS(acquire("triton_env", stream(0), 1, 1, 1, 1, 8192, LockLayout{}), ACL_ERROR_INVALID_PARAM,
              "'triton_env'", "4096");
}

TEST_CASE(error_message_format_and_code) {
  acl_sim::inject_fault("aclrtMemsetAsync", 1, 507011);
  CHECK_FAILS(acquire("triton_foo", stream(0), 1, 1, 1, 1, 0, legacy(2, 0)), 507011,
              "npu_launch_resources: kernel 'triton_foo': aclrtMemsetAsync of 16 lock bytes failed with error 507011");
}

TEST_CASE(fault_allocator_throws_becomes_bad_alloc_code) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("allocate_workspace", 1, 12345);
  CHECK_FAILS(acquire("triton_a", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), ACL_ERROR_BAD_ALLOC, "'triton_a'",
              "allocate_workspace(", "bytes) failed");
  check_nothing_leaked(before);
  CHECK_EQ(acl_sim::counters().async_copies + acl_sim::counters().memsets, 0u);
  // recovers
  LaunchResources r = acquire("triton_a", stream(0), 1, 1, 1, 1, 64, legacy(2, 7));
  CHECK(r.locks() != nullptr);
  r = LaunchResources();
  check_all_released();
}

TEST_CASE(fault_allocator_returns_null) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("allocate_workspace", 1, acl_sim::kAllocReturnsNull);
  CHECK_FAILS(acquire("triton_n", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), ACL_ERROR_BAD_ALLOC, "'triton_n'",
              "allocate_workspace(", "no memory");
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memset) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemsetAsync", 1, 0x1234);
  CHECK_FAILS(acquire("triton_m", stream(0), 1, 1, 1, 1, 64, legacy(2, 0)), 0x1234, "'triton_m'", "aclrtMemsetAsync");
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memcpy_async_on_new_content_frees_fresh_pinned_buffer) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemcpyAsync", 1, 0x2222);
  CHECK_FAILS(acquire("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), 0x2222, "'triton_c'", "aclrtMemcpyAsync");
  auto c = acl_sim::counters();
  CHECK_EQ(c.pinned_allocs, 1u);
  CHECK_EQ(c.pinned_frees, 1u);
  CHECK_EQ(c.live_pinned, 0u);
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().entries, 0u);
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_memcpy_async_on_cached_content_keeps_entry) {
  { LaunchResources warm = acquire("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)); }
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMemcpyAsync", 1, 0x2223);
  CHECK_FAILS(acquire("triton_c", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), 0x2223, "'triton_c'", "aclrtMemcpyAsync");
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().entries, 1u);
  check_nothing_leaked(before);
  check_all_released();
}

TEST_CASE(fault_malloc_host) {
  auto before = acl_sim::counters();
  acl_sim::inject_fault("aclrtMallocHost", 1, 0x3333);
  CHECK_FAILS(acquire("triton_h", stream(0), 1, 1, 1, 1, 64, legacy(2, 7)), 0x3333, "'triton_h'", "aclrtMallocHost");
  CHECK_EQ(acl_sim::counters().async_copies, 0u);
  check_nothing_leaked(before);
  check_all_released();
}

namespace {
// One cache entry at most; content A cached. Returns after A's copy ran.
void cache_one_entry_with_a() {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  LaunchResources r = acquire("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 7));
  r = LaunchResources();
  sync_all();
}
}  // namespace

// Housekeeping (retiring and freeing images) never fails a launch: it warns and retries.
TEST_CASE(fault_create_event_at_eviction_keeps_entry_and_launches) {
  cache_one_entry_with_a();
  acl_sim::inject_fault("aclrtCreateEvent", 1, 0x4444);
  { LaunchResources r = acquire("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)); }  // B: succeeds
  auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(st.entries, 2u);  // A kept (over the bound until a later launch), B added
  CHECK_EQ(st.retired, 0u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
  // recovers: the next new content retires the least recently used
  { LaunchResources r = acquire("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 9)); }
  CHECK(torch_npu::inductor::pinned_cache_stats().evictions >= 1u);
  check_all_released();
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(fault_record_event_at_eviction_keeps_entry_and_launches) {
  cache_one_entry_with_a();
  acl_sim::inject_fault("aclrtRecordEvent", 1, 0x5555);
  { LaunchResources r = acquire("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().entries, 2u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);  // the created event was destroyed
  check_all_released();
  CHECK_NO_SIM_ERRORS();
}

namespace {
// A retired: evicted by B, waiting for its (already finished) copy to be confirmed.
void retire_a() {
  cache_one_entry_with_a();
  LaunchResources r = acquire("triton_e", stream(0), 1, 1, 1, 1, 64, legacy(2, 8));
  r = LaunchResources();
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);
}
}  // namespace

TEST_CASE(fault_query_event_while_reaping_launches_and_retries) {
  retire_a();
  acl_sim::inject_fault("aclrtQueryEventStatus", 1, 0x6666);
  { LaunchResources r = acquire("triton_q", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);  // kept for a retry
  { LaunchResources r = acquire("triton_q", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 0u);  // retried and freed
  check_all_released();
}

TEST_CASE(fault_free_host_while_reaping_launches_and_retries) {
  retire_a();
  acl_sim::inject_fault("aclrtFreeHost", 1, 0x8888);
  { LaunchResources r = acquire("triton_f", stream(0), 1, 1, 1, 1, 64, legacy(2, 8)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);
  check_all_released();
}

TEST_MAIN()
