// Many threads and streams; steady-state per-launch costs of the helper.
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
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> th;
  for (int t_ = 0; t_ < kThreads; ++t_) {
    th.emplace_back([&, t_] {
      try {
        for (int i = 0; i < kLaunches; ++i) {
          int v = (t_ * 7 + i) % int(vs.size());
          aclrtStream s = stream((t_ + i) % 4);
          const Variant &x = vs[size_t(v)];
          uint64_t id = helper_launch("stress", handles[size_t(v)], s, x.gx, 1, 1, x.block_num, x.ws_per_block, x.locks);
          issued[size_t(t_)].push_back(Issued{id, v});
        }
      } catch (const std::exception &e) {
        failures[size_t(t_)] = e.what();
      }
    });
  }
  for (auto &x : th) x.join();
  const auto c = acl_sim::counters();  // before the test's own sync
  sync_all();
  for (auto &f : failures) CHECK_MSG(f.empty(), f);
  size_t n = 0;
  for (int t_ = 0; t_ < kThreads; ++t_) {
    for (const Issued &is : issued[size_t(t_)]) {
      auto r = record(is.id);
      const Variant &x = vs[size_t(is.variant)];
      CHECK_MSG(r.lock_slots_at_start == expected_locks(x.locks, x.block_num), "launch " << is.id);
      CHECK(r.locks_unchanged);
      CHECK(r.workspace_written);
      CHECK_EQ(r.overlaps_with_running, 0);
      CHECK(!r.regions_overlap);
      ++n;
    }
  }
  CHECK_EQ(n, size_t(kThreads * kLaunches));
  CHECK_NO_SIM_ERRORS();
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kUninitialisedRead), 0u);
  CHECK_EQ(c.launches, uint64_t(kThreads * kLaunches));
  // every variant except the no-resources one requests memory exactly once
  uint64_t with_resources = 0;
  for (int t_ = 0; t_ < kThreads; ++t_)
    for (const Issued &is : issued[size_t(t_)]) {
      const Variant &x = vs[size_t(is.variant)];
      auto sz = sizes("v", x.gx, 1, 1, x.block_num, x.ws_per_block, x.locks);
      with_resources += sz.total_bytes != 0;
    }
  CHECK_EQ(c.allocator_requests, with_resources);
  CHECK_EQ(c.sync_copies, 0u);
  CHECK_EQ(c.host_blocking, c.allocator_growths);  // growth only (first use of each stream block)
  CHECK(c.allocator_growths <= 4);
}

// The helper's own bookkeeping allocates nothing once warm; the one at::Tensor
// that torch_npu's allocate_workspace builds per launch is the allocator's.
TEST_CASE(steady_state_one_request_no_sync_no_blocking_no_own_heap) {
  aclrtStream s = stream(0);
  LockLayout zero;
  zero.legacy_slots = 16;
  LockLayout seven;
  seven.ordered = 2;
  seven.unordered = 1;
  seven.init_value = 7;
  aclrtFuncHandle hz = probe("z", 128, 4096);
  aclrtFuncHandle h7 = probe("s", 128 + (1 + 2 * 8) * 64, 4096);
  // warm up: stream block, pinned cache entry, statics
  helper_launch("z", hz, s, 8, 1, 1, 8, 512, zero);
  helper_launch("s", h7, s, 8, 1, 1, 8, 512, seven);
  sync(s);
  acl_sim::heap_count_begin();
  { at::Tensor bare = at_npu::native::allocate_workspace(4096, s); }
  const uint64_t per_allocator_call = acl_sim::heap_count_end();
  acl_sim::reset_counters();
  constexpr int N = 100;
  uint64_t heap = 0;
  int32_t grid[3] = {8, 1, 1};
  for (int i = 0; i < N; ++i) {
    const bool z = i % 2 == 0;
    acl_sim::heap_count_begin();
    LaunchResources r = acquire(z ? "z" : "s", s, 8, 1, 1, 8, 512, z ? zero : seven);
    heap += acl_sim::heap_count_end();
    launch(z ? hz : h7, s, r.locks(), r.workspace(), 8, grid);
    acl_sim::heap_count_begin();
    r = LaunchResources();
    heap += acl_sim::heap_count_end();
  }
  auto c = acl_sim::counters();
  CHECK_EQ(c.allocator_requests, uint64_t(N));
  CHECK_EQ(c.sync_copies, 0u);
  CHECK_EQ(c.host_blocking, 0u);
  CHECK_EQ(c.memsets, uint64_t(N / 2));
  CHECK_EQ(c.async_copies, uint64_t(N / 2));
  CHECK_EQ(c.pageable_async_copies, 0u);
  CHECK_EQ(c.pinned_allocs, 0u);
  CHECK_EQ(c.events_created + c.events_recorded + c.event_queries, 0u);
  CHECK_EQ(heap, N * per_allocator_call);
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
