// Self-tests of the host ACL simulation: it must catch what it claims to.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;
using Clock = std::chrono::steady_clock;

TEST_CASE(device_memory_is_not_host_accessible) {
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  pid_t pid = fork();
  if (pid == 0) {
    volatile char c = *static_cast<volatile char *>(d);
    (void)c;
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st));
  CHECK_EQ(aclrtFree(d), ACL_SUCCESS);
}

TEST_CASE(uninitialised_read_detected) {
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  aclrtFuncHandle h = probe("reader", 64, 0);
  int32_t grid[3] = {1, 1, 1};
  uint64_t id = launch(h, stream(0), d, nullptr, 1, grid);
  sync(stream(0));
  CHECK(!record(id).locks_readable);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kUninitialisedRead), 1u);
  // after a memset the same read is clean
  acl_sim::clear_errors();
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, stream(0)), ACL_SUCCESS);
  id = launch(h, stream(0), d, nullptr, 1, grid);
  sync(stream(0));
  CHECK(record(id).locks_readable);
  CHECK_EQ(acl_sim::errors().size(), 0u);
}

TEST_CASE(use_after_free_and_out_of_bounds_detected) {
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(static_cast<char *>(d) + 32, 64, 0, 64, stream(0)), ACL_SUCCESS);  // past the end
  sync(stream(0));
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kOutOfBounds), 1u);
  CHECK_EQ(aclrtFree(d), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, stream(0)), ACL_SUCCESS);
  sync(stream(0));
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kUseAfterFree), 1u);
  CHECK(aclrtFree(d) != ACL_SUCCESS);  // double free refused
}

TEST_CASE(stale_pinned_source_detected) {
  aclrtFuncHandle slow = probe("slow", 0, 0, 50000);
  int32_t grid[3] = {1, 1, 1};
  void *d = nullptr, *h = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMallocHost(&h, 64), ACL_SUCCESS);
  launch(slow, stream(0), nullptr, nullptr, 1, grid);
  CHECK_EQ(aclrtMemcpyAsync(d, 64, h, 64, ACL_MEMCPY_HOST_TO_DEVICE, stream(0)), ACL_SUCCESS);
  CHECK_EQ(aclrtFreeHost(h), ACL_SUCCESS);  // too early: the copy has not run
  sync(stream(0));
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kStalePinnedSource), 1u);
  CHECK_EQ(acl_sim::counters().host_blocking, 1u);  // only the sync above
}

TEST_CASE(pageable_async_copy_completes_on_return) {
  aclrtFuncHandle slow = probe("slow", 0, 0, 300000);
  int32_t grid[3] = {1, 1, 1};
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  std::vector<int64_t> host(8, 5);
  launch(slow, stream(0), nullptr, nullptr, 1, grid);
  auto t0 = Clock::now();
  CHECK_EQ(aclrtMemcpyAsync(d, 64, host.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE, stream(0)), ACL_SUCCESS);
  CHECK(Clock::now() - t0 > std::chrono::milliseconds(100));
  auto c = acl_sim::counters();
  CHECK_EQ(c.pageable_async_copies, 1u);
  CHECK_EQ(c.host_blocking, 1u);
  std::vector<int64_t> back(8, 0);
  CHECK_EQ(aclrtMemcpy(back.data(), 64, d, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK(back == host);
}

TEST_CASE(memcpy_models) {
  aclrtFuncHandle h = probe("runner", 64, 0, 300000);
  int32_t grid[3] = {1, 1, 1};
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, stream(0)), ACL_SUCCESS);
  std::vector<int64_t> host(8, 9);
  // waits: the copy happens after the running kernel, which sees no change
  acl_sim::set_memcpy_model(acl_sim::MemcpyModel::kWaits);
  uint64_t a = launch(h, stream(0), d, nullptr, 1, grid);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto t0 = Clock::now();
  CHECK_EQ(aclrtMemcpy(d, 64, host.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  CHECK(Clock::now() - t0 > std::chrono::milliseconds(100));
  CHECK(record(a).locks_unchanged);
  CHECK_EQ(acl_sim::errors().size(), 0u);
  // immediate: the copy lands while the kernel runs
  acl_sim::set_memcpy_model(acl_sim::MemcpyModel::kImmediate);
  uint64_t b = launch(h, stream(0), d, nullptr, 1, grid);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::vector<int64_t> other(8, 4);
  t0 = Clock::now();
  CHECK_EQ(aclrtMemcpy(d, 64, other.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(150));
  sync(stream(0));
  CHECK(!record(b).locks_unchanged);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kLocksChangedWhileRunning), 1u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kOverlapWithRunningKernel), 1u);
  CHECK_EQ(acl_sim::counters().sync_copies, 2u);
}

