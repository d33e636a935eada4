// Stream ordering: back-to-back launches on one stream, block growth,
// independent streams and the per-stream mutex.
#include <atomic>
#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;

TEST_CASE(back_to_back_launches_first_still_running) {
  aclrtStream s = stream(0);
  LockLayout la = legacy(8, 7);
  LockLayout lb;
  lb.ordered = 2;
  lb.init_value = 0;
  aclrtFuncHandle ha = probe("first", 64, 64 * 1024, 300000);  // runs 300 ms
  aclrtFuncHandle hb = probe("second", 128, 32 * 1024);
  uint64_t a = helper_launch("first", ha, s, 16, 1, 1, 16, 4096, la);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the first kernel is running now
  LaunchResources rb = acquire("second", s, 8, 1, 1, 8, 4096, lb);
  int32_t grid[3] = {8, 1, 1};
  uint64_t b = launch(hb, s, rb.locks(), rb.workspace(), 8, grid);
  acl_sim::ProbeRecord tmp;
  const bool first_done_when_second_issued = acl_sim::probe_record(a, &tmp);
  rb = LaunchResources();
  sync(s);
  CHECK(!first_done_when_second_issued);
  auto ra = record(a), rbr = record(b);
  CHECK(ra.locks_unchanged);
  CHECK(ra.workspace_written);  // intact at its end
  CHECK(ra.lock_slots_at_start == std::vector<int64_t>(8, 7));
  CHECK(rbr.lock_slots_at_start == std::vector<int64_t>(16, 0));
  CHECK_EQ(ra.lock_ptr, rbr.lock_ptr);  // same stream block: only stream order keeps them apart
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(stream_block_growth_between_launches) {
  aclrtStream s = stream(2);
  LockLayout l;
  l.legacy_slots = 4;
  l.init_value = 11;
  aclrtFuncHandle small = probe("small", 32, 1024, 30000);
  aclrtFuncHandle big = probe("big", 32, 3 << 20);
  uint64_t a = helper_launch("small", small, s, 1, 1, 1, 1, 1024, l);
  auto c0 = acl_sim::counters();
  uint64_t b = helper_launch("big", big, s, 3, 1, 1, 3, 1 << 20, l);  // larger than the 2 MiB block
  auto c1 = acl_sim::counters();
  CHECK_EQ(c1.allocator_growths - c0.allocator_growths, 1u);
  uint64_t c = helper_launch("small", small, s, 1, 1, 1, 1, 1024, l);
  auto c2 = acl_sim::counters();
  CHECK_EQ(c2.allocator_growths - c1.allocator_growths, 0u);
  sync(s);
  auto ra = record(a), rb = record(b), rc = record(c);
  CHECK(ra.locks_unchanged && ra.workspace_written);
  CHECK(rb.locks_unchanged && rb.workspace_written);
  CHECK(rc.locks_unchanged && rc.workspace_written);
  CHECK(ra.lock_ptr != rb.lock_ptr);  // new block
  CHECK_EQ(rb.lock_ptr, rc.lock_ptr);
  CHECK(rb.lock_slots_at_start == std::vector<int64_t>(4, 11));
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(concurrent_streams_do_not_overlap) {
  LockLayout l;
  l.ordered = 1;
  l.unordered = 1;
  l.init_value = 3;
  aclrtFuncHandle h = probe("par", 64 + (1 + 2 * 4) * 64, 4 * 256, 20000);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(helper_launch("par", h, stream(i), 4, 1, 1, 4, 256, l));
  sync_all();
  for (uint64_t id : ids) {
    auto r = record(id);
    CHECK_EQ(r.overlaps_with_running, 0);
    CHECK(r.locks_unchanged && r.workspace_written);
  }
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(second_acquire_on_same_stream_same_thread_fails) {
  LockLayout l;
  l.legacy_slots = 1;
  LaunchResources r = acquire("outer", stream(0), 1, 1, 1, 1, 64, l);
  CHECK_FAILS(acquire("inner", stream(0), 1, 1, 1, 1, 64, l), ACL_ERROR_INVALID_PARAM, "'inner'",
              "still holds launch resources for stream");
  // another stream is fine while the first is held
  LaunchResources r2 = acquire("other", stream(1), 1, 1, 1, 1, 64, l);
  CHECK(r2.locks() != nullptr);
}

TEST_CASE(stream_lock_serialises_threads_on_one_stream) {
  // Thread B must wait for A's LaunchResources to be released before it gets the same memory.
  LockLayout l;
  l.legacy_slots = 2;
  l.init_value = 1;
  aclrtStream s = stream(0);
  LaunchResources a = acquire("A", s, 1, 1, 1, 1, 64, l);
  std::atomic<bool> b_done{false};
  std::thread tb([&] {
    LaunchResources b = acquire("B", s, 1, 1, 1, 1, 64, l);
    b_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool b_done_while_a_held = b_done.load();
  a = LaunchResources();
  tb.join();
  CHECK(!b_done_while_a_held);
  CHECK(b_done.load());
}

TEST_CASE(resources_are_move_only_owners) {
  LockLayout l;
  l.legacy_slots = 2;
  auto c0 = acl_sim::counters();
  LaunchResources a = acquire("m", stream(0), 1, 1, 1, 1, 64, l);
  CHECK_EQ(acl_sim::counters().live_workspace_dataptrs, c0.live_workspace_dataptrs + 1);
  LaunchResources b(std::move(a));
  CHECK(a.locks() == nullptr && a.total_bytes() == 0);
  CHECK(b.locks() != nullptr);
  CHECK_EQ(acl_sim::counters().live_workspace_dataptrs, c0.live_workspace_dataptrs + 1);
  b = LaunchResources();
  CHECK_EQ(acl_sim::counters().live_workspace_dataptrs, c0.live_workspace_dataptrs);
}

TEST_MAIN()
