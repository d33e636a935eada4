// The helper's page-locked lock-image cache: reuse, bounds, and eviction
// that keeps buffers alive until the copies from them ran.
#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;


TEST_CASE(cache_hit_makes_no_pinned_allocation) {
  aclrtStream s = stream(0);
  { LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(4, 7)); }
  auto c0 = acl_sim::counters();
  for (int i = 0; i < 10; ++i) LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(4, 7));
  auto c1 = acl_sim::counters();
  CHECK_EQ(c1.pinned_allocs - c0.pinned_allocs, 0u);
  CHECK_EQ(c1.async_copies - c0.async_copies, 10u);
  auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(st.hits, 10u);
  CHECK_EQ(st.misses, 1u);
  CHECK_EQ(st.entries, 1u);
}

TEST_CASE(evicted_buffer_lives_until_its_copies_ran) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream s = stream(0);
  aclrtFuncHandle slow = probe("slow", 0, 0, 400000);  // keeps the stream busy 400 ms
  aclrtFuncHandle check = probe("check", 32, 0);
  int32_t grid[3] = {1, 1, 1};
  { LaunchResources warm = acquire("warm", s, 1, 1, 1, 1, 0, legacy(4, 0)); }  // block exists: no growth (which would sync) below
  launch(slow, s, nullptr, nullptr, 1, grid);
  // A's copy is queued behind the slow kernel.
  uint64_t a = helper_launch("check", check, s, 1, 1, 1, 1, 0, legacy(4, 7));
  auto c0 = acl_sim::counters();
  CHECK_EQ(c0.live_pinned, 1u);
  // B evicts A while A's copy is still pending.
  uint64_t b = helper_launch("check", check, s, 1, 1, 1, 1, 0, legacy(4, 8));
  auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(st.evictions, 1u);
  CHECK_EQ(st.retired, 1u);
  CHECK_EQ(acl_sim::counters().live_pinned, 2u);
  // Later acquires poll, never wait, and keep it while the copy is pending.
  auto t0 = std::chrono::steady_clock::now();
  uint64_t b2 = helper_launch("check", check, s, 1, 1, 1, 1, 0, legacy(4, 8));
  auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(dt < std::chrono::milliseconds(200));
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);
  CHECK_EQ(acl_sim::counters().live_pinned, 2u);
  CHECK_EQ(acl_sim::counters().host_blocking, c0.host_blocking);
  sync(s);
  // Copies done: the next acquire frees it.
  { LaunchResources r = acquire("check", s, 1, 1, 1, 1, 0, legacy(4, 8)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 1u);
  sync(s);
  CHECK(record(a).lock_slots_at_start == std::vector<int64_t>(4, 7));
  CHECK(record(b).lock_slots_at_start == std::vector<int64_t>(4, 8));
  CHECK(record(b2).lock_slots_at_start == std::vector<int64_t>(4, 8));
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kStalePinnedSource), 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(eviction_records_an_event_on_every_stream_that_used_the_buffer) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtFuncHandle slow = probe("slow", 0, 0, 400000);
  int32_t grid[3] = {1, 1, 1};
  for (int i = 0; i < 2; ++i) LaunchResources warm = acquire("warm", stream(i), 1, 1, 1, 1, 0, legacy(4, 0));
  launch(slow, stream(1), nullptr, nullptr, 1, grid);  // stream 1 busy, stream 0 idle
  { LaunchResources r = acquire("k", stream(0), 1, 1, 1, 1, 0, legacy(4, 7)); }
  { LaunchResources r = acquire("k", stream(1), 1, 1, 1, 1, 0, legacy(4, 7)); }
  sync(stream(0));
  auto c0 = acl_sim::counters();
  { LaunchResources r = acquire("k", stream(0), 1, 1, 1, 1, 0, legacy(4, 9)); }  // evicts
  CHECK_EQ(acl_sim::counters().events_recorded - c0.events_recorded, 2u);
  { LaunchResources r = acquire("k", stream(0), 1, 1, 1, 1, 0, legacy(4, 9)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);  // stream 1's copy still pending
  sync(stream(1));
  sync(stream(0));
  CHECK_EQ(torch_npu::inductor::trim_pinned_cache(), 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(cache_bounded_by_entries_and_bytes) {
  aclrtStream s = stream(0);
  torch_npu::inductor::set_pinned_cache_limits(4, 1 << 20);
  for (int v = 1; v <= 10; ++v) LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(8, 100 + v));
  auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(st.entries, 4u);
  CHECK_EQ(st.evictions, 6u);
  torch_npu::inductor::set_pinned_cache_limits(64, 3 * 1024);
  for (int v = 1; v <= 10; ++v) LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(128, 200 + v));  // 1 KiB each
  st = torch_npu::inductor::pinned_cache_stats();
  CHECK(st.bytes <= 3 * 1024);
  CHECK_EQ(st.entries, 3u);
  sync(s);
  CHECK_EQ(torch_npu::inductor::trim_pinned_cache(), 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
