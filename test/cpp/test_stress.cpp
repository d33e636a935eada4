// Many threads, streams and devices; steady-state per-launch costs of the helper.
#include <atomic>
#include <climits>
#include <mutex>
#include <thread>

#include "test_support.h"

ACL_SIM_DEFINE_COUNTING_OPERATOR_NEW()

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

// Eight threads on four streams, through torch_npu's queue (one thread per
// device): 1600 launches of twelve layouts, every kernel sees its own content.
TEST_CASE(threads_8_streams_4_launches_200) {
  const auto vs = variants();
  std::vector<aclrtFuncHandle> handles;
  for (size_t i = 0; i < vs.size(); ++i) {
    auto sz = sizes("v", vs[i].gx, 1, 1, vs[i].block_num, vs[i].ws_per_block, vs[i].locks);
    handles.push_back(probe("stress" + std::to_string(i), sz.lock_bytes, sz.workspace_bytes, 50 * (i % 3)));
  }
  for (int s = 0; s < 4; ++s) stream(s);
  acl_sim::reset_counters();
  constexpr int kThreads = 8, kLaunches = 200;
  std::vector<std::vector<Issued>> issued(kThreads);
  std::vector<std::vector<Launch>> launches(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> th;
  for (int t_ = 0; t_ < kThreads; ++t_) {
    th.emplace_back([&, t_] {
      try {
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
  acl_sim::drain_task_queues();
  const auto before_settle = acl_sim::counters();
  settle_held();                       // the blocks of the last launches, finished: what the next launch does
  const auto c = acl_sim::counters();
  for (auto &f : failures) CHECK_MSG(f.empty(), f);
  size_t n = 0;
  uint64_t with_resources = 0;
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
  CHECK_EQ(c.launches, uint64_t(kThreads * kLaunches));
  // one allocator call per launch that needs memory, all on the launching threads, none waiting
  CHECK_EQ(c.caching_requests, with_resources);
  CHECK_EQ(c.caching_frees, with_resources);
  CHECK_EQ(c.caching_allocs_on_queue_threads + c.caching_frees_on_queue_threads, 0u);
  CHECK_EQ(c.live_caching_allocations, 0u);  // every block given back once its kernel had finished
  CHECK_EQ(c.allocator_requests, 0u);
  CHECK_EQ(before_settle.sync_copies + before_settle.device_synchronizations + before_settle.host_blocking, 0u);
}

// Two devices, each with a queue thread, then four threads with the queue
// off: every launch's memory is its own device's and its content right.
TEST_CASE(devices_and_threads_queue_on_and_off) {
  aclrtStream s[2][2] = {};
  for (int d = 0; d < 2; ++d) {
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    for (int j = 0; j < 2; ++j) CHECK_EQ(aclrtCreateStream(&s[d][j]), ACL_SUCCESS);
  }
  aclrtFuncHandle h = probe("dev", 8 * 4, 4 * 1024, 20);
  for (int queue_on = 1; queue_on >= 0; --queue_on) {
    acl_sim::set_task_queue_enabled(queue_on == 1);
    std::vector<std::vector<Launch>> ls(4);
    std::vector<std::string> failures(4);
    std::vector<std::thread> th;
    for (int t_ = 0; t_ < 4; ++t_) {
      th.emplace_back([&, t_] {
        try {
          const int d = t_ % 2;
          CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
          for (int i = 0; i < 50; ++i)
            ls[size_t(t_)].push_back(generated_launch("dev", h, s[d][t_ / 2], 4, 1, 1, 4, 1024, legacy(4, 10 * d + t_)));
        } catch (const std::exception &e) {
          failures[size_t(t_)] = e.what();
        }
      });
    }
    for (auto &x : th) x.join();
    acl_sim::drain_task_queues();
    for (int d = 0; d < 2; ++d) {
      CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
      sync_all();
    }
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
  }
  acl_sim::set_task_queue_enabled(true);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}

// Steady state, per launch: one allocator call, no device synchronisation,
// no host-blocking call, no page-locked allocation, and no heap allocation
// by the helper on the calling thread (the std::function torch_npu's
// launchKernel builds is torch_npu's).
TEST_CASE(steady_state_one_allocator_call_no_sync_no_blocking_no_pinned) {
  aclrtStream s = stream(0);
  const LockLayout zero = legacy(16, 0), mixed = packed(2, 1, 1, 7), seven = legacy(16, 7);
  aclrtFuncHandle hz = probe("z", 128, 4096), hm = probe("m", 128 + (1 + 2 * 8) * 64, 4096), h7 = probe("s", 128, 4096);
  for (int i = 0; i < 2; ++i) {  // warm up: the stream's block, statics
    (void)helper_launch("z", hz, s, 8, 1, 1, 8, 512, zero);
    (void)helper_launch("m", hm, s, 8, 1, 1, 8, 512, mixed);
    (void)helper_launch("s", h7, s, 8, 1, 1, 8, 512, seven);
  }
  settle_held();  // the warm-up's
  acl_sim::reset_counters();
  constexpr int N = 99;
  uint64_t heap = 0;
  for (int i = 0; i < N; ++i) {
    const int k = i % 3;
    const char *name = k == 0 ? "z" : k == 1 ? "m" : "s";
    const LockLayout &l = k == 0 ? zero : k == 1 ? mixed : seven;
    acl_sim::heap_count_begin();
    LaunchMemory m(name, s, 8, 1, 1, 8, 512, l);
    const LaunchRegions regions = m.regions();
    heap += acl_sim::heap_count_end();
    (void)regions;
    {  // the lambda's part, as torch_npu's queue thread would run it
      const LaunchDone done{regions.held, s};
      CHECK_EQ(regions.write_locks(name, s), ACL_SUCCESS);
      const int32_t grid[3] = {8, 1, 1};
      launch(k == 0 ? hz : k == 1 ? hm : h7, s, regions.locks, regions.workspace, 8, grid);
    }
    acl_sim::heap_count_begin();
    m.release_when_finished();  // held: the next launch gives it back once the kernel has finished
    heap += acl_sim::heap_count_end();
    sync(s);  // the test's: the kernel finishes before the next launch
  }
  auto c = acl_sim::counters();
  CHECK_EQ(c.caching_requests, uint64_t(N));
  CHECK_EQ(c.caching_frees, uint64_t(N - 1));  // the last launch's block waits for the next launch
  CHECK_EQ(c.allocator_requests, 0u);
  CHECK_EQ(c.device_synchronizations, 0u);
  CHECK_EQ(c.host_blocking, uint64_t(N));  // the test's own syncs, none of the launches'
  CHECK_EQ(c.sync_copies + c.async_copies + c.pageable_async_copies, 0u);
  CHECK_EQ(c.pinned_allocs, 0u);
  CHECK_EQ(c.events_created, 0u);  // each record's event made once, in the warm-up
  CHECK_EQ(c.events_recorded, uint64_t(N));
  CHECK_EQ(c.event_queries, uint64_t(N - 1));  // each launch asks about the one block before it
  CHECK_EQ(c.peak_live_caching_allocations, 1u);
  CHECK_EQ(c.memsets, uint64_t(N / 3) * (1 + 2 + (1 + 16)));  // zero: 1; mixed: 1 + P; seven: 1 + one run per slot
  CHECK_EQ(heap, 0u);
  sync(s);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(heap_counter_can_fail) {
  // The counting hook sees allocations made by test code (so a zero above means something).
  acl_sim::heap_count_begin();
  auto *v = new std::vector<int>(100);
  uint64_t n = acl_sim::heap_count_end();
  delete v;
  CHECK(n >= 2);
}

TEST_MAIN()
