// Stream ordering of launch memory: the block goes back to the caching
// allocator right after the queue call, and only later work on the same
// stream (queued after the kernel) gets it again. One live launch block per
// thread at a time, freed on the calling thread, never on the queue thread.
#include <atomic>
#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;

TEST_CASE(back_to_back_launches_on_one_stream_get_another_block_while_the_first_runs) {
  aclrtStream s = stream(0);
  const LockLayout la = legacy(8, 7), lb = packed(2, 0);
  aclrtFuncHandle ha = probe("first", 64, 16 * 4096, 300000);  // runs 300 ms
  aclrtFuncHandle hb = probe("second", 128, 8 * 4096);
  Launch a = generated_launch("first", ha, s, 16, 1, 1, 16, 4096, la);
  acl_sim::drain_task_queues();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the first kernel is running now
  Launch b = generated_launch("second", hb, s, 8, 1, 1, 8, 4096, lb);
  acl_sim::drain_task_queues();
  acl_sim::ProbeRecord tmp;
  const bool first_done_when_second_issued = acl_sim::probe_record(a.id->load(), &tmp);
  sync(s);
  CHECK(!first_done_when_second_issued);
  auto ra = record(a.id->load()), rb = record(b.id->load());
  CHECK(ra.lock_ptr != rb.lock_ptr);  // the first block is held until its kernel has finished
  CHECK(ra.locks_unchanged);
  CHECK(ra.workspace_written);         // intact at its end
  CHECK(ra.lock_slots_at_start == std::vector<int64_t>(8, 7));
  CHECK(rb.lock_slots_at_start == std::vector<int64_t>(16, 0));
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(block_is_reused_only_by_the_same_stream) {
  aclrtStream s1 = stream(1), s2 = stream(2);
  const LockLayout l = legacy(4, 11);
  aclrtFuncHandle slow = probe("slow", 32, 4 * 1024, 200000), fast = probe("fast", 32, 4 * 1024);
  Launch a = generated_launch("slow", slow, s1, 4, 1, 1, 4, 1024, l);
  acl_sim::drain_task_queues();
  sync(s1);  // its kernel finished: the next launch gives the block back, cached for s1
  Launch b = generated_launch("fast", fast, s2, 4, 1, 1, 4, 1024, l);  // same size, other stream
  acl_sim::drain_task_queues();
  const acl_sim::Extent ea = extent_of(a.regions.locks), eb = extent_of(b.regions.locks);
  CHECK(disjoint(ea.base, ea.size, eb.base, eb.size));  // s2 got a block of its own
  Launch c = generated_launch("fast", fast, s1, 4, 1, 1, 4, 1024, l);  // s1 again: its own block back
  acl_sim::drain_task_queues();
  CHECK_EQ(c.regions.locks, a.regions.locks);
  sync_all();
  for (const Launch *x : {&a, &b, &c}) {
    auto r = record(x->id->load());
    CHECK(r.locks_unchanged && r.workspace_written);
    CHECK_EQ(r.overlaps_with_running, 0);
    CHECK(r.lock_slots_at_start == std::vector<int64_t>(4, 11));
  }
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(concurrent_streams_do_not_overlap) {
  const LockLayout l = packed(1, 1, 1, 3);
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

// The task queue paused: N launches from one thread are all queued, none has
// run. No block goes back while its lambda waits (torch_npu may free a cached
// block to the driver in that window, issue 31): N live blocks, one per launch
// in flight, disjoint. Once the lambdas ran, the next launch gives them all
// back, on this thread. (A lambda holding the owner would free them on the
// queue thread; releasing once queued would free each while it waits.)
TEST_CASE(paused_queue_n_launches_held_until_their_lambdas_ran) {
  aclrtStream s = stream(0);
  const LockLayout l = legacy(16, 0);
  aclrtFuncHandle h = probe("paused", 128, 8 * 512, 50);
  (void)helper_launch("paused", h, s, 8, 1, 1, 8, 512, l);  // warm: the stream's block exists
  settle_held();
  constexpr int N = 8;
  acl_sim::set_task_queues_paused(true);
  acl_sim::reset_counters();
  std::vector<Launch> ls;
  for (int i = 0; i < N; ++i) ls.push_back(generated_launch("paused", h, s, 8, 1, 1, 8, 512, l));
  const auto c = acl_sim::counters();
  bool none_ran = true;
  for (const Launch &L : ls) none_ran = none_ran && L.rc->load() == -1;
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  sync(s);
  CHECK(none_ran);  // precondition: the queue really held them
  CHECK_EQ(c.op_tasks, uint64_t(N));
  CHECK_EQ(c.peak_live_caching_allocations, uint64_t(N));
  CHECK_EQ(c.caching_requests, uint64_t(N));
  CHECK_EQ(c.caching_frees, 0u);  // none while its lambda waited
  CHECK_EQ(c.caching_allocs_on_queue_threads, 0u);
  CHECK_EQ(c.live_caching_allocations, uint64_t(N));
  CHECK_EQ(HeldBlocks::all().release_done(), size_t(N));  // what the next launch does first
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 0u);
  for (size_t i = 0; i < ls.size(); ++i) {
    const Launch &L = ls[i];
    for (size_t j = 0; j < i; ++j) CHECK(L.regions.locks != ls[j].regions.locks);
    CHECK_EQ(L.rc->load(), ACL_SUCCESS);
    auto r = record(L.id->load());
    CHECK(r.locks_unchanged && r.workspace_written);
    CHECK(r.lock_slots_at_start == std::vector<int64_t>(16, 0));
  }
  CHECK_EQ(acl_sim::counters().caching_frees_on_queue_threads, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(a_block_is_held_until_its_kernel_has_finished) {
  const LockLayout l = legacy(2, 1);
  aclrtStream s = stream(0);
  aclrtFuncHandle slow = probe("slow", 16, 64, 20000);  // 20 ms on the device
  settle_held();
  acl_sim::reset_counters();
  {
    LaunchMemory m("m", s, 1, 1, 1, 1, 64, l);
    const LaunchRegions regions = m.regions();
    CHECK_EQ(acl_sim::counters().live_caching_allocations, 1u);
    m.release_when_finished();  // its lambda has not run: held
    m.release_when_finished();
    CHECK_EQ(acl_sim::counters().live_caching_allocations, 1u);
    CHECK_EQ(HeldBlocks::all().release_done(), 0u);
    {  // the lambda: the kernel, then (as it returns) the block's event after it
      const LaunchDone done{regions.held, s};
      const int32_t grid[3] = {1, 1, 1};
      launch(slow, s, regions.locks, regions.workspace, 1, grid);
    }
    CHECK_EQ(HeldBlocks::all().release_done(), 0u);  // the lambda ran; its kernel has not finished
    sync(s);
    CHECK_EQ(acl_sim::counters().live_caching_allocations, 1u);  // only a calling thread gives it back
    CHECK(m.regions().locks != nullptr);  // the values stay
  }
  {
    LaunchMemory m("m", s, 1, 1, 1, 1, 64, l);  // the next launch gives the finished one back first
    CHECK_EQ(acl_sim::counters().caching_frees, 1u);
    CHECK_EQ(acl_sim::counters().live_caching_allocations, 1u);
    const LaunchDone done{m.regions().held, s};  // never handed over explicitly: the destructor hands it over
  }
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 1u);  // held until a later launch sees its event
  CHECK_EQ(settle_held(), 1u);
  auto c = acl_sim::counters();
  CHECK_EQ(c.live_caching_allocations, 0u);
  CHECK_EQ(c.caching_frees, 2u);
  CHECK_EQ(c.caching_frees_on_queue_threads, 0u);
}

// Device memory for two blocks, both held by launches whose lambdas still
// wait in the queue. A third launch's request fails; the allocator's
// out-of-memory retry synchronises the device (their lambdas run, their
// kernels finish) but cannot free held blocks, and throws. The helper then
// gives the finished blocks back and asks once more: the launch gets memory.
TEST_CASE(out_of_memory_gives_done_blocks_back_and_asks_again) {
  aclrtStream s = stream(0);
  const LockLayout l = legacy(4, 0);
  const uint64_t ws = uint64_t(1) << 20;  // 4 MiB of workspace per launch
  aclrtFuncHandle h = probe("oom", 32, 4 * ws, 50);
  settle_held();
  acl_sim::empty_cache();
  acl_sim::clear_faults();  // call counts start here
  acl_sim::reset_counters();
  acl_sim::set_device_memory_capacity(0, acl_sim::device_memory_in_use(0) + 2 * (4 * ws + 4096));
  acl_sim::set_task_queues_paused(true);
  std::vector<Launch> ls;
  ls.push_back(generated_launch("oom", h, s, 4, 1, 1, 4, ws, l));
  ls.push_back(generated_launch("oom", h, s, 4, 1, 1, 4, ws, l));
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 2u);
  acl_sim::on_call("raw_alloc_with_stream", 1, [] { acl_sim::set_task_queues_paused(false); });  // the drain runs them
  bool threw = false;
  try {
    ls.push_back(generated_launch("oom", h, s, 4, 1, 1, 4, ws, l));
  } catch (const std::exception &e) {
    threw = true;
    std::fprintf(stderr, "%s\n", e.what());
  }
  acl_sim::clear_faults();
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  sync(s);
  CHECK(!threw);
  const auto c = acl_sim::counters();
  CHECK_EQ(c.caching_oom_retries, 1u);        // the allocator's own retry ran, and was not enough
  CHECK_EQ(c.caching_requests, 4u);           // three launches, the third asked twice
  CHECK_EQ(c.caching_frees_on_queue_threads, 0u);
  for (const Launch &L : ls) {
    CHECK_EQ(L.rc->load(), ACL_SUCCESS);
    auto r = record(L.id->load());
    CHECK(r.locks_unchanged && r.workspace_written && r.access_errors == 0);
  }
  acl_sim::set_device_memory_capacity(0, 0);
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
