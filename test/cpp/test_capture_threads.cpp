// Graph capture and threads against torch_npu's allocators as they are
// (issue 17): the launcher scenarios, one per process, and the pieces behind
// them (graph-pool memory while capturing, byte fills instead of page-locked
// images while the device captures, eviction that skips a bad victim,
// reaping from every launch, the process-wide last error).
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
LockLayout packed(uint32_t ordered, uint32_t unordered) { return acl_sim_scenarios::packed(ordered, unordered); }
}  // namespace

TEST_CASE(scenario_capture_then_grow) { scenario("capture-then-grow"); }
TEST_CASE(scenario_capture_then_empty_cache) { scenario("capture-then-empty-cache"); }
TEST_CASE(scenario_two_graphs_one_stream) { scenario("two-graphs-one-stream"); }
TEST_CASE(scenario_global_capture_other_stream) { scenario("global-capture-other-stream"); }
TEST_CASE(scenario_devices_threads_queue_off) { scenario("devices-threads-queue-off"); }

TEST_CASE(unknown_scenario_is_refused) {
  acl_sim_scenarios::Result r;
  CHECK(!acl_sim_scenarios::run("no-such-scenario", &r));
}

// While capturing: memory from the graph's pool, no workspace request, no
// device synchronisation, no stream lock; outside capture: the workspace block.
TEST_CASE(capturing_launch_takes_graph_pool_memory_and_never_syncs) {
  aclrtStream s = stream(0);
  { LaunchResources warm = acquire("k", s, 2, 1, 1, 2, 1024, legacy(4, 0)); CHECK(!warm.from_graph_pool()); }
  sync(s);
  const auto c0 = acl_sim::counters();
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  void *first = nullptr;
  {
    // Bigger than the warm block: the workspace allocator would grow (and sync) here.
    LaunchResources r = acquire("k", s, 2, 1, 1, 2, uint64_t(4) << 20, legacy(4, 0));
    CHECK(r.from_graph_pool());
    first = r.locks();
    LaunchResources again = acquire("k2", s, 1, 1, 1, 1, 64, legacy(2, 0));  // same thread, same stream: allowed
    CHECK(again.from_graph_pool() && again.locks() != first);
  }
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  const auto c1 = acl_sim::counters();
  CHECK_EQ(c1.allocator_requests - c0.allocator_requests, 0u);
  CHECK_EQ(c1.allocator_growths - c0.allocator_growths, 0u);
  CHECK_EQ(c1.host_blocking - c0.host_blocking, 0u);
  CHECK_EQ(c1.graph_pool_requests - c0.graph_pool_requests, 2u);
  CHECK_EQ(c1.captures_invalidated, c0.captures_invalidated);
  CHECK_EQ(c1.live_caching_allocations, 0u);  // given back to the pool after the launch
  acl_sim::Extent e;
  CHECK(acl_sim::allocation_extent(first, &e) && !e.freed);  // the pool keeps it for the replays
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK(acl_sim::allocation_extent(first, &e) && e.freed);  // gone with the graph
  { LaunchResources after = acquire("k", s, 2, 1, 1, 2, 1024, legacy(4, 0)); CHECK(!after.from_graph_pool()); }
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(graph_pool_failure_is_bad_alloc_naming_the_kernel) {
  aclrtStream s = stream(1);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  acl_sim::inject_fault("raw_alloc_with_stream", 1, 0x77);
  CHECK_FAILS(acquire("triton_pool", s, 1, 1, 1, 1, 64, legacy(2, 0)), ACL_ERROR_BAD_ALLOC, "triton_pool",
              "raw_alloc_with_stream", "while capturing");
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 0u);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
}

