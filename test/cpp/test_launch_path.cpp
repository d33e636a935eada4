// The launch path as torch_npu runs it: the generated shape's lambda handed
// to OpCommand::RunOpApiV2, run later on the simulated task-queue thread (or
// at once with the queue off), on several devices; nothing in the lambda
// allocates, locks or waits.
#include <atomic>
#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;

TEST_CASE(queue_thread_launches_run_in_order_and_clean) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_o", 16, 256);
  acl_sim::reset_counters();
  std::vector<Launch> ls;
  for (int i = 0; i < 20; ++i) ls.push_back(generated_launch("triton_o", h, s, 2, 1, 1, 2, 128, legacy(2, 100 + i % 3)));
  acl_sim::drain_task_queues();
  const auto c = acl_sim::counters();  // before the test's own synchronise
  sync(s);
  for (int i = 0; i < 20; ++i) {
    auto rec = record(ls[size_t(i)].id->load());
    CHECK(rec.lock_slots_at_start == std::vector<int64_t>(2, 100 + i % 3));
    CHECK(rec.locks_unchanged && rec.workspace_written && !rec.regions_overlap);
  }
  uint64_t prev = 0;
  for (const auto &task : acl_sim::op_tasks()) {
    CHECK(task.queued && task.ran && task.rc == 0);
    CHECK(task.seq > prev);
    prev = task.seq;
  }
  // The queue thread only wrote fills and launched: no allocator, no wait.
  CHECK_EQ(c.caching_allocs_on_queue_threads + c.caching_frees_on_queue_threads, 0u);
  CHECK_EQ(c.allocator_requests, 0u);
  CHECK_EQ(c.device_synchronizations + c.host_blocking, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(task_queue_off_runs_the_lambda_on_the_calling_thread) {
  acl_sim::set_task_queue_enabled(false);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_off", 16, 64);
  Launch L = generated_launch("triton_off", h, s, 1, 1, 1, 1, 64, legacy(2, 4));
  CHECK_EQ(L.rc->load(), ACL_SUCCESS);  // already ran, before the call returned
  sync(s);
  CHECK(record(L.id->load()).lock_slots_at_start == std::vector<int64_t>(2, 4));
  CHECK(!acl_sim::op_tasks().empty() && !acl_sim::op_tasks().back().queued);
  acl_sim::set_task_queue_enabled(true);
  CHECK_NO_SIM_ERRORS();
}

// Memory comes from the calling thread's current device, the kernel runs on
// its stream's device: per device, nothing crosses.
TEST_CASE(two_devices_take_memory_of_their_own) {
  aclrtStream s[2];
  aclrtFuncHandle h = probe("triton_d", 32, 1024);
  std::vector<uint64_t> ids;
  std::vector<int> devices;
  for (int d = 0; d < 2; ++d) {
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    CHECK_EQ(aclrtCreateStream(&s[d]), ACL_SUCCESS);
  }
  for (int i = 0; i < 8; ++i) {
    const int d = i % 2;
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    ids.push_back(helper_launch("triton_d", h, s[d], 2, 1, 1, 2, 512, legacy(4, 7 + d)));
    devices.push_back(d);
  }
  for (int d = 0; d < 2; ++d) {
    CHECK_EQ(aclrtSetDevice(d), ACL_SUCCESS);
    sync(s[d]);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    CHECK_EQ(rec.device, devices[i]);
    CHECK_EQ(rec.lock_extent.device, devices[i]);
    CHECK_EQ(rec.workspace_extent.device, devices[i]);
    CHECK(rec.lock_slots_at_start == std::vector<int64_t>(4, 7 + devices[i]));
  }
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kCrossDevice), 0u);
  CHECK_NO_SIM_ERRORS();
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
}

// One stream's long kernels never delay another stream's launches on the host:
// no stream lock, no wait.
TEST_CASE(streams_never_wait_on_each_other) {
  aclrtStream busy = stream(0);
  aclrtFuncHandle slow = probe("slow", 16, 64, 200000);  // 200 ms each
  for (int i = 0; i < 3; ++i) (void)generated_launch("slow", slow, busy, 1, 1, 1, 1, 64, legacy(2, 0));
  std::vector<aclrtStream> others(32);
  for (auto &o : others) CHECK_EQ(aclrtCreateStream(&o), ACL_SUCCESS);
  aclrtFuncHandle fast = probe("fast", 16, 64);
  const auto t0 = std::chrono::steady_clock::now();
  acl_sim::set_task_queue_enabled(false);  // each call returns once its kernel is queued on the stream
  for (aclrtStream o : others) (void)generated_launch("fast", fast, o, 1, 1, 1, 1, 64, legacy(2, 0));
  const auto host = std::chrono::steady_clock::now() - t0;
  acl_sim::set_task_queue_enabled(true);
  CHECK_MSG(host < std::chrono::milliseconds(150),
            "32 launches on idle streams took "
                << std::chrono::duration_cast<std::chrono::milliseconds>(host).count()
                << " ms while another stream ran 600 ms of kernels");
  acl_sim::drain_task_queues();
  sync_all();
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
