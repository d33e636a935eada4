// Self-tests of the HOST ACL SIMULATION (a test double and dry-run tool, not
// CANN): it must catch what it claims to. Built without the launch helper.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include "sim_support.h"

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
  using at_npu::native::allocate_workspace;
  aclrtStream s = stream(5);
  at::Tensor a = allocate_workspace(100, s);
  at::Tensor b = allocate_workspace(200, s);  // while a lives
  CHECK(a.defined() && a.data_ptr() != nullptr);
  CHECK_EQ(a.data_ptr(), b.data_ptr());  // one block per stream: aliasing
  at::Tensor other = allocate_workspace(100, stream(6));
  CHECK(other.data_ptr() != a.data_ptr());
  auto c0 = acl_sim::counters();
  at::Tensor fits = allocate_workspace((uint64_t(2) << 20) - 32, s);  // block = round_up(100 + 32, 2 MiB) = 2 MiB
  CHECK_EQ(fits.data_ptr(), a.data_ptr());
  CHECK_EQ(acl_sim::counters().allocator_growths, c0.allocator_growths);
  at::Tensor bigger = allocate_workspace((uint64_t(2) << 20) - 31, s);  // + 32 no longer fits
  CHECK(bigger.data_ptr() != a.data_ptr());
  auto c1 = acl_sim::counters();
  CHECK_EQ(c1.allocator_growths - c0.allocator_growths, 1u);
  CHECK_EQ(c1.host_blocking - c0.host_blocking, 1u);
  CHECK_EQ(c1.device_frees - c0.device_frees, 1u);
  CHECK_EQ(c1.live_workspace_tensors, 5u);
  at::Tensor grown_fits = allocate_workspace(uint64_t(4) << 20, s);  // round_up(2 MiB + 1, 2 MiB) = 4 MiB: 4 MiB + 32 > 4 MiB
  CHECK(grown_fits.data_ptr() != bigger.data_ptr());
  at::Tensor fits_now = allocate_workspace(uint64_t(4) << 20, s);
  CHECK_EQ(fits_now.data_ptr(), grown_fits.data_ptr());
  // the old pointer dangles
  CHECK_EQ(aclrtMemsetAsync(a.data_ptr(), 64, 0, 64, s), ACL_SUCCESS);
  sync(s);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kUseAfterFree), 1u);
  // copies share the reference; releasing only updates statistics
  at::Tensor copy = a;
  CHECK_EQ(acl_sim::counters().live_workspace_tensors, 7u);
  a.reset();
  CHECK_EQ(acl_sim::counters().live_workspace_tensors, 7u);
  copy = at::Tensor();
  CHECK_EQ(acl_sim::counters().live_workspace_tensors, 6u);
  CHECK(!a.defined() && a.data_ptr() == nullptr);
  at::Tensor moved = std::move(b);
  CHECK(!b.defined() && moved.defined());
  CHECK_EQ(acl_sim::counters().live_workspace_dataptrs, acl_sim::counters().live_workspace_tensors);
  // zero bytes: a defined tensor without memory
  at::Tensor none = allocate_workspace(0, s);
  CHECK(none.defined() && none.data_ptr() == nullptr);
}

