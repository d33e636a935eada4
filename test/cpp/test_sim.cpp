// Self-tests of the HOST ACL SIMULATION (a test double and dry-run tool, not
// CANN): it must catch what it claims to. Built without the launch helper.
#include <signal.h>
#include <sys/wait.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "sim_support.h"

using namespace t;
using Clock = std::chrono::steady_clock;

static bool completed(aclrtEvent ev) {
  aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  CHECK_EQ(aclrtQueryEventStatus(ev, &st), ACL_SUCCESS);
  return st == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}
// An event recorded on `s` after the work queued on it so far: whether a call waited for that work is then an
// order (the event completed first), not a time limit a loaded machine can miss. Its first query is made here
// (it answers NOT_READY, as CANN's first query after a record does): later ones say whether the stream reached it.
static aclrtEvent record_after(aclrtStream s) {
  aclrtEvent ev = nullptr;
  CHECK_EQ(aclrtCreateEvent(&ev), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  CHECK(!completed(ev));
  return ev;
}

// A gate on a stream: a kernel that waits on the stream's thread until the test opens it, so that work queued
// after it is "not reached yet" by construction. `passed` says the worker got past the gate (and so past all
// that was queued before it).
struct Gate {
  std::atomic<bool> open{false}, passed{false};
  aclrtFuncHandle kernel = nullptr;
  Gate() {
    kernel = acl_sim::register_kernel(
        "gate",
        [](const acl_sim::KernelCall &c) {
          auto *g = static_cast<Gate *>(c.user);
          while (!g->open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          g->passed = true;
        },
        this);
  }
  void close_on(aclrtStream s) {
    open = false;
    passed = false;
    CHECK_EQ(aclrtLaunchKernelWithHostArgs(kernel, 1, s, nullptr, nullptr, 0, nullptr, 0), ACL_SUCCESS);
  }
  // Opens it and waits for the worker to get past it (a wait for an order, bounded only against a hang).
  void open_and_pass() {
    open = true;
    for (int i = 0; i < 60000 && !passed.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(passed.load());
  }
};

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

// A synchronous aclrtMemcpy copies at once, as CANN's runtime does (hicann/runtime api_impl.cc:2745-2774: through
// the driver, no stream waited for): it returns while a kernel queued before it still runs, and that kernel sees its
// locks change. The kernel stays running until the test lets it go (its execute hook, after the probe's start
// checks), so "while it runs" and "returned first" are orders, not times.
struct Running {
  std::atomic<bool> started{false}, go{false};
};
TEST_CASE(a_synchronous_copy_does_not_wait_for_streams) {
  static Running run;  // the kernel's context: registered kernels live as long as the process
  run.started = false;
  run.go = false;
  acl_sim::ProbeConfig c;
  c.name = "runner";
  c.lock_bytes = 64;
  c.own_args_bytes = 12;  // one pointer + one int32 of the kernel's own (sim_support.h's probe)
  c.execute = [](const acl_sim::KernelCall &, const acl_sim::ProbeRecord &, void *ctx) {
    auto *r = static_cast<Running *>(ctx);
    r->started = true;
    // bounded only against a hang: a copy that waited for this kernel would wait out the bound, then be caught below
    for (int i = 0; i < 60000 && !r->go.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  c.execute_ctx = &run;
  aclrtFuncHandle h = acl_sim::register_probe_kernel(c);
  int32_t grid[3] = {1, 1, 1};
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, stream(0)), ACL_SUCCESS);
  uint64_t b = launch(h, stream(0), d, nullptr, 1, grid);
  struct LetGo {  // a failing check lets the kernel end, so that the stream drains for the cases after this one
    Running &r;
    ~LetGo() { r.go = true; }
  } let_go{run};
  aclrtEvent b_done = record_after(stream(0));
  // the kernel has read its locks and runs (bounded only against a hang)
  for (int i = 0; i < 60000 && !run.started.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(run.started.load());
  std::vector<int64_t> other(8, 4);
  CHECK_EQ(aclrtMemcpy(d, 64, other.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  CHECK(!completed(b_done));  // returned while the kernel still ran: it waited for no stream
  run.go = true;
  sync(stream(0));
  CHECK(completed(b_done));
  CHECK_EQ(aclrtDestroyEvent(b_done), ACL_SUCCESS);
  CHECK(!record(b).locks_unchanged);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kLocksChangedWhileRunning), 1u);
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kOverlapWithRunningKernel), 1u);
  std::vector<int64_t> back(8, 0);
  CHECK_EQ(aclrtMemcpy(back.data(), 64, d, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK(back == other);  // the copy landed
  auto n = acl_sim::counters();
  CHECK_EQ(n.sync_copies, 2u);
  CHECK_EQ(n.host_blocking, 3u);  // the two copies and the stream synchronisation
}

TEST_CASE(fault_injection_hits_the_nth_call) {
  void *d = nullptr;
  acl_sim::inject_fault("aclrtMalloc", 2, 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), 123);
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
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
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY);  // never recorded: CANN's aclrtCreateEvent event is not ready
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

// CANN (event.cc:515-584, event_task.cc:48-80, :204-233): a record is a task on its stream, and the event is
// "recorded" once the device reported that task done. The double: a record is reached only when its stream's
// worker ran it, even on an idle stream; the first query of a record answers NOT_READY whatever the worker did
// meanwhile (so no verdict depends on which thread ran first); a later query answers whether it was reached; an
// event, stream or device synchronisation waits for it and makes it known complete.
TEST_CASE(a_record_is_a_task_of_its_stream) {
  aclrtStream s = stream(0);
  static Gate gate;
  aclrtEvent ev = nullptr, ev2 = nullptr;
  CHECK_EQ(aclrtCreateEvent(&ev), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateEvent(&ev2), ACL_SUCCESS);
  // An idle stream: the worker certainly ran the record (it is past the gate behind it), yet the first query
  // after the record finds it not reached; the second finds it reached.
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  gate.close_on(s);
  gate.open_and_pass();
  CHECK(!completed(ev));
  CHECK(completed(ev));
  CHECK(completed(ev));
  // Each record starts afresh.
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  gate.close_on(s);
  gate.open_and_pass();
  CHECK(!completed(ev));
  CHECK(completed(ev));
  // Behind a closed gate: not reached, however often asked; aclrtEventElapsedTime does not wait for it.
  gate.close_on(s);
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  CHECK(!completed(ev));
  CHECK(!completed(ev));
  CHECK(!completed(ev));
  float ms = -1.0f;
  CHECK_EQ(aclrtEventElapsedTime(&ms, ev, ev), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);
  gate.open_and_pass();
  // Each synchronisation makes the records it covers known complete: the next query, first or not, says so
  // (aclrtSynchronizeEvent, a host library call: test/test_host_acl.py).
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK(completed(ev));
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  CHECK_EQ(aclrtSynchronizeDevice(), ACL_SUCCESS);
  CHECK(completed(ev));
  CHECK_EQ(aclrtEventElapsedTime(&ms, ev, ev), ACL_SUCCESS);
  CHECK_EQ(ms, 0.0f);
  // Another stream's synchronisation says nothing of this one's records.
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  gate.close_on(s);
  gate.open_and_pass();
  CHECK_EQ(aclrtRecordEvent(ev2, stream(1)), ACL_SUCCESS);
  CHECK_EQ(aclrtSynchronizeStream(stream(1)), ACL_SUCCESS);
  CHECK(completed(ev2));
  CHECK(!completed(ev));
  CHECK(completed(ev));
  // Destroying an event whose record is not reached yet: the stream still runs its record, the handle is gone.
  gate.close_on(s);
  CHECK_EQ(aclrtRecordEvent(ev, s), ACL_SUCCESS);
  CHECK_EQ(aclrtDestroyEvent(ev), ACL_SUCCESS);
  aclrtEventRecordedStatus st;
  CHECK_EQ(aclrtQueryEventStatus(ev, &st), ACL_ERROR_RT_INVALID_HANDLE);
  gate.open_and_pass();
  sync(s);
  CHECK_EQ(aclrtDestroyEvent(ev2), ACL_SUCCESS);
  CHECK_EQ(acl_sim::counters().live_events, 0u);
  CHECK_NO_SIM_ERRORS();
}

// CANN: a device has a limited number of event ids; aclrtCreateEvent's event takes a new one at each record before
// the previous one goes back (once its record is reached), and a destroyed event's goes back once its record is
// reached. At the limit a record fails with ACL_ERROR_RT_NO_EVENT_RESOURCE (acl_sim/control.h). The limit is per
// device, lowered here; the default is CANN's 65535.
TEST_CASE(event_ids_are_limited_per_device) {
  aclrtStream s = stream(0);
  static Gate gate;
  acl_sim::set_event_id_limit(0, 2);
  aclrtEvent e1 = nullptr, e2 = nullptr, e3 = nullptr;
  CHECK_EQ(aclrtCreateEvent(&e1), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateEvent(&e2), ACL_SUCCESS);
  CHECK_EQ(aclrtCreateEvent(&e3), ACL_SUCCESS);  // creating takes none
  CHECK_EQ(acl_sim::event_ids_in_use(0), 0u);
  gate.close_on(s);
  CHECK_EQ(aclrtRecordEvent(e1, s), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(e2, s), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_ERROR_RT_NO_EVENT_RESOURCE);
  CHECK_EQ(aclrtRecordEvent(e1, s), ACL_ERROR_RT_NO_EVENT_RESOURCE);  // the new id comes before the old goes
  gate.open_and_pass();
  CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK_EQ(acl_sim::event_ids_in_use(0), 2u);  // reached, still each event's own
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_ERROR_RT_NO_EVENT_RESOURCE);
  CHECK_EQ(aclrtDestroyEvent(e2), ACL_SUCCESS);  // its record was reached: its id is back
  CHECK_EQ(acl_sim::event_ids_in_use(0), 1u);
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_SUCCESS);
  // a destroyed event whose record is not reached keeps its id until the stream reaches it
  acl_sim::set_event_id_limit(0, 3);
  CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);  // e3's record reached
  gate.close_on(s);
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_SUCCESS);  // the previous record, reached, gives its id back
  CHECK_EQ(acl_sim::event_ids_in_use(0), 2u);
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_SUCCESS);  // the previous record, behind the gate, keeps its id
  CHECK_EQ(acl_sim::event_ids_in_use(0), 3u);
  CHECK_EQ(aclrtRecordEvent(e3, s), ACL_ERROR_RT_NO_EVENT_RESOURCE);
  CHECK_EQ(aclrtDestroyEvent(e3), ACL_SUCCESS);
  CHECK_EQ(acl_sim::event_ids_in_use(0), 3u);  // both of its records are behind the gate
  gate.open_and_pass();
  CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK_EQ(acl_sim::event_ids_in_use(0), 1u);
  // per device: device 1 has its own
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  acl_sim::set_event_id_limit(1, 1);
  aclrtStream s1 = nullptr;
  CHECK_EQ(aclrtCreateStream(&s1), ACL_SUCCESS);
  aclrtEvent f = nullptr;
  CHECK_EQ(aclrtCreateEvent(&f), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(f, s1), ACL_SUCCESS);
  CHECK_EQ(aclrtRecordEvent(f, s1), ACL_ERROR_RT_NO_EVENT_RESOURCE);
  CHECK_EQ(aclrtDestroyEvent(f), ACL_SUCCESS);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  // the default: CANN's 65535 per device, far beyond what ordinary runs keep
  acl_sim::reset();
  CHECK_EQ(aclrtRecordEvent(e1, s), ACL_SUCCESS);
  CHECK_EQ(aclrtDestroyEvent(e1), ACL_SUCCESS);
  sync(s);
  CHECK_EQ(acl_sim::event_ids_in_use(0), 0u);
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
  aclrtEvent slow_done = record_after(s1);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  sync_all();
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  CHECK(!completed(slow_done));  // device 0's synchronisation returned before device 1's kernel finished
  sync_all();
  CHECK(completed(slow_done));
  CHECK_EQ(aclrtDestroyEvent(slow_done), ACL_SUCCESS);
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

