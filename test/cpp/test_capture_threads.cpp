// Graph capture, threads and memory pressure against torch_npu's allocators
// as they are (issues 17 and 22): the launcher scenarios, one per process,
// and the pieces behind them (launch memory from the graph's private pool,
// valid for every replay after later eager work and empty_cache; no
// synchronise while capturing).
#include <scenarios.h>

#include <thread>

#include "test_support.h"

using namespace t;

namespace {
void scenario(const char *name) {
  acl_sim_scenarios::Result r;
  CHECK(acl_sim_scenarios::run(name, &r));
  if (!r.ok) ::t::fail(__FILE__, __LINE__, std::string(name) + " not clean: " + acl_sim_scenarios::to_json(r));
  CHECK(!r.steps.empty());
}
}  // namespace

TEST_CASE(scenario_capture_then_grow) { scenario("capture-then-grow"); }
TEST_CASE(scenario_capture_then_empty_cache) { scenario("capture-then-empty-cache"); }
TEST_CASE(scenario_two_graphs_one_stream) { scenario("two-graphs-one-stream"); }
TEST_CASE(scenario_global_capture_other_stream) { scenario("global-capture-other-stream"); }
TEST_CASE(scenario_devices_threads_queue_off) { scenario("devices-threads-queue-off"); }
TEST_CASE(scenario_queue_thread_oom_retry) { scenario("queue-thread-oom-retry"); }
TEST_CASE(scenario_torch_npu_op_workspace_concurrent) { scenario("torch-npu-op-workspace-concurrent"); }
TEST_CASE(scenario_empty_cache_other_thread) { scenario("empty-cache-other-thread"); }

TEST_CASE(unknown_scenario_is_refused) {
  acl_sim_scenarios::Result r;
  CHECK(!acl_sim_scenarios::run("no-such-scenario", &r));
}

// While capturing, launch memory comes from the graph's private pool: it
// stays the graph's for every replay, whatever eager work, bigger launches
// and empty_cache happen meanwhile; nothing synchronises during the capture.
TEST_CASE(captured_launch_memory_is_the_graphs_for_every_replay) {
  aclrtStream s = stream(0);
  const LockLayout l = packed(1, 1);
  const uint64_t lock_bytes = 64 + (1 + 2 * 2) * 64;
  aclrtFuncHandle h = probe("triton_g", lock_bytes, 2 * 1024);
  aclrtFuncHandle big = probe("triton_big", 32, 8 * (uint64_t(1) << 20));
  (void)helper_launch("triton_g", h, s, 2, 1, 1, 2, 1024, l);  // warm: a block of the ordinary pool
  settle_held();
  const auto c0 = acl_sim::counters();
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  Launch cap = generated_launch("triton_g", h, s, 2, 1, 1, 2, 1024, l);
  acl_sim::drain_task_queues();  // torch_npu drains the queue before the capture ends
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  const auto c1 = acl_sim::counters();
  CHECK_EQ(c1.graph_pool_requests - c0.graph_pool_requests, 1u);
  CHECK_EQ(c1.device_synchronizations - c0.device_synchronizations, 0u);
  CHECK_EQ(c1.host_blocking - c0.host_blocking, 0u);
  CHECK_EQ(c1.captures_invalidated - c0.captures_invalidated, 0u);
  CHECK_EQ(c1.allocator_requests - c0.allocator_requests, 0u);
  CHECK(c1.live_caching_allocations <= 1u);  // held unless its lambda ran by the hand-over (no event in capture)
  HeldBlocks::all().release_done();  // what the next launch does first: to the graph's pool
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 0u);
  CHECK_EQ(cap.rc->load(), ACL_SUCCESS);
  const uint64_t captured = cap.id->load();
  CHECK(captured != 0);
  const acl_sim::Extent pool_block = extent_of(cap.regions.locks);
  for (int replay = 0; replay < 3; ++replay) {
    // Later eager work on the capture stream: the graph's block is not the ordinary pool's.
    Launch eager = generated_launch("triton_g", h, s, 2, 1, 1, 2, 1024, l);
    Launch bigger = generated_launch("triton_big", big, s, 8, 1, 1, 8, uint64_t(1) << 20, legacy(4, 0));
    acl_sim::drain_task_queues();
    CHECK(extent_of(eager.regions.locks).base != pool_block.base);
    CHECK(extent_of(bigger.regions.locks).base != pool_block.base);
    sync(s);
    acl_sim::empty_cache();  // frees the ordinary pool's free blocks, never a live graph's
    CHECK(!extent_of(cap.regions.locks).freed);
    CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
    sync(s);
  }
  int replays_seen = 0;
  for (const auto &rec : replays_of(captured)) {
    ++replays_seen;
    CHECK(rec.lock_slots_at_start == expected_locks(l, 2));
    CHECK(rec.locks_unchanged && rec.workspace_written);
    CHECK_EQ(rec.lock_ptr, reinterpret_cast<uintptr_t>(cap.regions.locks));
  }
  CHECK_EQ(replays_seen, 3);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK(extent_of(cap.regions.locks).freed);  // gone with the graph
  CHECK_NO_SIM_ERRORS();
}

// Launches captured on one stream: once the first two lambdas ran, a third
// launch reuses one of their pool blocks (the capture orders them on the
// stream), never a block of the ordinary pool; a later capture on the same
// stream gets a pool of its own.
TEST_CASE(captures_on_one_stream_use_their_own_pools) {
  aclrtStream s = stream(1);
  aclrtFuncHandle h = probe("triton_p", 16, 512);
  aclmdlRI g[2] = {};
  uintptr_t blocks[2] = {};
  for (int i = 0; i < 2; ++i) {
    CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
    Launch a = generated_launch("triton_p", h, s, 1, 1, 1, 1, 512, legacy(2, i + 1));
    Launch b = generated_launch("triton_p", h, s, 1, 1, 1, 1, 512, legacy(2, i + 1));
    acl_sim::drain_task_queues();
    Launch c = generated_launch("triton_p", h, s, 1, 1, 1, 1, 512, legacy(2, i + 1));
    acl_sim::drain_task_queues();
    CHECK(c.regions.locks == a.regions.locks || c.regions.locks == b.regions.locks);
    blocks[i] = extent_of(a.regions.locks).base;
    CHECK_EQ(aclmdlRICaptureEnd(s, &g[i]), ACL_SUCCESS);
  }
  CHECK(blocks[0] != blocks[1]);
  for (int i = 0; i < 2; ++i) CHECK_EQ(aclmdlRIDestroy(g[i]), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}

// No out-of-memory retry while a capture is underway (it would synchronise):
// the allocator's error at once, on the calling thread; the capture stays valid.
TEST_CASE(out_of_memory_while_capturing_throws_without_synchronising) {
  aclrtStream s = stream(2);
  acl_sim::set_device_memory_capacity(0, uint64_t(32) << 20);
  aclrtFuncHandle h = probe("triton_cap_oom", 0, 0);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  const auto c0 = acl_sim::counters();
  bool threw = false;
  try {
    (void)generated_launch("triton_cap_oom", h, s, 64, 1, 1, 64, uint64_t(1) << 20, LockLayout{});
  } catch (const std::runtime_error &e) {
    threw = true;
    check_message(__FILE__, __LINE__, e.what(), {"kernel 'triton_cap_oom'", "NPU out of memory. Tried to allocate"});
  }
  const auto c1 = acl_sim::counters();
  CHECK(threw);
  CHECK_EQ(c1.caching_oom_retries - c0.caching_oom_retries, 0u);
  CHECK_EQ(c1.device_synchronizations - c0.device_synchronizations, 0u);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