TEST_CASE(workspace_extents_are_the_requests) {
  using at_npu::native::allocate_workspace;
  aclrtStream s = stream(0);
  at::Tensor t = allocate_workspace(1000, s);
  acl_sim::Extent e;
  CHECK(acl_sim::allocation_extent(static_cast<char *>(t.data_ptr()) + 10, &e));
  CHECK(e.kind == acl_sim::ExtentKind::kWorkspaceRequest);
  CHECK_EQ(e.base, reinterpret_cast<uintptr_t>(t.data_ptr()));
  CHECK_EQ(e.size, 1000u);
  CHECK_EQ(e.block_size, uint64_t(2) << 20);
  const uint64_t seq = acl_sim::last_request_seq();
  at::Tensor u = allocate_workspace(250, s);  // same block, smaller request
  CHECK(acl_sim::allocation_extent(t.data_ptr(), &e));
  CHECK_EQ(e.size, 250u);
  CHECK(acl_sim::allocation_extent(t.data_ptr(), &e, seq));  // as of the first request
  CHECK_EQ(e.size, 1000u);
  // a kernel issued after the 250-byte request that uses 1000 bytes overruns it
  aclrtFuncHandle h = probe("ws1000", 0, 1000);
  int32_t grid[3] = {1, 1, 1};
  uint64_t id = launch(h, s, nullptr, u.data_ptr(), 1, grid);
  sync(s);
  acl_sim::ProbeRecord r = record(id);
  CHECK_EQ(r.workspace_available, 250u);
  CHECK_EQ(r.workspace_overrun, 750u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kRegionOverrun), 1u);
}

static aclError kAllocReturnsNullAlias() { return acl_sim::kAllocReturnsNull; }

