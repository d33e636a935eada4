// Many threads, streams and devices on torch_npu's own runtime; steady-state per-launch costs of the helper.
#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <thread>

#include "real_support.h"

using namespace t;

namespace {
struct Variant {
  LockLayout locks;
  uint64_t ws_per_block;
  uint32_t gx, block_num;
};
std::vector<Variant> variants() {
  std::vector<Variant> v;
  const int64_t inits[] = {0, -1, 7, INT64_MIN, INT64_MAX, 3};
  for (int i = 0; i < 12; ++i) {
    Variant x;
    x.gx = 1 + i % 5;
    x.block_num = x.gx;
    x.ws_per_block = (i % 3) * 512 + (i % 2) * 40;
    if (i % 4 == 0) {
      x.locks.legacy_slots = 1 + i;
    } else if (i % 4 == 1) {
      x.locks.ordered = 1 + i % 3;
    } else if (i % 4 == 2) {
      x.locks.ordered = i % 2;
      x.locks.unordered = 1 + i % 2;
      x.locks.participant_factor = 1 + i % 2;
    }  // else: no locks
    x.locks.init_value = inits[i % 6];
    v.push_back(x);
  }
  return v;
}
struct Issued {
  uint64_t id;
  int variant;
};
}  // namespace

// Eight threads on four streams, through torch_npu's queue (its thread for device 0; with TASK_QUEUE_ENABLE=0
// each thread's own): 1600 launches of twelve layouts, every kernel sees its own content.
TEST_CASE_QUEUES(threads_8_streams_4_launches_200, "10") {
  const auto vs = variants();
  std::vector<aclrtFuncHandle> handles;
  for (size_t i = 0; i < vs.size(); ++i) {
    auto sz = sizes("v", vs[i].gx, 1, 1, vs[i].block_num, vs[i].ws_per_block, vs[i].locks);
    handles.push_back(probe("stress" + std::to_string(i), sz.lock_bytes, sz.workspace_bytes, 50 * (i % 3)));
  }
  for (int s = 0; s < 4; ++s) stream(s);
  const Counters c0 = counters();
  constexpr int kThreads = 8, kLaunches = 200;
  std::vector<std::vector<Issued>> issued(kThreads);
  std::vector<std::vector<Launch>> launches(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<long> launching(kThreads);
  std::vector<std::thread> th;
  for (int t_ = 0; t_ < kThreads; ++t_) {
    th.emplace_back([&, t_] {
      try {
        set_device(0);
        launching[size_t(t_)] = tid();
        for (int i = 0; i < kLaunches; ++i) {
          int v = (t_ * 7 + i) % int(vs.size());
          aclrtStream s = stream((t_ + i) % 4);
          const Variant &x = vs[size_t(v)];
          launches[size_t(t_)].push_back(
              generated_launch("stress", handles[size_t(v)], s, x.gx, 1, 1, x.block_num, x.ws_per_block, x.locks));
          issued[size_t(t_)].push_back(Issued{0, v});
        }
      } catch (const std::exception &e) {
        failures[size_t(t_)] = e.what();
      }
    });
  }
  for (auto &x : th) x.join();
  long queue_tid = 0;
  drain(&queue_tid);
  const Counters before_settle = counters();
  settle_held();  // the threads ended: their blocks were retired, and go back once their kernels finished
  const Counters c = counters();
  for (auto &f : failures) CHECK_MSG(f.empty(), f);
  size_t n = 0;
  int64_t with_resources = 0;
  for (int t_ = 0; t_ < kThreads; ++t_) {
    for (size_t i = 0; i < issued[size_t(t_)].size(); ++i) {
      const Launch &L = launches[size_t(t_)][i];
      CHECK_EQ(L.rc->load(), ACL_SUCCESS);
      auto r = record(L.id->load());
      const Variant &x = vs[size_t(issued[size_t(t_)][i].variant)];
      CHECK_MSG(r.lock_slots_at_start == expected_locks(x.locks, x.block_num), "launch " << L.id->load());
      CHECK(r.locks_unchanged);
      CHECK(r.workspace_written);
      CHECK_EQ(r.overlaps_with_running, 0);
      CHECK(!r.regions_overlap);
      with_resources += L.regions.sizes.total_bytes != 0;
      ++n;
    }
  }
  CHECK_EQ(n, size_t(kThreads * kLaunches));
  CHECK_NO_SIM_ERRORS();
  CHECK_EQ(c.launches - c0.launches, uint64_t(kThreads * kLaunches));
  // a block per (thread, stream), replaced only by a larger one (at most once per layout), all requests on the
  // launching threads, none waiting
  const Blocks b = blocks();
  CHECK(b.requests >= kThreads * 4 && b.requests <= kThreads * 4 * int64_t(vs.size()) && b.requests < with_resources);
  CHECK_EQ(b.frees, b.requests);
  CHECK_EQ(b.live, 0);       // every block given back once its kernels had finished
  if (queue_tid != tid()) {  // the queue on: its thread never gave a block back (never asked about an event)
    const std::vector<long> queried = callers("aclrtQueryEventStatus");
    CHECK(std::find(queried.begin(), queried.end(), queue_tid) == queried.end());
  }
  CHECK_EQ(before_settle.sync_copies + before_settle.device_synchronizations + before_settle.host_blocking,
           c0.sync_copies + c0.device_synchronizations + c0.host_blocking);
}

// Two devices, four threads (two per device), with each device's queue thread, and (the other child) with the
// queue off: every launch's memory is its own device's and its content right; each thread keeps one block.
TEST_CASE_QUEUES(devices_and_threads_queue_on_and_off, "10") {
  aclrtStream s[2][2] = {};
  for (int d = 0; d < 2; ++d) {
    set_device(d);
    for (int j = 0; j < 2; ++j) s[d][j] = stream(j, d);
  }
  int64_t live_before[2] = {};
  for (int d = 0; d < 2; ++d) c10_npu::NPUCachingAllocator::resetPeakStats(d), live_before[d] = blocks(d).live;
  set_device(0);
  aclrtFuncHandle h = probe("dev", 8 * 4, 4 * 1024, 20);
  std::vector<std::vector<Launch>> ls(4);
  std::vector<std::string> failures(4);
  std::vector<std::thread> th;
  for (int t_ = 0; t_ < 4; ++t_) {
    th.emplace_back([&, t_] {
      try {
        const int d = t_ % 2;
        set_device(d);
        for (int i = 0; i < 50; ++i)
          ls[size_t(t_)].push_back(generated_launch("dev", h, s[d][t_ / 2], 4, 1, 1, 4, 1024, legacy(4, 10 * d + t_)));
      } catch (const std::exception &e) {
        failures[size_t(t_)] = e.what();
      }
    });
  }
  for (auto &x : th) x.join();
  for (int d = 0; d < 2; ++d) {
    set_device(d);
    sync_all();
  }
  set_device(0);
  for (auto &f : failures) CHECK_MSG(f.empty(), f);
  for (int t_ = 0; t_ < 4; ++t_) {
    for (const Launch &L : ls[size_t(t_)]) {
      CHECK_EQ(L.rc->load(), ACL_SUCCESS);
      auto r = record(L.id->load());
      CHECK_EQ(r.device, t_ % 2);
      CHECK_EQ(r.lock_extent.device, t_ % 2);
      CHECK(r.lock_slots_at_start == std::vector<int64_t>(4, 10 * (t_ % 2) + t_));
    }
  }
  // One block per (thread, stream) at a time. Not one request each: a thread's first request that misses the cache
  // runs the allocator's callback, which gives back another thread's idle block whose kernels finished (load decides
  // whether one has), and that thread then takes a new one.
  for (int d = 0; d < 2; ++d) CHECK_MSG(blocks(d).peak - live_before[d] <= 2, "device " + std::to_string(d));
  CHECK(blocks(0).requests + blocks(1).requests >= 4);
  CHECK_NO_SIM_ERRORS();
}

// Steady state, per launch: no request of torch_npu's caching allocator (the thread's block is reused), no
// event, no device synchronisation, no host-blocking call, no page-locked allocation: the fills and the launch.
// (Heap allocations on the calling thread, torch_npu's own included: the real-runtime benchmark.)
TEST_CASE(steady_state_no_allocator_call_no_event_no_sync_no_blocking_no_pinned) {
  aclrtStream s = stream(0);
  const LockLayout zero = legacy(16, 0), mixed = packed(2, 1, 1, 7), seven = legacy(16, 7);
  aclrtFuncHandle hz = probe("z", 128, 4096), hm = probe("m", 128 + (1 + 2 * 8) * 64, 4096), h7 = probe("s", 128, 4096);
  for (int i = 0; i < 2; ++i) {  // warm up: the thread's block, statics
    (void)helper_launch("z", hz, s, 8, 1, 1, 8, 512, zero);
    (void)helper_launch("m", hm, s, 8, 1, 1, 8, 512, mixed);
    (void)helper_launch("s", h7, s, 8, 1, 1, 8, 512, seven);
  }
  sync(s);
  (void)KeptBlocks::all().give_back(false);  // a block the warm-up's growth retired goes back now
  drain();                                   // (its event recorded, by torch_npu's queue, before what is counted)
  sync(s);
  c10_npu::NPUCachingAllocator::resetAccumulatedStats(0);
  c10_npu::NPUCachingAllocator::resetPeakStats(0);
  const Counters c0 = counters();
  const OnStream current(s);
  constexpr int N = 99;
  for (int i = 0; i < N; ++i) {
    const int k = i % 3;
    const char *name = k == 0 ? "z" : k == 1 ? "m" : "s";
    const LockLayout &l = k == 0 ? zero : k == 1 ? mixed : seven;
    LaunchMemory m(name, s, 8, 1, 1, 8, 512, l);
    const LaunchRegions regions = m.regions();
    {  // the lambda's part, as torch_npu's queue thread would run it
      CHECK_EQ(regions.write_locks(name, s), ACL_SUCCESS);
      const int32_t grid[3] = {8, 1, 1};
      launch(k == 0 ? hz : k == 1 ? hm : h7, s, regions.locks, regions.workspace, 8, grid);
    }
    m.handed();
  }
  sync(s);
  Counters c = counters();
  const Blocks b = blocks();
  CHECK_EQ(b.requests, 0);
  CHECK_EQ(b.frees, 0);
  CHECK_EQ(b.live, 1);
  CHECK_EQ(c.device_synchronizations - c0.device_synchronizations, 0u);
  CHECK_EQ(c.host_blocking - c0.host_blocking, 1u);  // the test's own sync, none of the launches'
  CHECK_EQ(c.sync_copies + c.async_copies + c.pageable_async_copies,
           c0.sync_copies + c0.async_copies + c0.pageable_async_copies);
  CHECK_EQ(c.pinned_allocs - c0.pinned_allocs, 0u);
  CHECK_EQ(c.events_created - c0.events_created, 0u);
  CHECK_EQ(c.events_recorded - c0.events_recorded, 0u);
  CHECK_EQ(c.event_queries - c0.event_queries, 0u);
  CHECK_EQ(c.memsets - c0.memsets,
           uint64_t(N / 3) * (1 + 2 + (1 + 16)));  // zero: 1; mixed: 1 + P; seven: 1 + one run per slot
  CHECK_EQ(settle_held(), 1u);
  CHECK_NO_SIM_ERRORS();
}
