// The launch path as torch_npu runs it (issue: errors, devices, capture,
// concurrency): the helper inside a lambda handed to OpCommand::RunOpApiV2,
// on the simulated task-queue thread, with several devices and graph capture.
#include <torch_npu/csrc/framework/OpCommand.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "test_support.h"

using namespace t;

namespace {
// What a generated launch lambda does: acquire, return the code on failure,
// launch the probe, release after the launch is queued.
std::function<int()> launch_lambda(const char *name, aclrtFuncHandle h, aclrtStream s, LockLayout l,
                                   uint64_t ws_per_block, uint32_t blocks, std::atomic<uint64_t> *launch_id) {
  return [=]() -> int {
    LaunchResources r;
    aclError rc = torch_npu::inductor::acquire_launch_resources(name, s, blocks, 1, 1, blocks, ws_per_block, l, &r);
    if (rc != ACL_SUCCESS) return rc;
    int32_t grid[3] = {int32_t(blocks), 1, 1};
    *launch_id = launch(h, s, r.locks(), r.workspace(), blocks, grid);
    return ACL_SUCCESS;
  };
}

std::vector<acl_sim::AppLog> error_logs() {
  std::vector<acl_sim::AppLog> out;
  for (const auto &l : acl_sim::app_logs())
    if (l.level == ACL_ERROR) out.push_back(l);
  return out;
}
}  // namespace

// Finding 1: a failure inside the lambda on the queue thread is a returned ACL
// code, never an escaping exception; one error log line; nothing allocated.
TEST_CASE(allocator_failure_on_queue_thread_returns_code_logs_once_leaks_nothing) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_q", 16, 64);
  acl_sim::clear_app_logs();
  acl_sim::inject_fault("allocate_workspace", 1, 207001);
  std::atomic<uint64_t> id{0};
  bool threw = false;
  try {
    at_npu::native::OpCommand::RunOpApiV2("triton_q", launch_lambda("triton_q", h, s, legacy(2, 7), 64, 1, &id));
  } catch (const std::exception &) {
    threw = true;  // only a poisoned queue would throw here; it must not be one yet
  }
  acl_sim::drain_task_queues();
  CHECK(!threw);
  auto tasks = acl_sim::op_tasks();
  CHECK_EQ(tasks.size(), 1u);
  CHECK(tasks[0].queued && tasks[0].ran);
  CHECK(!tasks[0].exception_escaped);
  CHECK_EQ(tasks[0].rc, ACL_ERROR_BAD_ALLOC);
  auto logs = error_logs();
  CHECK_EQ(logs.size(), 1u);
  CHECK_MSG(logs[0].message.find("kernel 'triton_q'") != std::string::npos &&
                logs[0].message.find("allocate_workspace") != std::string::npos,
            logs[0].message);
  CHECK_EQ(acl_sim::counters().live_workspace_tensors, 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);
  CHECK_EQ(id.load(), 0u);  // nothing launched
  acl_sim::reset_task_queues();  // the failed task stopped the queue, as in torch_npu
}

TEST_CASE(fill_failure_on_queue_thread_returns_acl_code) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_f", 16, 64);
  acl_sim::inject_fault("aclrtMemcpyAsync", 1, 507011);
  std::atomic<uint64_t> id{0};
  at_npu::native::OpCommand::RunOpApiV2("triton_f", launch_lambda("triton_f", h, s, legacy(2, 7), 64, 1, &id));
  acl_sim::drain_task_queues();
  auto tasks = acl_sim::op_tasks();
  CHECK_EQ(tasks.size(), 1u);
  CHECK(!tasks[0].exception_escaped);
  CHECK_EQ(tasks[0].rc, 507011);
  CHECK_EQ(error_logs().size(), 1u);
  CHECK_EQ(acl_sim::counters().live_workspace_tensors, 0u);
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);  // the fresh image was freed: nothing was queued from it
  acl_sim::reset_task_queues();
}

TEST_CASE(queue_thread_launches_run_in_order_and_clean) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_o", 16, 256);
  std::vector<std::atomic<uint64_t>> ids(20);
  for (int i = 0; i < 20; ++i)
    at_npu::native::OpCommand::RunOpApiV2(
        "triton_o", launch_lambda("triton_o", h, s, legacy(2, 100 + i % 3), 128, 2, &ids[size_t(i)]));
  acl_sim::drain_task_queues();
  sync(s);
  for (int i = 0; i < 20; ++i) {
    auto rec = record(ids[size_t(i)].load());
    CHECK(rec.lock_slots_at_start == std::vector<int64_t>(2, 100 + i % 3));
    CHECK(rec.locks_unchanged && rec.workspace_written && !rec.regions_overlap);
  }
  for (const auto &task : acl_sim::op_tasks()) CHECK(task.queued && task.rc == 0);
  CHECK_NO_SIM_ERRORS();
}

