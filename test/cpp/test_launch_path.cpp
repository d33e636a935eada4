// The launch path as torch_npu runs it: the generated shape's lambda handed to the wheel's own
// OpCommand::RunOpApiV2, run later on torch_npu's task-queue thread (or at once with TASK_QUEUE_ENABLE=0), on
// several devices; nothing in the lambda allocates, locks or waits.
#include <algorithm>
#include <atomic>
#include <thread>

#include "real_support.h"

using namespace t;

TEST_CASE(queue_thread_launches_run_in_order_and_clean) {
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_o", 16, 256);
  const Counters c0 = counters();
  std::vector<Launch> ls;
  for (int i = 0; i < 20; ++i)
    ls.push_back(generated_launch("triton_o", h, s, 2, 1, 1, 2, 128, legacy(2, 100 + i % 3)));
  long queue_tid = 0;
  drain(&queue_tid);
  const Counters c = counters();  // before the test's own synchronise
  sync(s);
  CHECK(queue_tid != tid());  // precondition: torch_npu's queue is on
  uint64_t prev = 0;
  for (int i = 0; i < 20; ++i) {
    const Launch &L = ls[size_t(i)];
    CHECK_EQ(L.rc->load(), ACL_SUCCESS);
    CHECK_EQ(L.ran_on->load(), queue_tid);  // on torch_npu's queue thread
    CHECK(L.id->load() > prev);             // in the order they were queued
    prev = L.id->load();
    auto rec = record(L.id->load());
    CHECK(rec.lock_slots_at_start == std::vector<int64_t>(2, 100 + i % 3));
    CHECK(rec.locks_unchanged && rec.workspace_written && !rec.regions_overlap);
  }
  // The queue thread only wrote fills and launched: no allocator, no event, no wait.
  const std::vector<long> queried = callers("aclrtQueryEventStatus");
  CHECK(std::find(queried.begin(), queried.end(), queue_tid) == queried.end());
  CHECK_EQ(c.device_synchronizations + c.host_blocking, c0.device_synchronizations + c0.host_blocking);
  CHECK_EQ(c.events_recorded, c0.events_recorded);
  CHECK_EQ(blocks().requests, 1);  // the thread's block, kept and reused
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE_QUEUES(task_queue_off_runs_the_lambda_on_the_calling_thread, "0") {
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_off", 16, 64);
  Launch L = generated_launch("triton_off", h, s, 1, 1, 1, 1, 64, legacy(2, 4));
  CHECK_EQ(L.rc->load(), ACL_SUCCESS);  // already ran, before the call returned
  CHECK_EQ(L.ran_on->load(), tid());    // on this thread
  sync(s);
  CHECK(record(L.id->load()).lock_slots_at_start == std::vector<int64_t>(2, 4));
  CHECK_NO_SIM_ERRORS();
}

// Memory comes from the calling thread's current device, the kernel runs on its stream's device: per device,
// nothing crosses (each device's own queue thread with the queue on).
TEST_CASE_QUEUES(two_devices_take_memory_of_their_own, "10") {
  aclrtStream s[2];
  aclrtFuncHandle h = probe("triton_d", 32, 1024);
  std::vector<uint64_t> ids;
  std::vector<int> devices;
  for (int d = 0; d < 2; ++d) {
    set_device(d);
    s[d] = stream(0, d);
  }
  for (int i = 0; i < 8; ++i) {
    const int d = i % 2;
    set_device(d);
    ids.push_back(helper_launch("triton_d", h, s[d], 2, 1, 1, 2, 512, legacy(4, 7 + d)));
    devices.push_back(d);
  }
  for (int d = 0; d < 2; ++d) {
    set_device(d);
    sync(s[d]);
    CHECK_EQ(blocks(d).requests, 1);  // the thread's block for the device's stream, kept
  }
  set_device(0);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    CHECK_EQ(rec.device, devices[i]);
    CHECK_EQ(rec.lock_extent.device, devices[i]);
    CHECK_EQ(rec.workspace_extent.device, devices[i]);
    CHECK(rec.lock_slots_at_start == std::vector<int64_t>(4, 7 + devices[i]));
  }
  CHECK_EQ(error_count("cross-device"), 0);
  CHECK_NO_SIM_ERRORS();
}

// One stream's unfinished kernels never delay another stream's launches on the host: no stream lock, no wait. With
// the queue off each call returns once its kernel is queued on the stream, so all 32 return, and their kernels run,
// while the busy stream is held behind its kernels (the double's stream hold): an event recorded after them is not
// complete. (An order by construction: a wait on the busy stream would never return before the hold is released.)
TEST_CASE_QUEUES(streams_never_wait_on_each_other, "0") {
  aclrtStream busy = stream(0);
  aclrtFuncHandle slow = probe("slow", 16, 64);
  StreamHold hold(busy);
  for (int i = 0; i < 3; ++i) (void)generated_launch("slow", slow, busy, 1, 1, 1, 1, 64, legacy(2, 0));
  aclrtEvent busy_done = nullptr;
  CHECK_EQ(aclrtCreateEvent(&busy_done), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(busy_done, busy), ACL_SUCCESS);
  std::vector<aclrtStream> others(32);
  for (size_t i = 0; i < others.size(); ++i) others[i] = stream(int(i), 0, true);  // the other pool: all distinct
  aclrtFuncHandle fast = probe("fast", 16, 64);
  std::vector<Launch> ls;
  for (aclrtStream o : others) ls.push_back(generated_launch("fast", fast, o, 1, 1, 1, 1, 64, legacy(2, 0)));
  for (aclrtStream o : others) sync(o);  // their kernels ran with the busy stream still held
  for (const Launch &L : ls) (void)record(L.id->load());
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
  CHECK_EQ(aclrtQueryEventStatus(busy_done, &status), ACL_SUCCESS);
  CHECK_MSG(status == ACL_EVENT_RECORDED_STATUS_NOT_READY, "the held stream's kernels had finished");
  hold.release();
  sync_all();
  CHECK_EQ(aclrtDestroyEvent(busy_done), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}