TEST_CASE(fault_injection_hits_the_nth_call) {
  void *d = nullptr;
  acl_sim::inject_fault("aclrtMalloc", 2, 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  acl_sim::inject_fault("allocate_workspace", 1, 77);
  CHECK_THROWS(at_npu::native::allocate_workspace(64, stream(0)), acl_sim::OutOfMemoryError, "77", "out of memory");
  acl_sim::inject_fault("malloc_with_stream", 1, kAllocReturnsNullAlias());  // the earlier name still works
  at::Tensor t = at_npu::native::allocate_workspace(64, stream(0));
  CHECK(t.defined() && t.data_ptr() == nullptr);
  CHECK_THROWS(acl_sim::inject_fault("aclrtNoSuchThing", 1, 1), std::invalid_argument, "aclrtNoSuchThing");
  acl_sim::inject_fault("aclmdlRICaptureBegin", 1, 9);
  CHECK_EQ(aclmdlRICaptureBegin(stream(0), ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), 9);
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

// ---------------------------------------------------------------- devices
TEST_CASE(devices_are_per_thread_and_own_their_objects) {
  int32_t d = -1;
  CHECK_EQ(aclrtGetDevice(&d), ACL_SUCCESS);
  CHECK_EQ(d, 0);  // never set: device 0
  CHECK(aclrtSetDevice(acl_sim::device_count()) != ACL_SUCCESS);
  void *mem0 = nullptr, *mem1 = nullptr, *host = nullptr;
  aclrtStream s0 = nullptr, s1 = nullptr;
  aclrtEvent ev0 = nullptr, ev1 = nullptr;
  CHECK_EQ(aclrtMalloc(&mem0, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateStream(&s0), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateEvent(&ev0), ACL_SUCCESS);
  CHECK_EQ(aclrtMallocHost(&host, 256), ACL_SUCCESS);
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  CHECK_EQ(aclrtGetDevice(&d), ACL_SUCCESS);
  CHECK_EQ(d, 1);
  std::thread([] {
    int32_t x = -1;
    aclrtGetDevice(&x);
    CHECK_EQ(x, 0);  // per thread
  }).join();
  CHECK_EQ(aclrtMalloc(&mem1, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateStream(&s1), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateEvent(&ev1), ACL_SUCCESS);
  // an event of device 0 on a device-1 stream
  CHECK_EQ(aclrtRecordEvent(ev0, s1), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_EQ(aclrtRecordEvent(ev1, s1), ACL_SUCCESS);
  // a stream of device 0 while device 1 is current
  CHECK_EQ(aclrtMemsetAsync(mem0, 256, 0, 256, s0), ACL_ERROR_RT_STREAM_CONTEXT);
  // device-0 memory on a device-1 stream
  CHECK_EQ(aclrtMemsetAsync(mem0, 256, 0, 256, s1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_EQ(aclrtMemcpyAsync(mem0, 256, host, 256, ACL_MEMCPY_HOST_TO_DEVICE, s1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_EQ(aclrtMemcpyAsync(mem1, 256, mem0, 256, ACL_MEMCPY_DEVICE_TO_DEVICE, s1), ACL_ERROR_RT_PARAM_INVALID);
  // device memory where host memory belongs
  CHECK_EQ(aclrtMemcpyAsync(mem1, 256, mem1, 256, ACL_MEMCPY_HOST_TO_DEVICE, s1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_EQ(aclrtMemcpyAsync(mem1, 256, host, 256, ACL_MEMCPY_HOST_TO_DEVICE, s1), ACL_SUCCESS);
  // a host buffer is not freed with aclrtFree, nor device memory with aclrtFreeHost
  CHECK(aclrtFree(host) != ACL_SUCCESS);
  CHECK(aclrtFreeHost(mem1) != ACL_SUCCESS);
  sync(s1);
  // a kernel on device 1 touching device-0 memory
  aclrtFuncHandle h = probe("cross", 0, 256);
  int32_t grid[3] = {1, 1, 1};
  uint64_t id = launch(h, s1, nullptr, mem0, 1, grid);
  sync(s1);
  CHECK(!record(id).workspace_written);
  CHECK_EQ(record(id).device, 1);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kCrossDevice), 1u);
  // each device has its own workspace blocks, even for one stream
  at::Tensor w1 = at_npu::native::allocate_workspace(64, s1);
  acl_sim::Extent e;
  CHECK(acl_sim::allocation_extent(w1.data_ptr(), &e));
  CHECK_EQ(e.device, 1);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  at::Tensor w0 = at_npu::native::allocate_workspace(64, s1);  // device 0's allocator, keyed by the stream
  CHECK(w0.data_ptr() != w1.data_ptr());
  CHECK(acl_sim::allocation_extent(w0.data_ptr(), &e));
  CHECK_EQ(e.device, 0);
}

TEST_CASE(device_synchronise_waits_for_its_own_device_only) {
  aclrtFuncHandle slow = probe("slow", 0, 0, 300000);
  int32_t grid[3] = {1, 1, 1};
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  aclrtStream s1 = nullptr;
  CHECK_EQ(aclrtCreateStream(&s1), ACL_SUCCESS);
  launch(slow, s1, nullptr, nullptr, 1, grid);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  auto t0 = Clock::now();
  sync_all();
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(150));
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  sync_all();
  CHECK(Clock::now() - t0 > std::chrono::milliseconds(200));
}

// ---------------------------------------------------------------- graph capture
TEST_CASE(capture_records_and_replay_runs) {
  aclrtStream s = stream(0);
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  aclrtFuncHandle h = probe("cap", 64, 0);
  int32_t grid[3] = {2, 1, 1};
  aclmdlRICaptureStatus st = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
  aclmdlRI m = nullptr;
  CHECK_EQ(aclmdlRICaptureGetInfo(s, &st, &m), ACL_SUCCESS);
  CHECK_EQ(st, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
  CHECK_EQ(aclmdlRICaptureEnd(s, &m), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_RT_STREAM_CAPTURED);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, s), ACL_SUCCESS);
  uint64_t id = launch(h, s, d, nullptr, 2, grid);
  CHECK_EQ(aclmdlRICaptureGetInfo(s, &st, &m), ACL_SUCCESS);
  CHECK_EQ(st, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
  CHECK(m != nullptr);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK_EQ(model, m);
  CHECK_EQ(acl_sim::model_task_count(model), 2u);
  sync(s);
  CHECK_EQ(acl_sim::probe_records().size(), 0u);  // captured, not run
  CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
  sync(s);  // one replay at a time: two at once share the captured memory (the simulation says so)
  CHECK_EQ(aclmdlRIExecuteAsync(model, stream(1)), ACL_SUCCESS);
  sync(stream(1));
  auto reps = replays_of(id);
  CHECK_EQ(reps.size(), 2u);
  for (const auto &r : reps) {
    CHECK(r.launch_id != id);
    CHECK_EQ(r.lock_slots_at_start.size(), 8u);
    CHECK_EQ(r.distinct_lock_values.size(), 1u);
  }
  CHECK_EQ(acl_sim::counters().replays, 2u);
  CHECK_EQ(acl_sim::counters().live_models, 1u);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(captured_copy_rereads_its_host_source_at_replay) {
  aclrtStream s = stream(0);
  void *d = nullptr, *h = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMallocHost(&h, 64), ACL_SUCCESS);
  std::memset(h, 1, 64);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL), ACL_SUCCESS);
  CHECK_EQ(aclrtMemcpyAsync(d, 64, h, 64, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  std::memset(h, 7, 64);  // the replay sees this, not the bytes at capture time
  CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
  sync(s);
  uint8_t back[64];
  CHECK_EQ(aclrtMemcpy(back, 64, d, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK_EQ(int(back[0]), 7);
  CHECK_EQ(aclrtFreeHost(h), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIExecuteAsync(model, s), ACL_SUCCESS);
  sync(s);
  CHECK_EQ(acl_sim::counters().stale_replay_sources, 1u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kStalePinnedSource), 1u);
  // a pageable copy cannot be captured
  std::vector<uint8_t> pageable(64, 3);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  CHECK_EQ(aclrtMemcpyAsync(d, 64, pageable.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE, s),
           ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
}

TEST_CASE(event_record_or_device_sync_invalidates_capture) {
  aclrtStream s = stream(0);
  aclrtEvent ev = nullptr;
  CHECK_EQ(aclrtCreateEvent(&ev), ACL_SUCCESS);
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
  aclmdlRICaptureStatus st = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  CHECK_EQ(aclmdlRICaptureGetInfo(s, &st, nullptr), ACL_SUCCESS);
  CHECK_EQ(st, ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, s), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
  CHECK(model == nullptr);
  // a device synchronise while another stream captures
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
  CHECK_EQ(aclrtSynchronizeDevice(), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
  // the workspace allocator growing (it synchronises the device) during a capture
  using at_npu::native::allocate_workspace;
  at::Tensor first = allocate_workspace(64, stream(2));
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  at::Tensor fits = allocate_workspace(128, stream(2));  // fits: fine
  CHECK_THROWS(allocate_workspace(uint64_t(8) << 20, stream(2)), std::runtime_error, "107030");
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
  CHECK_EQ(acl_sim::counters().captures_invalidated, 3u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kCaptureInvalidated), 3u);
  // another device's synchronise does not touch this device's capture
  CHECK_EQ(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  std::thread([] {
    aclrtSetDevice(1);
    CHECK_EQ(aclrtSynchronizeDevice(), ACL_SUCCESS);
  }).join();
  CHECK_EQ(aclmdlRICaptureEnd(s, &model), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
}

// ---------------------------------------------------------------- aclAppLog
TEST_CASE(app_log_records_messages) {
  ACL_APP_LOG(ACL_ERROR, "kernel %s: %s failed with %d", "k1", "aclrtMemsetAsync", 507899);
  aclAppLog(ACL_INFO, "f", "file.cpp", 3, "plain");
  auto v = acl_sim::app_logs();
  CHECK_EQ(v.size(), 2u);
  CHECK_EQ(v[0].level, ACL_ERROR);
  CHECK_EQ(v[0].message, std::string("kernel k1: aclrtMemsetAsync failed with 507899"));
  CHECK(v[0].file.find("test_sim.cpp") != std::string::npos);
  CHECK_EQ(v[1].func, std::string("f"));
  CHECK_EQ(acl_sim::counters().app_logs, 2u);
  acl_sim::clear_app_logs();
  CHECK_EQ(acl_sim::app_logs().size(), 0u);
}

// ---------------------------------------------------------------- torch_npu task queue
using at_npu::native::OpCommand;

TEST_CASE(task_queue_runs_later_in_order_on_the_device_thread) {
  acl_sim::set_task_queue_enabled(true);
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  static std::vector<int> order;
  static std::mutex mu;
  const std::thread::id me = std::this_thread::get_id();
  for (int i = 0; i < 20; ++i) {
    OpCommand::RunOpApiV2("op" + std::to_string(i), [i, me]() -> int {
      int32_t d = -1;
      aclrtGetDevice(&d);
      std::lock_guard<std::mutex> g(mu);
      order.push_back(std::this_thread::get_id() != me && d == 1 ? i : -1);
      return 0;
    });
  }
  acl_sim::drain_task_queues();
  CHECK_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) CHECK_EQ(order[i], i);
  auto tasks = acl_sim::op_tasks();
  CHECK_EQ(tasks.size(), 20u);
  CHECK(tasks[3].queued && tasks[3].ran && tasks[3].rc == 0 && tasks[3].device == 1);
}

TEST_CASE(failing_task_poisons_the_queue_like_torch_npu) {
  acl_sim::set_task_queue_enabled(true);
  static std::atomic<int> ran{0};
  OpCommand::RunOpApiV2("slow_ok", []() -> int {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ran++;
    return 0;
  });
  OpCommand::RunOpApiV2("thrower", []() -> int { throw std::runtime_error("boom"); });
  OpCommand::RunOpApiV2("queued_behind", []() -> int {
    ran++;
    return 0;
  });
  acl_sim::drain_task_queues();
  CHECK_EQ(ran.load(), 1);
  CHECK(acl_sim::task_queue_status(0) == acl_sim::QueueStatus::kErrorExit);
  CHECK(acl_sim::task_queue_error(0).find("thrower") != std::string::npos);
  auto tasks = acl_sim::op_tasks();
  CHECK(tasks[1].ran && tasks[1].exception_escaped && tasks[1].rc == ACL_ERROR_INVALID_PARAM);
  CHECK_EQ(tasks[1].exception_what, std::string("boom"));
  CHECK(!tasks[2].ran && tasks[2].dropped);
  // the next call reports the error, later ones are dropped silently
  CHECK_THROWS(OpCommand::RunOpApiV2("next", []() -> int { return 0; }), std::runtime_error, "thrower",
               "The Inner error is reported as above");
  OpCommand::RunOpApiV2("later", []() -> int {
    ran++;
    return 0;
  });
  acl_sim::drain_task_queues();
  CHECK_EQ(ran.load(), 1);
  tasks = acl_sim::op_tasks();
  CHECK(tasks[3].dropped && tasks[3].threw_at_call && tasks[4].dropped && !tasks[4].threw_at_call);
  CHECK(acl_sim::task_queue_status(0) == acl_sim::QueueStatus::kCanExit);
  // a non-zero return code does the same
  acl_sim::reset_task_queues();
  OpCommand::RunOpApiV2("returns_code", []() -> int { return 507899; });
  acl_sim::drain_task_queues();
  CHECK(acl_sim::task_queue_status(0) == acl_sim::QueueStatus::kErrorExit);
  CHECK_EQ(acl_sim::op_tasks().back().rc, 507899);
  CHECK(!acl_sim::op_tasks().back().exception_escaped);
  acl_sim::reset_task_queues();
}

TEST_CASE(queue_off_runs_on_the_caller_thread_and_throws_on_failure) {
  acl_sim::set_task_queue_enabled(false);
  const std::thread::id me = std::this_thread::get_id();
  static bool same = false;
  OpCommand::RunOpApiV2("inline", [me]() -> int {
    same = std::this_thread::get_id() == me;
    return 0;
  });
  CHECK(same);
  CHECK_THROWS(OpCommand::RunOpApiV2("bad", []() -> int { return 100000; }), std::runtime_error, "bad", "100000");
  CHECK_THROWS(OpCommand::RunOpApiV2("thr", []() -> int { throw std::logic_error("x"); }), std::logic_error, "x");
  auto tasks = acl_sim::op_tasks();
  CHECK_EQ(tasks.size(), 3u);
  CHECK(!tasks[0].queued && tasks[0].ran);
  CHECK(tasks[1].rc == 100000 && tasks[1].threw_at_call && !tasks[1].exception_escaped);
  CHECK(tasks[2].exception_escaped);
  acl_sim::set_task_queue_enabled(true);
}

// ---------------------------------------------------------------- torch_npu's caching allocator
namespace ca = c10_npu::NPUCachingAllocator;

TEST_CASE(caching_allocator_reuses_a_block_only_for_the_same_stream_and_pool) {
  aclrtStream s1 = stream(7), s2 = stream(8);
  acl_sim::reset_counters();
  void *a = ca::raw_alloc_with_stream(1000, s1);
  ca::raw_delete(a);
  void *b = ca::raw_alloc_with_stream(900, s2);  // free block of s1 fits, but another stream
  CHECK(b != a);
  void *c = ca::raw_alloc_with_stream(1000, s1);  // s1 again: its block
  CHECK_EQ(c, a);
  void *d = ca::raw_alloc_with_stream(1000, s1);  // held: a new one
  CHECK(d != a);
  CHECK_EQ(ca::raw_alloc_with_stream(0, s1), nullptr);
  auto cn = acl_sim::counters();
  CHECK_EQ(cn.caching_requests, 4u);  // the 0-byte request is not one
  CHECK_EQ(cn.live_caching_allocations, 3u);
  CHECK_EQ(cn.peak_live_caching_allocations, 3u);
  for (void *p : {b, c, d}) ca::raw_delete(p);
  CHECK_THROWS(ca::raw_delete(c), std::runtime_error, "invalid device pointer");  // twice
  int host = 0;
  CHECK_THROWS(ca::raw_delete(&host), std::runtime_error, "invalid device pointer");
  // a capture's pool is its own: eager blocks of the stream are not handed to it, nor back
  CHECK_EQ(aclmdlRICaptureBegin(s1, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  void *g = ca::raw_alloc_with_stream(1000, s1);
  CHECK(g != a && g != d);
  CHECK(ca::hasCapturesUnderway(0));
  ca::raw_delete(g);
  aclmdlRI m = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(s1, &m), ACL_SUCCESS);
  CHECK(!ca::hasCapturesUnderway(0));
  void *e = ca::raw_alloc_with_stream(1000, s1);
  CHECK(e != g);
  ca::raw_delete(e);
  CHECK_EQ(acl_sim::counters().graph_pool_requests, 1u);
  acl_sim::Extent x;
  CHECK(acl_sim::allocation_extent(g, &x) && !x.freed);
  CHECK_EQ(aclmdlRIDestroy(m), ACL_SUCCESS);
  CHECK(acl_sim::allocation_extent(g, &x) && x.freed);
}

TEST_CASE(empty_cache_frees_only_free_blocks_after_a_device_synchronise) {
  aclrtStream s = stream(0);
  void *held = ca::raw_alloc_with_stream(4096, s);
  void *freed = ca::raw_alloc_with_stream(8192, s);
  ca::raw_delete(freed);
  at::Tensor ws = at_npu::native::allocate_workspace(4096, s);  // the workspace allocator's block: freed anyway
  void *ws_ptr = ws.data_ptr();
  acl_sim::reset_counters();
  acl_sim::empty_cache();
  auto c = acl_sim::counters();
  CHECK(c.device_synchronizations >= 1);
  CHECK_EQ(c.workspace_empty_caches, 1u);
  acl_sim::Extent e;
  CHECK(acl_sim::allocation_extent(held, &e) && !e.freed);
  CHECK(acl_sim::allocation_extent(freed, &e) && e.freed);
  CHECK(acl_sim::allocation_extent(ws_ptr, &e) && e.freed);  // NPUWorkspaceAllocator: live tensor or not
  CHECK_EQ(acl_sim::caching_cached_blocks(0), 0u);
  ca::raw_delete(held);
}

TEST_CASE(out_of_memory_retry_synchronises_frees_cached_blocks_and_retries) {
  aclrtStream s = stream(0), other = stream(1);
  acl_sim::set_device_memory_capacity(0, acl_sim::device_memory_in_use(0) + (uint64_t(16) << 20));
  void *x = ca::raw_alloc_with_stream(uint64_t(12) << 20, other);
  ca::raw_delete(x);  // cached for `other`
  acl_sim::reset_counters();
  void *y = ca::raw_alloc_with_stream(uint64_t(8) << 20, s);  // 4 MiB free: only the retry makes room
  auto c = acl_sim::counters();
  CHECK(y != nullptr);
  CHECK_EQ(c.caching_oom_retries, 1u);
  CHECK_EQ(c.device_synchronizations, 1u);
  acl_sim::Extent e;
  CHECK(acl_sim::allocation_extent(x, &e) && e.freed);
  // still too much after the retry: torch_npu's error
  CHECK_THROWS(ca::raw_alloc_with_stream(uint64_t(12) << 20, s), acl_sim::OutOfMemoryError,
               "NPU out of memory. Tried to allocate 12.00 MiB (NPU 0; ", " total capacity; 8.00 MiB already allocated;",
               "reserved in total by PyTorch).If reserved memory is >> allocated memory try setting max_split_size_mb");
  CHECK_EQ(acl_sim::counters().caching_oom_retries, 2u);
  ca::raw_delete(y);
  CHECK_NO_SIM_ERRORS();
}

TEST_CASE(synchronise_from_a_queue_thread_is_a_self_wait) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0), other = stream(1);
  // npuSynchronizeDevice itself, from a task the queue runs
  OpCommand::RunOpApiV2("syncs", []() -> int {
    acl_sim::npu_synchronize_device();
    return 0;
  });
  acl_sim::drain_task_queues();
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kSelfWait), 1u);
  // the out-of-memory retry of an allocation made on the queue thread (b45157f's capture path did)
  acl_sim::set_device_memory_capacity(0, acl_sim::device_memory_in_use(0) + (uint64_t(16) << 20));
  void *x = ca::raw_alloc_with_stream(uint64_t(12) << 20, other);
  ca::raw_delete(x);
  OpCommand::RunOpApiV2("allocates", [s]() -> int {
    void *p = ca::raw_alloc_with_stream(uint64_t(8) << 20, s);
    ca::raw_delete(p);
    return 0;
  });
  acl_sim::drain_task_queues();
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kSelfWait), 2u);
  bool named = false;
  for (const auto &e : acl_sim::errors())
    named = named || e.message.find("out-of-memory retry") != std::string::npos;
  CHECK(named);
  const auto c = acl_sim::counters();
  CHECK_EQ(c.caching_allocs_on_queue_threads, 1u);
  CHECK_EQ(c.caching_frees_on_queue_threads, 1u);
  // from the calling thread the same retry is fine
  acl_sim::clear_errors();
  void *z = ca::raw_alloc_with_stream(uint64_t(12) << 20, other);
  void *w = ca::raw_alloc_with_stream(uint64_t(1) << 20, s);
  ca::raw_delete(z);
  ca::raw_delete(w);
  void *v = ca::raw_alloc_with_stream(uint64_t(8) << 20, s);
  ca::raw_delete(v);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kSelfWait), 0u);
}

TEST_CASE(no_out_of_memory_retry_while_a_capture_is_underway) {
  aclrtStream s = stream(0), other = stream(1), cs = stream(2);
  acl_sim::set_device_memory_capacity(0, acl_sim::device_memory_in_use(0) + (uint64_t(16) << 20));
  void *x = ca::raw_alloc_with_stream(uint64_t(12) << 20, other);  // cached for another stream
  ca::raw_delete(x);
  CHECK_EQ(aclmdlRICaptureBegin(cs, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
  acl_sim::reset_counters();
  CHECK_THROWS(ca::raw_alloc_with_stream(uint64_t(8) << 20, s), acl_sim::OutOfMemoryError, "NPU out of memory");
  CHECK_EQ(acl_sim::counters().caching_oom_retries, 0u);
  CHECK_EQ(acl_sim::counters().captures_invalidated, 0u);
  aclmdlRI m = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(cs, &m), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIDestroy(m), ACL_SUCCESS);
}

TEST_CASE(device_capacity_bounds_every_allocator) {
  acl_sim::set_device_memory_capacity(1, uint64_t(4) << 20);
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  aclrtStream s = nullptr;
  CHECK_EQ(aclrtCreateStream(&s), ACL_SUCCESS);
  void *p = nullptr;
  CHECK_EQ(aclrtMalloc(&p, uint64_t(8) << 20, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_BAD_ALLOC);
  CHECK_THROWS(at_npu::native::allocate_workspace(uint64_t(6) << 20, s), acl_sim::OutOfMemoryError,
               "NPUWorkspaceAllocator tried to allocate");
  CHECK_EQ(aclrtMalloc(&p, uint64_t(1) << 20, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(acl_sim::device_memory_in_use(1), uint64_t(1) << 20);
  CHECK_EQ(aclrtFree(p), ACL_SUCCESS);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
}

// ---------------------------------------------------------------- test controls
TEST_CASE(paused_queue_holds_tasks_until_resumed) {
  acl_sim::set_task_queue_enabled(true);
  static std::atomic<int> ran{0};
  acl_sim::set_task_queues_paused(true);
  for (int i = 0; i < 3; ++i)
    OpCommand::RunOpApiV2("held", []() -> int {
      ran++;
      return 0;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_EQ(ran.load(), 0);
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  CHECK_EQ(ran.load(), 3);
}

TEST_CASE(on_call_hook_runs_before_the_nth_call) {
  aclrtStream s = stream(0);
  void *p = nullptr;
  CHECK_EQ(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  static std::atomic<uint64_t> memsets_seen{0};
  memsets_seen = 0;
  acl_sim::reset_counters();
  acl_sim::on_call("aclrtMemsetAsync", 2, [] { memsets_seen = acl_sim::counters().memsets; });
  for (int i = 0; i < 3; ++i) CHECK_EQ(aclrtMemsetAsync(p, 64, 0, 64, s), ACL_SUCCESS);
  CHECK_EQ(memsets_seen.load(), 1u);  // ran before the second call counted
  sync(s);
  CHECK_EQ(aclrtFree(p), ACL_SUCCESS);
}

// ---------------------------------------------------------------- torch_npu's own operators
TEST_CASE(torch_npu_op_takes_its_workspace_on_the_queue_thread) {
  acl_sim::set_task_queue_enabled(true);
  aclrtStream s = stream(0);
  static std::atomic<int> hook_device{-2};
  acl_sim::TorchNpuOp op;
  op.stream = s;
  op.workspace_bytes = 4096;
  op.inside_workspace_allocator = [] { hook_device = acl_sim::task_queue_device_of_this_thread(); };
  acl_sim::reset_counters();
  acl_sim::run_torch_npu_op(op);
  acl_sim::drain_task_queues();
  sync(s);
  CHECK_EQ(hook_device.load(), 0);  // inside allocate_workspace, on device 0's queue thread
  auto c = acl_sim::counters();
  CHECK_EQ(c.allocator_requests, 1u);
  CHECK_EQ(c.launches, 1u);
  CHECK_EQ(c.live_workspace_tensors, 0u);  // dropped when the lambda returned
  CHECK(acl_sim::op_tasks().back().queued && acl_sim::op_tasks().back().rc == 0);
  // a thread entering the map meanwhile is a race
  acl_sim::TorchNpuOp racing = op;
  aclrtStream s1 = stream(1);
  racing.inside_workspace_allocator = [s1] {
    std::thread([s1] { (void)at_npu::native::allocate_workspace(64, s1); }).join();
  };
  acl_sim::run_torch_npu_op(racing);
  acl_sim::drain_task_queues();
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kAllocatorRace) >= 1);
}

TEST_MAIN()
