// A compiled graph's wrapper function on torch_npu's own runtime: launch_codegen's launches, six in one function
// (wrapper_shape.h, written by tooling/releases/wrapper_shape.py), and three mutants of it. With torch_npu's
// queue held (every lambda queued before any runs) or off, the six launches share the thread's one block: one
// request, nothing given back while a lambda waits or on the queue thread; it goes back once the allocator's
// callback asks. Each mutant must fail the check that is there for it (issues 22, 31 and 39).
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "real_support.h"
#include "wrapper_shape.h"

using namespace t;

namespace wrapper_shape_test {  // named: the test files share one translation unit

using Wrapper = void (*)(aclrtFuncHandle, void *, int32_t, uint32_t, uint32_t, uint32_t, aclrtStream);
struct ShapeVariant {
  const char *name;
  Wrapper fn;
};
const ShapeVariant kVariants[] = {{"generated", wrapper_shape::graph_wrapper_generated},
                                  {"owner-in-lambda", wrapper_shape::graph_wrapper_owner_in_lambda},
                                  {"release-at-end", wrapper_shape::graph_wrapper_release_at_end},
                                  {"release-once-queued", wrapper_shape::graph_wrapper_release_once_queued}};
constexpr uint32_t kGrid = 4;

struct ShapeRun {
  Blocks during;      // when the wrapper returned (its lambdas still queued, with the queue held)
  Blocks drained;     // once torch_npu's queue ran them (nothing else ran on the calling thread meanwhile)
  Blocks given_back;  // once the calling thread gave back its kept block (what the allocator's callback does)
  int clean = 0;      // kernels that found their lock content and wrote their workspace, without errors
  std::string first_problem;
};

aclrtFuncHandle kernel() {
  static aclrtFuncHandle h =
      probe(wrapper_shape::kKernel, wrapper_shape::kLockBytes, wrapper_shape::kWorkspacePerBlock * kGrid, 200);
  return h;
}

void *input() {
  static void *buf = [] {
    void *p = nullptr;
    if (aclrtMalloc(&p, 256, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) throw Failure("aclrtMalloc failed");
    return p;
  }();
  return buf;
}

// The launch id torch_npu's queue thread made last (the calling thread with the queue off): the double keeps
// one per thread. Ids are consecutive: the wrapper's launches are the last n.
uint64_t launched_last() {
  auto id = std::make_shared<std::atomic<uint64_t>>(0);
  at_npu::native::OpCommand::RunOpApiV2("tnip_wrapper_shape_last_id", [id]() -> int {
    id->store(acl_host_last_launch_id());
    return 0;
  });
  drain();
  return id->load();
}

ShapeRun run(const ShapeVariant &v, aclrtStream s, bool hold) {
  settle_held();
  c10_npu::NPUCachingAllocator::resetAccumulatedStats(0);
  c10_npu::NPUCachingAllocator::resetPeakStats(0);
  ShapeRun r;
  {
    QueueGate gate;
    if (hold && !gate.on()) throw Failure("torch_npu's queue could not be held");
    if (!hold) gate.open();
    const OnStream current(s);
    v.fn(kernel(), input(), 7, kGrid, 1, 1, s);
    r.during = blocks();
  }
  drain();
  sync(s);
  r.drained = blocks();
  KeptBlocks::all().give_back(true);
  r.given_back = blocks();
  const uint64_t last = launched_last();
  for (uint64_t id = last + 1 - uint64_t(wrapper_shape::kLaunches); id <= last; ++id) {
    ProbeRecord rec;
    const bool found = probe_record(id, &rec);
    if (found && rec.locks_unchanged && rec.workspace_written &&
        rec.lock_slots_at_start ==
            std::vector<int64_t>(size_t(wrapper_shape::kLockBytes / 8), wrapper_shape::kLockInit))
      ++r.clean;
    else if (r.first_problem.empty())
      r.first_problem = "launch " + std::to_string(id) + (found ? "" : " not found") + " locks_unchanged " +
                        std::to_string(rec.locks_unchanged) + " workspace_written " +
                        std::to_string(rec.workspace_written) + " slots " +
                        std::to_string(rec.lock_slots_at_start.size()) + " first " +
                        (rec.lock_slots_at_start.empty() ? "-" : std::to_string(rec.lock_slots_at_start[0]));
  }
  return r;
}

std::string said(const ShapeVariant &v, const ShapeRun &r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: requests %lld, live %lld (peak %lld), frees %lld / %lld / %lld, clean %d", v.name,
                (long long)r.during.requests, (long long)r.during.live, (long long)r.during.peak,
                (long long)r.during.frees, (long long)r.drained.frees, (long long)r.given_back.frees, r.clean);
  return buf + (r.first_problem.empty() ? std::string() : "; " + r.first_problem);
}

}  // namespace wrapper_shape_test