// Content written with byte fills is the content: every layout, checked by the kernel.
TEST_CASE(byte_fills_write_exact_lock_content_during_capture) {
  aclrtStream s = stream(2);
  const LockLayout layouts[] = {legacy(6, 1), legacy(3, -1), legacy(2, 0x0102030405060708LL), packed(2, 0),
                                packed(1, 2), packed(0, 1)};
  for (const LockLayout &l0 : layouts) {
    LockLayout l = l0;
    if (l.ordered != 0 && l.unordered == 0) l.init_value = 5;
    const uint32_t blocks = 3;
    aclrtFuncHandle h = probe("fill", expected_locks(l, blocks).size() * 8, 0);
    { LaunchResources warm = acquire("warm", s, 1, 1, 1, 1, 0, legacy(1, 0)); }
    sync(s);
    const auto st0 = torch_npu::inductor::pinned_cache_stats();
    CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
    const uint64_t id = helper_launch("fill", h, s, blocks, 1, 1, blocks, 0, l);
    aclmdlRI model = nullptr;
    CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
    CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
    sync(s);
    const auto st1 = torch_npu::inductor::pinned_cache_stats();
    if (!torch_npu::inductor::lock_content_is_zero(l)) CHECK_EQ(st1.byte_fill_launches - st0.byte_fill_launches, 1u);
    CHECK_EQ(st1.entries, st0.entries);  // no page-locked image made during the capture
    const auto reps = replays_of(id);
    CHECK_EQ(reps.size(), 1u);
    CHECK(reps[0].lock_slots_at_start == expected_locks(l, blocks));
    CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  }
  CHECK_EQ(acl_sim::counters().pinned_allocs, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(byte_run_counting_stops_at_the_cap) {
  using torch_npu::inductor::for_each_lock_byte_run;
  uint64_t n = for_each_lock_byte_run(legacy(4, 0), 0, 32, 100, [](uint64_t, uint8_t, uint64_t) {});
  CHECK_EQ(n, 1u);
  n = for_each_lock_byte_run(legacy(4, 1), 0, 32, 100, [](uint64_t, uint8_t, uint64_t) {});
  CHECK_EQ(n, 8u);  // [01][00 x 7] per slot
  n = for_each_lock_byte_run(legacy(600, 1), 0, 4800, torch_npu::inductor::kMaxFillRuns,
                             [](uint64_t, uint8_t, uint64_t) {});
  CHECK_EQ(n, torch_npu::inductor::kMaxFillRuns + 1);
  uint64_t covered = 0;
  for_each_lock_byte_run(packed(1, 1), 4, (8 + 9 * 8) * 8, 100, [&](uint64_t off, uint8_t, uint64_t c) {
    CHECK_EQ(off, covered);
    covered += c;
  });
  CHECK_EQ(covered, uint64_t(8 + 9 * 8) * 8);
}

// Another stream captures (any mode counts): no event query, record,
// page-locked allocation or free; the eager launch still gets its content.
TEST_CASE(housekeeping_waits_while_another_stream_captures) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream cs = stream(3), eager = stream(4);
  aclrtFuncHandle h = probe("eager", 32, 0);
  helper_launch("eager", h, eager, 1, 1, 1, 1, 0, legacy(4, 1));
  helper_launch("eager", h, eager, 1, 1, 1, 1, 0, legacy(4, 2));  // retires image 1
  sync(eager);
  CHECK_EQ(aclmdlRICaptureBegin(cs, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
  const auto c0 = acl_sim::counters();
  const uint64_t id = helper_launch("eager", h, eager, 1, 1, 1, 1, 0, legacy(4, 3));  // new content: byte fills
  sync(eager);
  const auto c1 = acl_sim::counters();
  CHECK_EQ(c1.event_queries - c0.event_queries, 0u);
  CHECK_EQ(c1.events_recorded - c0.events_recorded, 0u);
  CHECK_EQ(c1.pinned_allocs - c0.pinned_allocs, 0u);
  CHECK_EQ(c1.pinned_frees - c0.pinned_frees, 0u);
  CHECK(record(id).lock_slots_at_start == std::vector<int64_t>(4, 3));
  CHECK(torch_npu::inductor::pinned_cache_stats().housekeeping_deferred >= 1u);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(cs, &model), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  { LaunchResources r = acquire("eager", eager, 1, 1, 1, 1, 0, legacy(4, 0)); }  // catches up: reaps
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 1u);  // image 2 only
  CHECK_NO_SIM_ERRORS();
}

// A victim whose event cannot be recorded no longer stalls eviction: the next one goes.
TEST_CASE(eviction_skips_a_victim_it_cannot_retire) {
  torch_npu::inductor::set_pinned_cache_limits(2, 1 << 20);
  aclrtStream a = stream(5), b = stream(6);
  { LaunchResources r = acquire("k", a, 1, 1, 1, 1, 0, legacy(4, 1)); }  // oldest, copied on stream a
  { LaunchResources r = acquire("k", b, 1, 1, 1, 1, 0, legacy(4, 2)); }  // copied on stream b
  sync(a);
  sync(b);
  acl_sim::inject_fault("aclrtRecordEvent", 1, 0x5151);  // the oldest's event fails
  { LaunchResources r = acquire("k", b, 1, 1, 1, 1, 0, legacy(4, 3)); }
  const auto st = torch_npu::inductor::pinned_cache_stats();
  CHECK_EQ(st.evictions, 1u);  // the second-oldest went instead
  CHECK_EQ(st.entries, 2u);
  sync(b);
  CHECK_EQ(torch_npu::inductor::trim_pinned_cache(), 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
}

// Retired images are freed by any later launch, also one whose locks are all zero.
TEST_CASE(zero_content_launch_reaps_retired_images) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream s = stream(7);
  { LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(4, 1)); }
  { LaunchResources r = acquire("k", s, 1, 1, 1, 1, 0, legacy(4, 2)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 1u);
  sync(s);
  { LaunchResources r = acquire("z", s, 1, 1, 1, 1, 256, legacy(4, 0)); }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().retired, 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 1u);
}

// With the task queue on the lambda fails on the queue thread: the caller
// reads the failure from the process-wide copy.
TEST_CASE(queue_thread_failure_is_readable_by_the_caller) {
  aclrtStream s = stream(8);
  acl_sim::set_task_queue_enabled(true);
  at_npu::native::OpCommand::RunOpApiV2("triton_far", [s]() -> int {
    LaunchResources r;
    return torch_npu::inductor::acquire_launch_resources("triton_far", s, 1, 1, 1, 0, 0, packed(0, 1), &r);
  });
  acl_sim::drain_task_queues();
  CHECK_EQ(std::string(torch_npu::inductor::last_error_message()), std::string());  // this thread: nothing
  char text[512];
  const size_t n = torch_npu::inductor::last_launch_error_message(text, sizeof text);
  CHECK(n > 0);
  check_message(__FILE__, __LINE__, text, {"triton_far", "unordered"});
  char small[8];
  CHECK_EQ(torch_npu::inductor::last_launch_error_message(small, sizeof small), n);
  CHECK_EQ(std::strlen(small), 7u);
  acl_sim::reset_task_queues();
}

TEST_MAIN()