// Finding 2: images are per device; events only on their own device's streams.
TEST_CASE(two_devices_keep_lock_images_and_events_apart) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream s[2];
  aclrtFuncHandle h = probe("triton_d", 32, 0);
  std::vector<uint64_t> ids;
  for (int d = 0; d < 2; ++d) {
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    CHECK_EQ(aclrtCreateStream(&s[d]), ACL_SUCCESS);
    ids.push_back(helper_launch("triton_d", h, s[d], 1, 1, 1, 1, 0, legacy(4, 7)));
  }
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().entries, 2u);  // one image per device, same content
  // Churn device 1 only: its eviction records events on device 1's stream alone.
  for (int v = 8; v < 12; ++v) ids.push_back(helper_launch("triton_d", h, s[1], 1, 1, 1, 1, 0, legacy(4, v)));
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().entries, 2u);  // device 0's image untouched
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  ids.push_back(helper_launch("triton_d", h, s[0], 1, 1, 1, 1, 0, legacy(4, 7)));  // still a hit on device 0
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().misses, 6u);
  for (int d = 0; d < 2; ++d) {
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    sync(s[d]);
    CHECK_EQ(torch_npu::inductor::trim_pinned_cache(), 0u);
  }
  CHECK_EQ(acl_sim::counters().live_pinned, 0u);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
  CHECK(record(ids.back()).lock_slots_at_start == std::vector<int64_t>(4, 7));
  CHECK_EQ(record(ids.back()).device, 0);
  CHECK_NO_SIM_ERRORS();
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
}

// Finding 3: a captured copy replays from an image that lives as long as the process.
TEST_CASE(capture_replays_after_cache_churn_read_live_images) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream s = stream(2), side = stream(3);
  aclrtFuncHandle h = probe("triton_g", 5 * 8, 256);
  { LaunchResources warm = acquire("warm", s, 2, 1, 1, 2, 256, legacy(5, 9)); }  // caches the image before capture
  sync(s);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
  const uint64_t captured = helper_launch("triton_g", h, s, 2, 1, 1, 2, 128, legacy(5, 9));
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK(model != nullptr);
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().kept_for_capture, 1u);
  for (int replay = 0; replay < 3; ++replay) {
    // Churn: other contents on another stream, and a trim; the captured image must survive.
    for (int v = 20; v < 24; ++v) { LaunchResources r = acquire("churn", side, 1, 1, 1, 1, 0, legacy(5, v + replay)); }
    sync(side);
    (void)torch_npu::inductor::trim_pinned_cache();
    CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
    sync(s);
  }
  CHECK_EQ(acl_sim::counters().stale_replay_sources, 0u);
  CHECK_EQ(acl_sim::counters().captures_invalidated, 0u);
  int replays_seen = 0;
  for (const auto &rec : acl_sim::probe_records())
    if (rec.captured_launch_id == captured) {
      ++replays_seen;
      CHECK(rec.lock_slots_at_start == std::vector<int64_t>(5, 9));
    }
  CHECK_EQ(replays_seen, 3);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(capture_of_zero_fill_and_new_content_needs_no_event_or_eviction) {
  torch_npu::inductor::set_pinned_cache_limits(1, 1 << 20);
  aclrtStream s = stream(4);
  { LaunchResources warm = acquire("warm", s, 1, 1, 1, 1, 64, legacy(4, 3)); }  // an evictable image exists
  sync(s);
  auto c0 = acl_sim::counters();
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  { LaunchResources r = acquire("zero", s, 1, 1, 1, 1, 64, legacy(4, 0)); }
  { LaunchResources r = acquire("new", s, 1, 1, 1, 1, 64, legacy(4, 5)); }  // over the bound: no eviction now
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK_EQ(acl_sim::counters().events_recorded, c0.events_recorded);
  CHECK_EQ(acl_sim::counters().captures_invalidated, 0u);
  CHECK_EQ(torch_npu::inductor::pinned_cache_stats().evictions, 0u);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}

// Finding 6: one stream's held launch never delays launches on other streams.
TEST_CASE(streams_never_wait_on_each_other) {
  LaunchResources held = acquire("held", stream(0), 1, 1, 1, 1, 64, legacy(2, 0));
  std::vector<aclrtStream> others(64);
  for (auto &o : others) CHECK_EQ(aclrtCreateStream(&o), ACL_SUCCESS);
  std::atomic<int> done{0};
  std::thread other([&] {
    for (aclrtStream o : others) {
      LaunchResources r = acquire("other", o, 1, 1, 1, 1, 64, legacy(2, 0));
      ++done;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.load() < 64 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int done_while_held = done.load();
  held = LaunchResources();
  other.join();
  CHECK_EQ(done_while_held, 64);
  sync_all();
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