TEST_CASE(wrapper_with_the_queue_held_shares_one_block_and_gives_back_none_while_queued) {
  using namespace wrapper_shape_test;
  aclrtStream s = stream(0);
  const int n = wrapper_shape::kLaunches;
  (void)run(kVariants[0], s, false);  // warm: the helper's records and statics exist
  for (const ShapeVariant &v : kVariants) {
    const ShapeRun r = run(v, s, true);
    const std::string what = said(v, r);
    const std::string name = v.name;
    if (name == "generated") {
      CHECK_MSG(r.during.requests == 1 && r.during.live == 1 && r.during.peak == 1, what);  // one block, kept
      CHECK_MSG(r.during.frees == 0, what);                               // none while its lambdas waited
      CHECK_MSG(r.drained.frees == 0, what);                              // none on torch_npu's queue thread
      CHECK_MSG(r.given_back.frees == 1 && r.given_back.live == 0, what);  // by the calling thread
      CHECK_MSG(r.clean == n, what);
    } else if (name == "release-once-queued") {  // caught: every block given back while its lambda still waited
      CHECK_MSG(r.during.frees == n, what);
    } else {  // caught: a block still in use at the next launch, so one block per launch
      CHECK_MSG(r.during.peak == n, what);
    }
  }
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE_QUEUES(wrapper_with_the_queue_off_shares_one_block, "0") {
  using namespace wrapper_shape_test;
  aclrtStream s = stream(0);
  const int n = wrapper_shape::kLaunches;
  wrapper_shape::sync_after_each = s;  // each kernel finished before the next launch
  (void)run(kVariants[0], s, false);
  for (const ShapeVariant &v : kVariants) {
    const ShapeRun r = run(v, s, false);
    const std::string what = said(v, r);
    const std::string name = v.name;
    if (name == "generated") {
      CHECK_MSG(r.during.requests == 1 && r.during.peak == 1, what);
      CHECK_MSG(r.given_back.live == 0 && r.clean == n, what);
    } else if (name == "owner-in-lambda" || name == "release-at-end") {  // caught: held to the wrapper's end
      CHECK_MSG(r.during.peak == n, what);
    }
  }
  wrapper_shape::sync_after_each = nullptr;
  CHECK_NO_SIM_ERRORS();
}

// The checks of test_ordering.cpp that stand for the kept rule, run once with the helper and once with the wrong
// rule each is there for (tooling/releases/mutant_helpers.py): the check passes with the helper and catches the rule.
namespace kept_rule_test {

// A kernel on a small block that has not finished (its stream held before it), then a larger launch on the stream:
// how many blocks became free in torch_npu's allocator meanwhile (neither allocated nor waiting for an event on a
// stream that used them: free to be handed out again, or to be freed by another thread's empty_cache).
template <class Memory>
int64_t freed_while_the_old_kernel_runs(aclrtStream s) {
  const LockLayout l = legacy(2, 1);
  static aclrtFuncHandle slow = probe("slow_grow", 16, 64), big = probe("big_grow", 16, 4 * 4096);
  c10_npu::NPUCachingAllocator::emptyCache(true);  // no block of before still waiting for its event
  StreamHold hold(s);
  Launch a = generated_launch<Memory>("slow_grow", slow, s, 1, 1, 1, 1, 64, l);
  drain();
  const int64_t active = blocks().active;
  Launch b = generated_launch<Memory>("big_grow", big, s, 4, 1, 1, 4, 4096, l);
  drain();
  const int64_t freed = active + 1 - blocks().active;  // the larger block came; the old one, if it went free
  hold.release();
  sync(s);
  return freed;
}

// Two threads launching on one stream, both alive until both launched: whether they got the same block.
template <class Memory>
bool threads_share_a_block(aclrtStream s) {
  const LockLayout l = legacy(2, 3);
  static aclrtFuncHandle h = probe("two_threads", 16, 2 * 256);
  Launch mine[2];
  std::atomic<int> launched{0};
  std::thread ts[2];
  for (int t = 0; t < 2; ++t)
    ts[t] = std::thread([&, t] {
      set_device(0);
      mine[t] = generated_launch<Memory>("two_threads", h, s, 2, 1, 1, 2, 256, l);
      ++launched;
      while (launched.load() < 2) std::this_thread::yield();  // its block stays its own meanwhile
    });
  for (std::thread &t : ts) t.join();
  sync_all();
  return mine[0].regions.locks == mine[1].regions.locks;
}

// Another stream's capture registered with torch_npu's caching allocator (beginAllocateToPool, and markCaptureBegin
// where the release has it), so that the helper asks CANN about the launch's own stream, and CANN answers with an
// error (ACL_ERROR_RT_FEATURE_NOT_SUPPORT, as on a chip without ACL graphs): the launch's block, right after the
// launch was queued behind a held stream, still allocated (1) or already back in the cache (0). (2.13.0 asks CANN
// about the current stream itself first, and answers that no capture is underway there: the helper never asks.)
// The edited helper (its own LockLayout, LaunchRegions): the generated launcher's launch, no kernel.
inline void capture_error_mutant_launch(aclrtStream s) {
  namespace m = wrapper_shape::npu_mutant_capture_error_read_as_capturing::unversioned;
  const OnStream current(s);
  m::LockLayout l;
  l.legacy_slots = 2;
  l.init_value = 1;
  m::LaunchMemory memory("status_error", s, 1, 1, 1, 1, 256, l);
  const m::LaunchRegions regions = memory.regions();
  at_npu::native::OpCommand::RunOpApiV2("status_error", [=]() -> int {
    return regions.write_locks("status_error", s);
  });
  memory.handed();
}
inline void helper_launch_status_error(aclrtStream s) {
  static aclrtFuncHandle h = probe("status_error", 16, 256);
  (void)generated_launch("status_error", h, s, 1, 1, 1, 1, 256, legacy(2, 1));
}
int64_t held_after_a_capture_status_error(void (*launch)(aclrtStream), aclrtStream s, aclrtStream capturing) {
  namespace ca = c10_npu::NPUCachingAllocator;
  static unsigned long long next_pool = 434343;  // a pool id once released is not begun again
  const std::pair<unsigned long long, unsigned long long> pool{0, next_pool++};
  ca::beginAllocateToPool(0, pool, [capturing](aclrtStream st) { return st == capturing; });
  mark_capture(ca::get(), true, 0);
  CHECK_EQ(acl_host_inject_fault("aclmdlRICaptureGetInfo", marks_captures(ca::get(), 0) ? 2 : 1, 207000), 0);
  const int64_t before = blocks().live;
  int64_t held = -1;
  {
    StreamHold hold(s);
    launch(s);
    held = blocks().live - before;
    hold.release();
  }
  sync(s);
  mark_capture(ca::get(), false, 0);
  ca::endAllocateToPool(0, pool);
  ca::releasePool(0, pool);
  return held;
}

}  // namespace kept_rule_test

TEST_CASE(a_block_replaced_by_a_larger_one_goes_back_only_after_its_kernel) {
  using namespace kept_rule_test;
  aclrtStream s = stream(5);
  CHECK_EQ(freed_while_the_old_kernel_runs<LaunchMemory>(s), 0);
  settle_held();
  CHECK_EQ(freed_while_the_old_kernel_runs<wrapper_shape::npu_mutant_retire_at_once::LaunchMemory>(s), 1);  // caught
  wrapper_shape::npu_mutant_retire_at_once::release_all();
}

// Point 2 of issue 47: an error from CANN's capture status is no capture.
TEST_CASE(a_capture_status_error_is_no_capture) {
  using namespace kept_rule_test;
  aclrtStream s = stream(7), capturing = stream(8);
  CHECK_EQ(held_after_a_capture_status_error(helper_launch_status_error, s, capturing), 1);  // kept, the thread's
  settle_held();
  acl_host_reset();  // the fault, if 2.13.0 never asked
  CHECK_EQ(held_after_a_capture_status_error(capture_error_mutant_launch, s, capturing),
           marks_captures(c10_npu::NPUCachingAllocator::get(), 0) ? 1 : 0);  // caught where the helper asks
  wrapper_shape::npu_mutant_capture_error_read_as_capturing::unversioned::KeptBlocks::all().give_back(true);
}

TEST_CASE(threads_never_share_a_block) {
  using namespace kept_rule_test;
  aclrtStream s = stream(6);
  CHECK(!threads_share_a_block<LaunchMemory>(s));
  settle_held();
  CHECK(threads_share_a_block<wrapper_shape::npu_mutant_shared_by_threads::LaunchMemory>(s));  // caught
  wrapper_shape::npu_mutant_shared_by_threads::release_all();
}
