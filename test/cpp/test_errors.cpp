// Failures of a launch. On the calling thread (sizes, the allocator): an
// exception naming the kernel, nothing allocated, nothing queued, the task
// queue still running. Inside the lambda on the queue thread (a lock fill):
// the ACL code returned, exactly one log line, nothing escapes.
#include <climits>

#include "test_support.h"

using namespace t;

namespace {
std::vector<acl_sim::AppLog> error_logs() {
  std::vector<acl_sim::AppLog> out;
  for (const auto &l : acl_sim::app_logs())
    if (l.level == ACL_ERROR) out.push_back(l);
  return out;
}

// Runs a generated-shape launch that must throw on the calling thread; returns the message.
template <class E>
std::string calling_thread_error(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t block_num,
                                 uint64_t ws, const LockLayout &l) {
  try {
    (void)generated_launch(name, h, s, gx, 1, 1, block_num, ws, l);
  } catch (const E &e) {
    return e.what();
  }
  throw Failure(std::string(name) + ": the launch did not throw on the calling thread");
}

// Nothing allocated, nothing queued, and the queue runs the next launch.
void check_clean_failure_and_queue_alive(aclrtStream s) {
  acl_sim::drain_task_queues();
  const auto c = acl_sim::counters();
  CHECK_EQ(c.live_caching_allocations, 0u);
  CHECK_EQ(c.live_workspace_tensors, 0u);
  CHECK_EQ(c.op_tasks, 0u);  // nothing was handed to the queue
  CHECK_EQ(c.memsets + c.launches, 0u);
  CHECK(acl_sim::task_queue_status(0) == acl_sim::QueueStatus::kRun);
  aclrtFuncHandle ok = probe("triton_next", 16, 64);
  const uint64_t id = helper_launch("triton_next", ok, s, 1, 1, 1, 1, 64, legacy(2, 1));
  sync(s);
  CHECK(record(id).lock_slots_at_start == std::vector<int64_t>({1, 1}));
}
}  // namespace

TEST_CASE(workspace_size_overflow_throws_on_calling_thread_naming_the_kernel) {
  acl_sim::reset_counters();
  aclrtFuncHandle h = probe("triton_big", 0, 0);
  const std::string e = calling_thread_error<std::invalid_argument>("triton_big", h, stream(0), 1u << 20, 1,
                                                                    uint64_t(1) << 50, LockLayout{});
  check_message(__FILE__, __LINE__, e,
                {"npu_launch_resources: kernel 'triton_big'", "overflow", "workspace 1125899906842624 B", "1048576"});
  CHECK_EQ(acl_sim::counters().caching_requests, 0u);
  check_clean_failure_and_queue_alive(stream(0));
}

TEST_CASE(lock_size_overflow_throws_on_calling_thread_naming_the_kernel) {
  acl_sim::reset_counters();
  aclrtFuncHandle h = probe("triton_locks", 0, 0);
  const std::string e = calling_thread_error<std::invalid_argument>(
      "triton_locks", h, stream(0), 1, 0xFFFFFFFFu, 0, packed(0, 0xFFFFFFFFu, 2));
  check_message(__FILE__, __LINE__, e, {"kernel 'triton_locks'", "4294967295 unordered", "4294967295 blocks x 2"});
  const std::string e2 = calling_thread_error<std::invalid_argument>("triton_legacy", h, stream(0), 1, 1, 0,
                                                                     legacy(uint64_t(1) << 62, 1));
  check_message(__FILE__, __LINE__, e2, {"kernel 'triton_legacy'", "lock_num 4611686018427387904"});
  CHECK_EQ(acl_sim::counters().caching_requests, 0u);
  check_clean_failure_and_queue_alive(stream(0));
}