// ---------------------------------------------------------------- device capacity
// A settable device memory per device bounds aclrtMalloc (torch_npu's own allocators, which allocate through it, on
// the real runtime: test/test_real_runtime.py's threads-oom-retry and queue-thread-oom-retry).
TEST_CASE(device_capacity_bounds_device_allocations) {
  acl_sim::set_device_memory_capacity(1, uint64_t(4) << 20);
  CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
  void *p = nullptr;
  CHECK_EQ(aclrtMalloc(&p, uint64_t(8) << 20, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
  CHECK_EQ(aclrtMalloc(&p, uint64_t(1) << 20, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(acl_sim::device_memory_in_use(1), uint64_t(1) << 20);
  void *q = nullptr;
  CHECK_EQ(aclrtMalloc(&q, uint64_t(3) << 20, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);  // up to the capacity
  void *r = nullptr;
  CHECK_EQ(aclrtMalloc(&r, 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
  CHECK_EQ(aclrtFree(q), ACL_SUCCESS);
  CHECK_EQ(aclrtFree(p), ACL_SUCCESS);
  CHECK_EQ(acl_sim::device_memory_in_use(1), 0u);
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
}

// ---------------------------------------------------------------- torch_npu's stand-ins: streams, caching allocator
// What the launch harness, the release matrix's simulation columns and the AOT host still run on (the stand-ins'
// users, acl_sim/README.md): the thread's current stream and the caching allocator's rule for a block with a use
// recorded on a stream, as torch_npu v2.7.1 has them (NPUStream.cpp, NPUCachingAllocator.cpp).
namespace ca = c10_npu::NPUCachingAllocator;

static acl_sim::CachingBlocks blocks_of(int device = 0) { return acl_sim::caching_blocks(device); }

TEST_CASE(current_stream_is_the_threads_own_per_device_and_a_real_stream) {
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);  // cases before it in one process may leave another current
  const c10_npu::NPUStream first = c10_npu::getCurrentNPUStream();
  CHECK(first == c10_npu::getCurrentNPUStream(0));
  CHECK(first.stream(false) != nullptr);  // the device's default stream: a stream of the double, not its null one
  void *d = nullptr;
  CHECK_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK_EQ(aclrtMemsetAsync(d, 64, 0, 64, first.stream(false)), ACL_SUCCESS);
  sync(first.stream(false));
  const c10_npu::NPUStream one = c10_npu::getCurrentNPUStream(1);
  CHECK_EQ(int(one.device_index()), 1);
  CHECK(one != first);
  std::vector<c10_npu::NPUStream> pool;
  for (int i = 0; i < 33; ++i) pool.push_back(c10_npu::getNPUStreamFromPool());
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < i; ++j) CHECK(pool[i] != pool[j]);  // 32 streams, round robin
  CHECK(pool[32] == pool[0]);
  const c10_npu::NPUStream high = c10_npu::getStreamFromPool(true, 0);
  for (const auto &s : pool) CHECK(high != s);
  c10_npu::setCurrentNPUStream(pool[3]);
  CHECK(c10_npu::getCurrentNPUStream() == pool[3]);
  CHECK(c10_npu::getCurrentNPUStream(1) == one);                                // per device
  std::thread([&] { CHECK(c10_npu::getCurrentNPUStream() == first); }).join();  // per thread
  c10_npu::setCurrentNPUStream(first);
  CHECK_THROWS(c10_npu::getCurrentNPUStream(static_cast<c10::DeviceIndex>(acl_sim::device_count())), std::runtime_error,
               "Invalid device_index");
  CHECK_EQ(aclrtFree(d), ACL_SUCCESS);
}

// A block freed with a use recorded on a stream (the helper's kept block as it goes back) gets an event on that
// stream and is handed out again only once the event completed, checked at a later request; without a recorded use
// it is free at once. The allocator's own event: the one record here.
TEST_CASE(a_block_freed_with_a_recorded_use_waits_for_its_event) {
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);  // cases before it in one process may leave another current
  acl_sim::set_task_queue_enabled(false);
  const OnPoolStream on;
  CHECK_EQ(ca::get()->name(), std::string("native"));
  CHECK(ca::get()->allocate(0).get() == nullptr);
  StreamGate gate(on.stream());
  c10::DataPtr plain = ca::get()->allocate(4096);
  void *const q = plain.get();
  plain.clear();  // no use recorded: free at once, even while the stream is held
  CHECK(ca::get()->allocate(4096).get() == q);
  const acl_sim::CachingBlocks b0 = blocks_of();
  const uint64_t recorded0 = acl_sim::counters().events_recorded;
  c10::DataPtr used = ca::get()->allocate(4096);
  void *const p = used.get();
  ca::recordStream(used, on.npu());
  used.get_deleter()(used.release_context());  // as the helper gives a kept block back
  CHECK_EQ(acl_sim::counters().events_recorded - recorded0, 1u);
  CHECK_EQ(blocks_of().allocated, b0.allocated);
  CHECK_EQ(blocks_of().active, b0.active + 1);  // freed, waiting for its event
  c10::DataPtr other = ca::get()->allocate(4096);
  CHECK(other.get() != p);  // its event has not completed: not handed out
  gate.open();
  sync(on.stream());
  c10::DataPtr again = ca::get()->allocate(4096);
  CHECK(again.get() == p);  // this request saw the event complete
  CHECK_EQ(blocks_of().active, b0.active + 2);
  CHECK_EQ(acl_sim::counters().events_recorded - recorded0, 1u);
  CHECK_NO_SIM_ERRORS();
}

// torch.npu.empty_cache() and the allocator's out-of-memory retry synchronise the outstanding events before they free
// the cached blocks: a block waiting for its event is freed by them, not left behind (device 5, used by no other case).
TEST_CASE(empty_cache_and_the_out_of_memory_retry_free_blocks_behind_their_events) {
  acl_sim::set_task_queue_enabled(false);
  constexpr int kDevice = 5;
  constexpr size_t kBlock = 768 << 10;
  CHECK_EQ(aclrtSetDevice(kDevice), ACL_SUCCESS);
  CHECK_EQ(acl_sim::device_memory_in_use(kDevice), 0u);
  acl_sim::set_device_memory_capacity(kDevice, 1 << 20);  // room for one block
  {
    const OnPoolStream on(kDevice);
    {  // empty_cache: the block's event synchronised, then the block freed to the device
      StreamGate gate(on.stream());
      c10::DataPtr a = ca::get()->allocate(kBlock);
      ca::recordStream(a, on.npu());
      a.clear();
      CHECK_EQ(blocks_of(kDevice).active, 1u);
      gate.open();
      acl_sim::empty_cache();
      CHECK_EQ(blocks_of(kDevice).active, 0u);
      CHECK_EQ(acl_sim::device_memory_in_use(kDevice), 0u);
    }
    // the retry: a second block fits only once the first, waiting for its event, is freed. The stream is held until
    // the retry began (its counter, an order, not a time), then the retry's synchronisation waits for it.
    StreamGate gate(on.stream());
    c10::DataPtr a = ca::get()->allocate(kBlock);
    ca::recordStream(a, on.npu());
    a.clear();
    const uint64_t retries0 = acl_sim::counters().caching_oom_retries;
    std::thread opener([&] {
      while (acl_sim::counters().caching_oom_retries == retries0) std::this_thread::yield();
      gate.open();
    });
    c10::DataPtr b;
    try {
      b = ca::get()->allocate(kBlock);
    } catch (...) {
      gate.open();
      opener.join();
      throw;
    }
    opener.join();
    CHECK(b.get() != nullptr);
    CHECK_EQ(acl_sim::counters().caching_oom_retries - retries0, 1u);
    CHECK_EQ(blocks_of(kDevice).active, 1u);
    CHECK_EQ(acl_sim::device_memory_in_use(kDevice), uint64_t(kBlock));
  }
  acl_sim::empty_cache();
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  CHECK_NO_SIM_ERRORS();
}

// While a capture is underway on the device no event is recorded (a query would end a global-mode capture): a block
// freed then waits, and its event is recorded at the first request after the capture, for the uses recorded before
// it only (a use recorded during the capture is dropped: the graph orders it).
TEST_CASE(no_event_while_a_capture_is_underway_then_only_for_uses_from_before_it) {
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);  // cases before it in one process may leave another current
  acl_sim::set_task_queue_enabled(false);
  const OnPoolStream on;
  aclrtStream capturing = c10_npu::getNPUStreamFromPool().stream(false);
  const acl_sim::CachingBlocks b0 = blocks_of();
  c10::DataPtr before = ca::get()->allocate(4096);
  ca::recordStream(before, on.npu());
  const uint64_t recorded0 = acl_sim::counters().events_recorded;
  CHECK_EQ(aclmdlRICaptureBegin(capturing, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
  CHECK(ca::hasCapturesUnderway(0));
  before.clear();
  c10::DataPtr during = ca::get()->allocate(4096);
  CHECK(during.get() != nullptr);
  ca::recordStream(during, on.npu());
  during.clear();
  CHECK_EQ(acl_sim::counters().events_recorded, recorded0);  // none while capturing
  CHECK_EQ(blocks_of().active, b0.active + 2);
  aclmdlRI model = nullptr;
  CHECK_EQ(aclmdlRICaptureEnd(capturing, &model), ACL_SUCCESS);
  CHECK_EQ(aclmdlRIDestroy(model), ACL_SUCCESS);
  c10::DataPtr x = ca::get()->allocate(4096);  // the deferred events now: one, for `before`'s use
  CHECK_EQ(acl_sim::counters().events_recorded - recorded0, 1u);
  sync(on.stream());
  c10::DataPtr y = ca::get()->allocate(4096);
  CHECK_EQ(blocks_of().active, b0.active + 2);  // x and y: both freed blocks are back in the pool
  CHECK_EQ(acl_sim::counters().events_recorded - recorded0, 1u);
  CHECK_NO_SIM_ERRORS();
}

// With torch_npu's task queue on, the allocator's record is a task of the queue: until the queue thread made it, the
// event is not complete (NPUEvent::query), whatever the stream did.
TEST_CASE(a_record_through_the_task_queue_completes_only_once_the_queue_made_it) {
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);  // cases before it in one process may leave another current
  acl_sim::set_task_queue_enabled(true);
  const OnPoolStream on;
  sync(on.stream());
  acl_sim::set_task_queues_paused(true);
  c10::DataPtr a = ca::get()->allocate(4096);
  void *const p = a.get();
  ca::recordStream(a, on.npu());
  const uint64_t recorded0 = acl_sim::counters().events_recorded;
  a.clear();
  CHECK_EQ(acl_sim::counters().events_recorded, recorded0);  // queued, not made
  c10::DataPtr b = ca::get()->allocate(4096);
  CHECK(b.get() != p);
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  CHECK_EQ(acl_sim::counters().events_recorded - recorded0, 1u);
  sync(on.stream());
  c10::DataPtr c = ca::get()->allocate(4096);
  CHECK(c.get() == p);
  acl_sim::set_task_queue_enabled(false);
  CHECK_NO_SIM_ERRORS();
}

// At a cache miss the allocator runs every registered free-memory callback, then searches its pool again: a block the
// callback freed serves the request. A Register while a cache miss reads the registry is a data race in torch_npu
// (c10's Registry locks Register only): reported.
static std::atomic<bool> g_callback_armed{false};
static std::atomic<int> g_callback_runs{0};
static c10::DataPtr g_callback_block;
struct TestCallback final : ca::FreeMemoryCallback {
  bool Execute() override {
    if (!g_callback_armed.load()) return false;
    g_callback_runs++;
    if (g_callback_runs == 2)  // the second miss registers meanwhile
      ca::FreeNPUMemoryCallbacksRegistry()->Register("test_sim_late", [] { return std::make_unique<TestCallback>(); });
    const bool freed = g_callback_block.get() != nullptr;
    g_callback_block.clear();
    return freed;
  }
};
TEST_CASE(a_cache_miss_runs_the_free_memory_callbacks_then_searches_again) {
  CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);  // cases before it in one process may leave another current
  acl_sim::set_task_queue_enabled(false);
  static const bool registered = [] {
    ca::FreeNPUMemoryCallbacksRegistry()->Register("test_sim", [] { return std::make_unique<TestCallback>(); });
    return true;
  }();
  (void)registered;
  const OnPoolStream on;
  g_callback_armed = true;
  g_callback_runs = 0;
  g_callback_block = ca::get()->allocate(1 << 20);  // a miss: the callback ran (nothing to free yet)
  void *const p = g_callback_block.get();
  CHECK_EQ(g_callback_runs.load(), 1);
  c10::DataPtr hit = ca::get()->allocate(1 << 20);  // the pool has no free block: a miss, the callback frees p
  CHECK(hit.get() == p);
  CHECK_EQ(g_callback_runs.load(), 2);
  hit.clear();
  c10::DataPtr cached = ca::get()->allocate(1 << 20);  // a hit: no callback
  CHECK_EQ(g_callback_runs.load(), 2);
  g_callback_armed = false;
  CHECK_EQ(acl_sim::errors().size(), 1u);  // the second callback's Register, and nothing else
  CHECK_EQ(acl_sim::error_count(acl_sim::ErrorKind::kAllocatorRace), 1u);
}

// ---------------------------------------------------------------- test controls
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

TEST_MAIN()
