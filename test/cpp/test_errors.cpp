// Failures of a launch on torch_npu's own runtime. On the calling thread (sizes, torch_npu's caching
// allocator): an exception naming the kernel, nothing allocated, nothing queued, the task queue still
// running. Inside the lambda on torch_npu's queue thread (a lock fill): the ACL code returned, exactly one
// log line, nothing escapes.
#include <chrono>
#include <climits>
#include <thread>

#include "real_support.h"

using namespace t;

namespace {
std::vector<std::string> error_logs() { return app_logs(ACL_ERROR); }

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
  drain();
  const Counters c = counters();
  CHECK_EQ(blocks().live, 0);
  CHECK_EQ(c.memsets + c.launches, 0u);  // nothing was handed to the queue
  aclrtFuncHandle ok = probe("triton_next", 16, 64);
  const uint64_t id = helper_launch("triton_next", ok, s, 1, 1, 1, 1, 64, legacy(2, 1));
  sync(s);
  CHECK(record(id).lock_slots_at_start == std::vector<int64_t>({1, 1}));
}
}  // namespace

TEST_CASE(workspace_size_overflow_throws_on_calling_thread_naming_the_kernel) {
  aclrtFuncHandle h = probe("triton_big", 0, 0);
  const std::string e = calling_thread_error<std::invalid_argument>("triton_big", h, stream(0), 1u << 20, 1,
                                                                    uint64_t(1) << 50, LockLayout{});
  check_message(__FILE__, __LINE__, e,
                {"npu_launch_resources: kernel 'triton_big'", "overflow", "workspace 1125899906842624 B", "1048576"});
  CHECK_EQ(blocks().requests, 0);
  check_clean_failure_and_queue_alive(stream(0));
}

TEST_CASE(lock_size_overflow_throws_on_calling_thread_naming_the_kernel) {
  aclrtFuncHandle h = probe("triton_locks", 0, 0);
  const std::string e = calling_thread_error<std::invalid_argument>("triton_locks", h, stream(0), 1, 0xFFFFFFFFu, 0,
                                                                    packed(0, 0xFFFFFFFFu, 2));
  check_message(__FILE__, __LINE__, e, {"kernel 'triton_locks'", "4294967295 unordered", "4294967295 blocks x 2"});
  const std::string e2 =
      calling_thread_error<std::invalid_argument>("triton_legacy", h, stream(0), 1, 1, 0, legacy(uint64_t(1) << 62, 1));
  check_message(__FILE__, __LINE__, e2, {"kernel 'triton_legacy'", "lock_num 4611686018427387904"});
  CHECK_EQ(blocks().requests, 0);
  check_clean_failure_and_queue_alive(stream(0));
}

// Out of device memory even after the allocator's retry: its own error, with
// the kernel named, on the calling thread.
// The device has no memory left: every allocation fails with ACL_ERROR_RT_MEMORY_ALLOCATION (207001, what
// torch_npu's allocator takes for out of memory), injected into the double's aclrtMalloc (torch_npu's
// aclrtMallocAlign32). torch_npu's allocator makes room and retries, then throws its own out-of-memory error;
// the helper rethrows it whole, the kernel named, on the calling thread.
TEST_CASE(out_of_memory_is_the_allocators_error_on_the_calling_thread) {
  aclrtStream s = stream(0);
  c10_npu::NPUCachingAllocator::emptyCache();
  aclrtFuncHandle h = probe("triton_oom", 0, 0);
  for (uint64_t n = 1; n <= 8; ++n) CHECK_EQ(acl_host_inject_fault("aclrtMalloc", n, 207001), 0);
  const std::string e = calling_thread_error<std::runtime_error>("triton_oom", h, s, 1024, 1, uint64_t(1) << 20,
                                                                 LockLayout{});  // 1 GiB of workspace
  check_message(__FILE__, __LINE__, e,
                {"npu_launch_resources: kernel 'triton_oom': 1073742335 bytes for its locks and workspace: ",
                 "NPU out of memory. Tried to allocate 1.00 GiB (NPU 0;"});
  const Blocks b = blocks();
  CHECK_EQ(b.requests, 0);
  CHECK_EQ(b.retries, 1);  // the allocator tried to make room first
  CHECK_EQ(b.live, 0);
  acl_host_reset();  // the faults torch_npu's allocator did not reach
  check_clean_failure_and_queue_alive(s);
}