TEST_CASE(workspace_allocator_contract) {
  using c10_npu::NPUWorkspaceAllocator::malloc_with_stream;
  aclrtStream s = stream(5);
  c10::DataPtr a = malloc_with_stream(100, s);
  c10::DataPtr b = malloc_with_stream(200, s);  // while a lives
  CHECK(a.get() != nullptr);
  CHECK_EQ(a.get(), b.get());  // one block per stream: aliasing
  c10::DataPtr other = malloc_with_stream(100, stream(6));
  CHECK(other.get() != a.get());
  auto c0 = acl_sim::counters();
  c10::DataPtr fits = malloc_with_stream(size_t(2) << 20, s);  // block = round_up(100 + 32, 2 MiB) = 2 MiB
  CHECK_EQ(fits.get(), a.get());
  CHECK_EQ(acl_sim::counters().allocator_growths, c0.allocator_growths);
  c10::DataPtr bigger = malloc_with_stream((size_t(2) << 20) + 1, s);
  CHECK(bigger.get() != a.get());
  auto c1 = acl_sim::counters();
  CHECK_EQ(c1.allocator_growths - c0.allocator_growths, 1u);
  CHECK_EQ(c1.host_blocking - c0.host_blocking, 1u);
  CHECK_EQ(c1.device_frees - c0.device_frees, 1u);
  CHECK_EQ(c1.live_workspace_dataptrs, 5u);
  c10::DataPtr grown_fits = malloc_with_stream((size_t(4) << 20), s);  // round_up(2 MiB + 1 + 32, 2 MiB) = 4 MiB
  CHECK_EQ(grown_fits.get(), bigger.get());
  CHECK_EQ(acl_sim::counters().allocator_growths, c1.allocator_growths);
  // the old pointer dangles
  CHECK_EQ(aclrtMemsetAsync(a.get(), 64, 0, 64, s), ACL_SUCCESS);
  sync(s);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kUseAfterFree), 1u);
  a.clear();
  CHECK_EQ(acl_sim::counters().live_workspace_dataptrs, 5u);  // 6 live before the clear
}

TEST_CASE(fault_injection_hits_the_nth_call) {
  void *d = nullptr;
  acl_sim::inject_fault("aclrtMalloc", 2, 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  acl_sim::inject_fault("malloc_with_stream", 1, 77);
  CHECK_THROWS(c10_npu::NPUWorkspaceAllocator::malloc_with_stream(64, stream(0)), std::runtime_error, "77");
  CHECK_THROWS(acl_sim::inject_fault("aclrtNoSuchThing", 1, 1), std::invalid_argument, "aclrtNoSuchThing");
}

TEST_CASE(events_track_stream_progress) {
  aclrtFuncHandle slow = probe("slow", 0, 0, 300000);
  int32_t grid[3] = {1, 1, 1};
  aclrtEvent ev = nullptr;
  CHECK_EQ(aclrtCreateEvent(&ev), ACL_SUCCESS);
  aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  CHECK_EQ(aclrtQueryEventStatus(ev, &st), ACL_SUCCESS);
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);  // never recorded
  launch(slow, stream(0), nullptr, nullptr, 1, grid);
  CHECK_EQ(aclrtRecordEvent(ev, stream(0)), ACL_SUCCESS);
  CHECK_EQ(aclrtQueryEventStatus(ev, &st), ACL_SUCCESS);
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY);
  sync(stream(0));
  CHECK_EQ(aclrtQueryEventStatus(ev, &st), ACL_SUCCESS);
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_EQ(aclrtDestroyEvent(ev), ACL_SUCCESS);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
}

TEST_CASE(launch_copies_args_at_call_time_and_runs_every_block) {
  struct Ctx {
    std::atomic<int> blocks{0};
    std::atomic<int32_t> seen{0};
  };
  static Ctx ctx;
  aclrtFuncHandle k = acl_sim::register_kernel(
      "count",
      [](const acl_sim::KernelCall &c) {
        static_cast<Ctx *>(c.user)->blocks++;
        int32_t v;
        std::memcpy(&v, c.args, 4);
        static_cast<Ctx *>(c.user)->seen = v;
      },
      &ctx);
  aclrtFuncHandle slow = probe("slow", 0, 0, 30000);
  int32_t grid[3] = {1, 1, 1};
  launch(slow, stream(0), nullptr, nullptr, 1, grid);
  int32_t arg = 1;
  CHECK_EQ(aclrtLaunchKernelWithHostArgs(k, 5, stream(0), nullptr, &arg, 4, nullptr, 0), ACL_SUCCESS);
  arg = 2;  // after the call: must not be seen
  sync(stream(0));
  CHECK_EQ(ctx.blocks.load(), 5);
  CHECK_EQ(ctx.seen.load(), 1);
}

TEST_CASE(overlap_between_running_kernels_detected) {
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  aclrtFuncHandle h = probe("ws", 0, 4096, 300000);
  int32_t grid[3] = {1, 1, 1};
  uint64_t a = launch(h, stream(0), nullptr, d, 1, grid);
  uint64_t b = launch(h, stream(1), nullptr, d, 1, grid);
  sync_all();
  CHECK(record(a).overlaps_with_running + record(b).overlaps_with_running >= 1);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kOverlapWithRunningKernel) >= 1);
}

TEST_MAIN()