// Out of device memory even after the allocator's retry: its own error, with
// the kernel named, on the calling thread.
TEST_CASE(out_of_memory_is_the_allocators_error_on_the_calling_thread) {
  aclrtStream s = stream(0);
  acl_sim::set_device_memory_capacity(0, uint64_t(64) << 20);
  acl_sim::reset_counters();
  aclrtFuncHandle h = probe("triton_oom", 0, 0);
  const std::string e = calling_thread_error<std::runtime_error>("triton_oom", h, s, 1024, 1, uint64_t(1) << 20,
                                                                 LockLayout{});  // 1 GiB of workspace
  check_message(__FILE__, __LINE__, e,
                {"npu_launch_resources: kernel 'triton_oom': ", "bytes for its locks and workspace: ",
                 "NPU out of memory. Tried to allocate 1.00 GiB (NPU 0; 64.00 MiB total capacity;",
                 "reserved in total by PyTorch)"});
  const auto c = acl_sim::counters();
  CHECK_EQ(c.caching_requests, 1u);
  CHECK_EQ(c.caching_oom_retries, 1u);  // the allocator tried to make room first
  CHECK_EQ(c.caching_allocs_on_queue_threads, 0u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kSelfWait), 0u);
  acl_sim::set_device_memory_capacity(0, 0);
  acl_sim::reset_counters();
  check_clean_failure_and_queue_alive(s);
}

TEST_CASE(injected_allocator_failure_is_rethrown_with_its_text) {
  acl_sim::reset_counters();
  acl_sim::inject_fault("raw_alloc_with_stream", 1, 12345);
  aclrtFuncHandle h = probe("triton_a", 16, 64);
  const std::string e = calling_thread_error<std::runtime_error>("triton_a", h, stream(0), 1, 1, 64, legacy(2, 7));
  check_message(__FILE__, __LINE__, e, {"kernel 'triton_a'", "NPU out of memory", "code 12345"});
  check_clean_failure_and_queue_alive(stream(0));
}

TEST_CASE(fill_failure_on_queue_thread_returns_its_code_with_one_log_line) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_f", 16, 64);
  acl_sim::clear_app_logs();
  acl_sim::reset_counters();
  acl_sim::inject_fault("aclrtMemsetAsync", 1, 507011);
  bool threw = false;
  Launch L;
  try {
    L = generated_launch("triton_f", h, s, 1, 1, 1, 1, 64, legacy(2, 7));
  } catch (const std::exception &) {
    threw = true;
  }
  acl_sim::drain_task_queues();
  CHECK(!threw);  // the calling thread saw nothing: the failure is the lambda's
  auto tasks = acl_sim::op_tasks();
  CHECK_EQ(tasks.size(), 1u);
  CHECK(tasks[0].queued && tasks[0].ran);
  CHECK(!tasks[0].exception_escaped);
  CHECK_EQ(tasks[0].rc, 507011);
  CHECK_EQ(L.rc->load(), 507011);
  CHECK_EQ(L.id->load(), 0u);  // nothing launched
  auto logs = error_logs();
  CHECK_EQ(logs.size(), 1u);
  CHECK_EQ(logs[0].message, std::string("npu_launch_resources: kernel 'triton_f': aclrtMemsetAsync of lock bytes "
                                        "[0, +16) failed: 507011"));
  settle_held();  // the failed lambda is done too (its event recorded): the next launch frees its block
  const auto c = acl_sim::counters();
  CHECK_EQ(c.live_caching_allocations, 0u);
  CHECK_EQ(c.caching_frees_on_queue_threads, 0u);
  acl_sim::reset_task_queues();  // the failed task stopped the queue, as in torch_npu
}

TEST_CASE(a_later_fill_failure_stops_at_that_fill) {
  // legacy(2, 0x1234): a zero fill, then two byte runs per slot; the third fill fails.
  acl_sim::set_task_queue_enabled(false);
  aclrtStream s = stream(0);
  acl_sim::clear_app_logs();
  acl_sim::reset_counters();
  acl_sim::inject_fault("aclrtMemsetAsync", 3, 507899);
  LaunchMemory m("triton_late", s, 1, 1, 1, 1, 0, legacy(2, 0x1234));
  {
    const LaunchDone done{m.regions().held, s};  // a failed fill is a way out of the lambda too
    CHECK_EQ(m.regions().write_locks("triton_late", s), 507899);
  }
  m.release_when_finished();
  CHECK_EQ(settle_held(), 1u);  // what the next launch does first
  CHECK_EQ(acl_sim::counters().live_caching_allocations, 0u);
  CHECK_EQ(acl_sim::counters().memsets, 2u);
  auto logs = error_logs();
  CHECK_EQ(logs.size(), 1u);
  check_message(__FILE__, __LINE__, logs[0].message, {"kernel 'triton_late'", "[1, +1)", "507899"});
  acl_sim::set_task_queue_enabled(true);
}

TEST_MAIN()