// The device refuses an allocation with a code of the test's (the double's aclrtMalloc, torch_npu's
// aclrtMallocAlign32): torch_npu's allocator throws its error, and the helper rethrows its text whole.
TEST_CASE(injected_allocator_failure_is_rethrown_with_its_text) {
  aclrtStream own = fresh_stream(8);  // no block cached: the allocator asks the device
  aclrtFuncHandle h = probe("triton_a", 16, 64);
  for (uint64_t n = 1; n <= 4; ++n)  // ACL_ERROR_BAD_ALLOC, past torch_npu's retry (its second request)
    CHECK_EQ(acl_host_inject_fault("aclrtMalloc", n, 200000), 0);
  const std::string e = calling_thread_error<std::runtime_error>("triton_a", h, own, 1, 1, 64, legacy(2, 7));
  check_message(__FILE__, __LINE__, e,
                {"npu_launch_resources: kernel 'triton_a': 1087 bytes for its locks and "
                 "workspace: ",
                 "error code is 200000"});
  CHECK_EQ(blocks().live, 0);
  acl_host_reset();  // the faults torch_npu's allocator did not reach
  check_clean_failure_and_queue_alive(stream(0));
}

// The lambda's failure stops torch_npu's queue (as a failed operator does): the child's last case ("!").
TEST_CASE_QUEUES(fill_failure_on_queue_thread_returns_its_code_with_one_log_line, "1!") {
  aclrtStream s = stream(0);
  aclrtFuncHandle h = probe("triton_f", 16, 64);
  CHECK_EQ(acl_host_inject_fault("aclrtMemsetAsync", 1, 507011), 0);
  bool threw = false;
  Launch L;
  try {
    L = generated_launch("triton_f", h, s, 1, 1, 1, 1, 64, legacy(2, 7));
  } catch (const std::exception &) {
    threw = true;
  }
  // the lambda runs on torch_npu's queue thread (its queue then stops: no drain); 60 s only bounds a hang
  for (int i = 0; i < 60000 && L.rc->load() == -1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!threw);  // the calling thread saw nothing: the failure is the lambda's
  CHECK(L.ran_on->load() != 0 && L.ran_on->load() != tid());  // on torch_npu's queue thread
  CHECK_EQ(L.rc->load(), 507011);
  CHECK_EQ(L.id->load(), 0u);            // nothing launched
  std::vector<std::string> ours, queue;  // the helper's line; torch_npu's queue's own about the failed task
  for (const std::string &m : error_logs()) (m.rfind("npu_launch_resources:", 0) == 0 ? ours : queue).push_back(m);
  CHECK_EQ(ours.size(), 1u);
  CHECK_EQ(ours[0], std::string("npu_launch_resources: kernel 'triton_f': aclrtMemsetAsync of lock bytes "
                                "[0, +16) failed: 507011"));
  bool queue_saw_it = false;  // 2.7.1.post10: "[PTA]:Custom hand fail! name=triton_f, ret=507011"
  for (const std::string &m : queue)
    queue_saw_it = queue_saw_it || (m.find("triton_f") != std::string::npos && m.find("507011") != std::string::npos);
  CHECK(queue_saw_it);
  sync(s);
  // torch_npu reports the failed task once, to the first call that reaches its queue after its thread set the failed
  // status (docs/facts.md): taken here (60 s only bounds a hang), so that the give-back meets a queue that drops
  // what it is given, as every later call's does
  bool reported = false;
  for (int i = 0; i < 60000 && !reported; ++i) {
    try {
      c10_npu::npuSynchronizeDevice(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (const std::exception &) {
      reported = true;
    }
  }
  CHECK(reported);
  CHECK_EQ(KeptBlocks::all().give_back(true), 1u);  // its event is queued behind the failed lambda
  CHECK_EQ(blocks().live, 0);
}

TEST_CASE(a_later_fill_failure_stops_at_that_fill) {
  // legacy(2, 0x1234): a zero fill, then two byte runs per slot; the third fill fails.
  aclrtStream s = stream(0);
  CHECK_EQ(acl_host_inject_fault("aclrtMemsetAsync", 3, 507899), 0);
  const OnStream current(s);
  LaunchMemory m("triton_late", s, 1, 1, 1, 1, 0, legacy(2, 0x1234));
  CHECK_EQ(m.regions().write_locks("triton_late", s), 507899);
  m.handed();
  CHECK_EQ(settle_held(), 1u);  // what the allocator's callback does
  CHECK_EQ(blocks().live, 0);
  CHECK_EQ(counters().memsets, 2u);
  auto logs = error_logs();
  CHECK_EQ(logs.size(), 1u);
  check_message(__FILE__, __LINE__, logs[0], {"kernel 'triton_late'", "[1, +1)", "507899"});
}
