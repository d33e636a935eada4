// HOST SIMULATION scenarios (test double; not torch_npu): graph capture,
// threads, memory pressure and torch_npu's own operators against the
// simulated torch_npu allocators (issues 17 and 22). Each runs launches the
// way the generated launcher does and reports the ACL code of every step (in
// the order they ran, replays included), the simulation's error reports and
// whether the kernels saw the lock content they need.
//
// Launches as launch_codegen.launcher_source writes them: LaunchMemory on the
// calling thread, only its LaunchRegions copied into the lambda handed to
// OpCommand::RunOpApiV2 (LaunchDone in it records the block's event), the
// block handed over right after that call returns (release_when_finished) and
// given back once its kernel has finished. Built against an earlier helper, the tooling
// defines how that helper launches: ACL_SIM_SCENARIO_IN_LAMBDA (commit
// b45157f: acquire_launch_resources inside the lambda) or
// ACL_SIM_SCENARIO_RELEASE_ONCE_QUEUED (commit 698f526: release() right after
// the queue call).
//
// Used by `python -m torch_npu._inductor.patchset launcher --scenario NAME`
// (tooling/commands/launcher.py) and by test/cpp/test_capture_threads.cpp. Define
// ACL_SIM_SCENARIO_HELPER to another helper's header path to build against it.
#pragma once

#ifdef ACL_SIM_SCENARIO_HELPER
#include ACL_SIM_SCENARIO_HELPER
#else
#include <npu_launch_resources.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "acl_sim/control.h"
#include "lock_layouts.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace acl_sim_scenarios {

using torch_npu::inductor::LockLayout;

struct Step {
  std::string what;
  int acl_code = 0;
  std::string detail;  // the exception text of a call that threw
  int replay = -1;     // a replay: its index in Result::replays
};
struct Replay {
  std::string graph;
  int index = 0;
  int acl_code = 0;      // aclmdlRIExecuteAsync, then the stream's synchronise
  int kernels_seen = 0;  // probe records of this replay (1: its kernel ran)
  bool lock_content_ok = true;
};
struct Result {
  std::string name;
  std::string helper_way;  // how launches take their memory
  std::vector<Step> steps;  // in the order they ran
  std::vector<Replay> replays;
  std::vector<std::string> sim_errors;
  std::vector<std::string> notes;
  bool ok = false;
};

// A kernel of the scenario: its probe and what it asks of the helper.
struct Kernel {
  std::string name;
  aclrtFuncHandle handle = nullptr;
  uint32_t blocks = 1;
  uint64_t workspace_per_block = 0;
  LockLayout locks;
};

inline Kernel kernel(const std::string &name, uint32_t blocks, uint64_t workspace_per_block, const LockLayout &locks,
                     uint32_t run_us = 200) {
  Kernel k;
  k.name = name;
  k.blocks = blocks;
  k.workspace_per_block = workspace_per_block;
  k.locks = locks;
  acl_sim::ProbeConfig c;
  c.name = name;
  c.lock_bytes = expected_locks(locks, blocks).size() * 8;
  c.workspace_bytes = workspace_per_block * blocks;
  c.sim_time_us = run_us;
  c.own_args_bytes = 0;
  k.handle = acl_sim::register_probe_kernel(c);
  return k;
}

// The packed argument struct [locks, workspace, grid] and the launch.
inline int launch_kernel(aclrtFuncHandle h, uint32_t blocks, aclrtStream stream, void *locks, void *workspace,
                         std::atomic<uint64_t> *launch_id) {
  uint8_t args[28];
  const int32_t grid[3] = {int32_t(blocks), 1, 1};
  std::memcpy(args, &locks, 8);
  std::memcpy(args + 8, &workspace, 8);
  std::memcpy(args + 16, grid, 12);
  const aclError rc = aclrtLaunchKernelWithHostArgs(h, blocks, stream, nullptr, args, sizeof args, nullptr, 0);
  if (rc == ACL_SUCCESS) launch_id->store(acl_sim::last_launch_id());
  return rc;
}

struct Pending {  // one launch handed to torch_npu's task queue
  std::shared_ptr<std::atomic<int>> rc = std::make_shared<std::atomic<int>>(-1);
  std::shared_ptr<std::atomic<uint64_t>> id = std::make_shared<std::atomic<uint64_t>>(0);
  bool threw = false;  // on the calling thread (sizes, the allocator, a poisoned queue)
  std::string error;
};

#ifdef ACL_SIM_SCENARIO_IN_LAMBDA
inline const char *helper_way() { return "memory taken inside the launch lambda (acquire_launch_resources)"; }
// The launcher of commit b45157f: everything inside the lambda.
inline Pending submit(const Kernel &k, aclrtStream stream) {
  Pending p;
  auto rc = p.rc;
  auto id = p.id;
  try {
    at_npu::native::OpCommand::RunOpApiV2(k.name, [k, stream, rc, id]() -> int {
      torch_npu::inductor::LaunchResources res;
      aclError r = torch_npu::inductor::acquire_launch_resources(k.name.c_str(), stream, k.blocks, 1, 1, k.blocks,
                                                                 k.workspace_per_block, k.locks, &res);
      if (r == ACL_SUCCESS) r = launch_kernel(k.handle, k.blocks, stream, res.locks(), res.workspace(), id.get());
      rc->store(r);
      return r;
    });
  } catch (const std::exception &e) {
    p.threw = true;
    p.error = e.what();
  }
  return p;
}
#else
#ifdef ACL_SIM_SCENARIO_RELEASE_ONCE_QUEUED
inline const char *helper_way() {
  return "memory taken on the calling thread (LaunchMemory), raw pointers in the lambda, released once queued";
}
#define ACL_SIM_SCENARIO_LAMBDA_DONE(regions)
#define ACL_SIM_SCENARIO_HAND_OVER(memory) memory.release()
#else
inline const char *helper_way() {
  return "memory taken on the calling thread (LaunchMemory), raw pointers in the lambda, held until its kernel "
         "finished";
}
#define ACL_SIM_SCENARIO_LAMBDA_DONE(regions) const torch_npu::inductor::LaunchDone done{regions.held, stream};
#define ACL_SIM_SCENARIO_HAND_OVER(memory) memory.release_when_finished()
#endif
// The generated launcher: memory on this thread, the regions into the lambda, handed over once queued.
inline Pending submit(const Kernel &k, aclrtStream stream) {
  Pending p;
  auto rc = p.rc;
  auto id = p.id;
  try {
    torch_npu::inductor::LaunchMemory memory(k.name.c_str(), stream, k.blocks, 1, 1, k.blocks, k.workspace_per_block,
                                             k.locks);
    const torch_npu::inductor::LaunchRegions regions = memory.regions();
    const std::string name = k.name;
    const aclrtFuncHandle h = k.handle;
    const uint32_t blocks = k.blocks;
    at_npu::native::OpCommand::RunOpApiV2(k.name, [regions, name, h, blocks, stream, rc, id]() -> int {
      ACL_SIM_SCENARIO_LAMBDA_DONE(regions)
      aclError r = regions.write_locks(name.c_str(), stream);
      if (r == ACL_SUCCESS) r = launch_kernel(h, blocks, stream, regions.locks, regions.workspace, id.get());
      rc->store(r);
      return r;
    });
    ACL_SIM_SCENARIO_HAND_OVER(memory);
  } catch (const std::exception &e) {
    p.threw = true;
    p.error = e.what();
  }
  return p;
}
#endif

inline int code_of(const Pending &p) {
  if (p.threw) return ACL_ERROR_INTERNAL_ERROR;
  return p.rc->load();
}

// One launch, waited for (the queues drained) and recorded as a step.
inline uint64_t launch(Result &out, const std::string &what, const Kernel &k, aclrtStream stream) {
  Pending p = submit(k, stream);
  acl_sim::drain_task_queues();
  out.steps.push_back({what, code_of(p), p.error});
  return p.id->load();
}

inline void step(Result &out, const std::string &what, aclError rc, const std::string &detail = "") {
  out.steps.push_back({what, rc, detail});
}

inline void replay(Result &out, const std::string &graph, int index, aclmdlRI model, aclrtStream stream) {
  Replay r;
  r.graph = graph;
  r.index = index;
  r.acl_code = aclmdlRIExecuteAsync(model, stream);
  if (r.acl_code == ACL_SUCCESS) r.acl_code = aclrtSynchronizeStream(stream);
  out.replays.push_back(r);
  Step s;
  s.what = graph + ": replay #" + std::to_string(index);
  s.acl_code = r.acl_code;
  s.replay = int(out.replays.size()) - 1;
  out.steps.push_back(s);
}

// Checks every replay's kernel (captured launch `captured`) against the content it needs: the
// probe records of the replays, in launch order, belong to this graph's replays in order.
inline void check_replays(Result &out, const std::string &graph, uint64_t captured, const Kernel &k) {
  const std::vector<int64_t> want = expected_locks(k.locks, k.blocks);
  std::vector<acl_sim::ProbeRecord> recs;
  for (const acl_sim::ProbeRecord &rec : acl_sim::probe_records())
    if (captured != 0 && rec.captured_launch_id == captured) recs.push_back(rec);
  std::sort(recs.begin(), recs.end(),
            [](const acl_sim::ProbeRecord &a, const acl_sim::ProbeRecord &b) { return a.launch_id < b.launch_id; });
  size_t next = 0;
  int runs = 0;
  for (Replay &r : out.replays) {
    if (r.graph != graph) continue;
    ++runs;
    r.kernels_seen = 0;
    r.lock_content_ok = false;
    if (r.acl_code != ACL_SUCCESS || next >= recs.size()) continue;
    const acl_sim::ProbeRecord &rec = recs[next++];
    r.kernels_seen = 1;
    r.lock_content_ok = rec.lock_slots_at_start == want && rec.locks_unchanged && rec.access_errors == 0;
  }
  if (captured == 0) out.notes.push_back(graph + ": no launch was captured");
  if (recs.size() != size_t(runs))
    out.notes.push_back(graph + ": " + std::to_string(recs.size()) + " replayed kernels for " + std::to_string(runs) +
                        " replays");
}

// An eager launch's kernel got the content it needs.
inline void check_eager(Result &out, const std::string &what, uint64_t id, const Kernel &k) {
  acl_sim::ProbeRecord rec;
  if (id == 0 || !acl_sim::probe_record(id, &rec)) {
    out.notes.push_back(what + ": its kernel did not run");
  } else if (rec.lock_slots_at_start != expected_locks(k.locks, k.blocks) || !rec.locks_unchanged ||
             rec.access_errors != 0) {
    out.notes.push_back(what + ": its kernel got the wrong lock content or a bad region");
  }
}

inline aclrtStream new_stream(Result &out) {
  aclrtStream s = nullptr;
  step(out, "aclrtCreateStream", aclrtCreateStream(&s));
  return s;
}

// Captures one launch of `k` on `stream` (global mode, as torch.npu.graph):
// capture begin, the launch through the queue, the queue drained (torch_npu
// drains it at capture end), capture end. Returns the captured launch's id.
inline uint64_t capture_one(Result &out, const std::string &graph, const Kernel &k, aclrtStream stream,
                            aclmdlRI *model) {
  step(out, graph + ": aclmdlRICaptureBegin", aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  const uint64_t id = launch(out, graph + ": captured launch", k, stream);
  *model = nullptr;
  step(out, graph + ": aclmdlRICaptureEnd", aclmdlRICaptureEnd(stream, model));
  return id;
}

inline void empty_cache_step(Result &out, const std::string &what) {
  try {
    acl_sim::empty_cache();
    step(out, what, ACL_SUCCESS);
  } catch (const std::exception &e) {
    step(out, what, ACL_ERROR_INTERNAL_ERROR, e.what());
  }
}

// Waits (up to 10 s) for `flag`; false on timeout.
inline bool wait_for(const std::atomic<bool> &flag) {
  for (int i = 0; i < 10000 && !flag.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return flag.load();
}

// ---- the scenarios --------------------------------------------------------------------
// Capture one launch, then a bigger eager launch and a torch_npu operator
// whose bigger workspace grows the stream's workspace block (torch_npu syncs
// the device and frees the old block), replay: the graph must not use memory
// that was freed or handed to someone else.
inline void capture_then_grow(Result &out) {
  aclrtStream s = new_stream(out);
  Kernel small = kernel("triton_small", 4, 1024, packed(1, 1));
  Kernel big = kernel("triton_big", 8, uint64_t(1) << 20, packed(0, 0));
  launch(out, "warm-up (eager)", small, s);
  aclmdlRI g = nullptr;
  const uint64_t id = capture_one(out, "graph", small, s, &g);
  launch(out, "bigger eager launch on the capture stream", big, s);
  acl_sim::TorchNpuOp op;
  op.name = "torch_npu operator (workspace 8 MiB)";
  op.stream = s;
  op.workspace_bytes = uint64_t(8) << 20;
  acl_sim::run_torch_npu_op(op);
  acl_sim::drain_task_queues();
  step(out, "torch_npu operator with an 8 MiB workspace on the capture stream (its workspace block grows)",
       aclrtSynchronizeStream(s));
  for (int i = 0; i < 2; ++i) replay(out, "graph", i + 1, g, s);
  check_replays(out, "graph", id, small);
  if (g != nullptr) step(out, "aclmdlRIDestroy", aclmdlRIDestroy(g));
}

// Capture, then torch.npu.empty_cache() (frees every workspace block and the cached blocks), replay.
inline void capture_then_empty_cache(Result &out) {
  aclrtStream s = new_stream(out);
  Kernel k = kernel("triton_k", 4, 4096, legacy(4, 0));
  launch(out, "warm-up (eager)", k, s);
  aclmdlRI g = nullptr;
  const uint64_t id = capture_one(out, "graph", k, s, &g);
  launch(out, "eager launch after the capture", k, s);
  empty_cache_step(out, "torch.npu.empty_cache()");
  for (int i = 0; i < 2; ++i) replay(out, "graph", i + 1, g, s);
  check_replays(out, "graph", id, k);
  if (g != nullptr) step(out, "aclmdlRIDestroy", aclmdlRIDestroy(g));
}

// Two graphs captured one after the other on the one capture stream (as
// torch.npu.graph's default capture stream and the graph trees do), then
// replayed at the same time on two streams: each must have memory of its own.
inline void two_graphs_one_stream(Result &out) {
  aclrtStream capture_stream = new_stream(out), r1 = new_stream(out), r2 = new_stream(out);
  Kernel a = kernel("triton_a", 4, 2048, packed(1, 0), 3000);
  Kernel b = kernel("triton_b", 4, 2048, packed(1, 1), 3000);
  launch(out, "graph A warm-up (eager)", a, capture_stream);
  aclmdlRI ga = nullptr, gb = nullptr;
  const uint64_t ida = capture_one(out, "graph A", a, capture_stream, &ga);
  launch(out, "graph B warm-up (eager)", b, capture_stream);
  const uint64_t idb = capture_one(out, "graph B", b, capture_stream, &gb);
  for (int i = 0; i < 2; ++i) {  // both in flight at once
    Replay ra{"graph A", i + 1}, rb{"graph B", i + 1};
    ra.acl_code = aclmdlRIExecuteAsync(ga, r1);
    rb.acl_code = aclmdlRIExecuteAsync(gb, r2);
    if (ra.acl_code == ACL_SUCCESS) ra.acl_code = aclrtSynchronizeStream(r1);
    if (rb.acl_code == ACL_SUCCESS) rb.acl_code = aclrtSynchronizeStream(r2);
    for (const Replay &r : {ra, rb}) {
      out.replays.push_back(r);
      Step s;
      s.what = r.graph + ": replay #" + std::to_string(r.index) + " (A and B at once, on two streams)";
      s.acl_code = r.acl_code;
      s.replay = int(out.replays.size()) - 1;
      out.steps.push_back(s);
    }
  }
  check_replays(out, "graph A", ida, a);
  check_replays(out, "graph B", idb, b);
  if (ga != nullptr) step(out, "aclmdlRIDestroy A", aclmdlRIDestroy(ga));
  if (gb != nullptr) step(out, "aclmdlRIDestroy B", aclmdlRIDestroy(gb));
}

// One stream captures in global mode while eager launches with non-zero
// lock content run on another stream of the same device: nothing may query
// or record an event, or allocate or free page-locked memory, until the
// capture ends (it would invalidate it); the eager kernels still get their
// content. (b45157f's helper keeps a cache of page-locked lock images: a
// cache of one entry makes it want to evict during the capture.)
inline void global_capture_other_stream(Result &out) {
#ifdef ACL_SIM_SCENARIO_IN_LAMBDA
  torch_npu::inductor::set_pinned_cache_limits(1, uint64_t(1) << 20);
#endif
  aclrtStream cs = new_stream(out), eager = new_stream(out);
  Kernel captured = kernel("triton_captured", 2, 512, legacy(4, 0));
  std::vector<Kernel> eager_kernels;
  for (int v = 1; v <= 4; ++v) eager_kernels.push_back(kernel("triton_eager_" + std::to_string(v), 2, 0, legacy(4, v)));
  launch(out, "eager launch before the capture (lock content 1)", eager_kernels[0], eager);
  launch(out, "eager launch before the capture (lock content 2)", eager_kernels[1], eager);
  launch(out, "warm-up of the captured kernel", captured, cs);
  aclmdlRI g = nullptr;
  step(out, "graph: aclmdlRICaptureBegin", aclmdlRICaptureBegin(cs, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  const uint64_t id = launch(out, "graph: captured launch", captured, cs);
  std::vector<uint64_t> eager_ids;
  for (int i = 0; i < 4; ++i)
    eager_ids.push_back(launch(out, "eager launch on another stream during the capture (lock content " +
                                        std::to_string(i + 1) + ")",
                               eager_kernels[i], eager));
  step(out, "graph: aclmdlRICaptureEnd", aclmdlRICaptureEnd(cs, &g));
  step(out, "aclrtSynchronizeStream (eager)", aclrtSynchronizeStream(eager));
  for (size_t i = 0; i < eager_ids.size(); ++i)
    check_eager(out, "eager launch " + std::to_string(i + 1) + " during the capture", eager_ids[i], eager_kernels[i]);
  for (int i = 0; i < 2; ++i) replay(out, "graph", i + 1, g, cs);
  check_replays(out, "graph", id, captured);
  launch(out, "eager launch after the capture", eager_kernels[0], eager);
  step(out, "aclrtSynchronizeStream (eager)", aclrtSynchronizeStream(eager));
#ifdef ACL_SIM_SCENARIO_IN_LAMBDA
  (void)torch_npu::inductor::trim_pinned_cache();  // deferred housekeeping catches up
  if (torch_npu::inductor::trim_pinned_cache() != 0) out.notes.push_back("retired lock images still wait after trim");
#endif
  if (g != nullptr) step(out, "aclmdlRIDestroy", aclmdlRIDestroy(g));
}

// Two devices' queue threads, then four threads with the task queue off
// (two devices, two streams each), launch at once; sizes vary. The
// workspace allocator's pointer map has no lock: launches must never be in
// it at once.
inline void devices_threads_queue_off(Result &out) {
  acl_sim::set_allocator_race_window_us(50);
  std::vector<Kernel> ks;
  for (int i = 0; i < 4; ++i) ks.push_back(kernel("triton_t" + std::to_string(i), 2, 4096u << i, legacy(2, 0), 20));
  aclrtStream streams[2][2] = {};
  for (int d = 0; d < 2; ++d) {
    step(out, "aclrtSetDevice", aclrtSetDevice(d));
    for (int j = 0; j < 2; ++j) streams[d][j] = new_stream(out);
  }
  // Phase 1: task queue on, launches for devices 0 and 1 interleaved (one queue thread each).
  acl_sim::set_task_queue_enabled(true);
  std::vector<Pending> pending;
  for (int i = 0; i < 24; ++i) {
    const int d = i % 2;
    aclrtSetDevice(d);
    pending.push_back(submit(ks[(i / 2) % 4], streams[d][0]));
  }
  acl_sim::drain_task_queues();
  int failed = 0;
  for (const Pending &p : pending) failed += code_of(p) != ACL_SUCCESS;
  step(out, "queue on: 24 launches on 2 devices' queue threads (" + std::to_string(failed) + " failed)",
       failed ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
  // Phase 2: task queue off, four threads launch on their own stream.
  acl_sim::set_task_queue_enabled(false);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int d = t % 2;
      aclrtSetDevice(d);
      for (int i = 0; i < 12; ++i) {
        Pending p = submit(ks[(t + i) % 4], streams[d][t / 2]);
        if (code_of(p) != ACL_SUCCESS) bad++;
      }
      if (aclrtSynchronizeStream(streams[d][t / 2]) != ACL_SUCCESS) bad++;
    });
  }
  for (std::thread &th : threads) th.join();
  step(out, "queue off: 4 threads x 12 launches (" + std::to_string(bad.load()) + " failed)",
       bad.load() ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
  acl_sim::set_task_queue_enabled(true);
  acl_sim::set_allocator_race_window_us(0);
  aclrtSetDevice(0);
}

// Device memory is full of blocks cached for another stream when a launch
// needs memory: only the caching allocator's out-of-memory retry
// (npuSynchronizeDevice, which drains the task queue, then the cached blocks
// freed) makes room, and only a thread that is not the queue's may run it.
// Taken inside the lambda, the memory is asked for on the queue thread: from
// the workspace allocator, which has no retry, or (while capturing) from the
// caching allocator, whose retry would wait for its own thread.
inline void queue_thread_oom_retry(Result &out) {
  constexpr uint64_t kMiB = uint64_t(1) << 20;
  acl_sim::set_device_memory_capacity(0, 48 * kMiB);
  aclrtStream s = new_stream(out), other = new_stream(out);
  std::vector<void *> tensors;
  std::string detail;
  try {
    for (int i = 0; i < 4; ++i) tensors.push_back(c10_npu::NPUCachingAllocator::raw_alloc_with_stream(10 * kMiB, other));
  } catch (const std::exception &e) {
    detail = e.what();
  }
  for (void *t : tensors) c10_npu::NPUCachingAllocator::raw_delete(t);
  step(out, "40 MiB of tensors on another stream, freed (the caching allocator keeps them cached)",
       tensors.size() == 4 ? ACL_SUCCESS : ACL_ERROR_BAD_ALLOC, detail);
  Kernel big = kernel("triton_big", 8, 2 * kMiB, legacy(4, 0));
  const uint64_t first = launch(out, "launch needing 16 MiB on a 48 MiB device with 40 MiB cached for another stream",
                                big, s);
  const uint64_t second = launch(out, "the same launch again", big, s);
  step(out, "aclrtSynchronizeStream", aclrtSynchronizeStream(s));
  check_eager(out, "the first launch", first, big);
  check_eager(out, "the second launch", second, big);
  acl_sim::set_device_memory_capacity(0, 0);
}

// torch_npu's own operator (op-plugin's V2 path / DVM) takes its workspace
// with allocate_workspace inside its queued lambda on device 0's queue
// thread, while Triton launches run on device 1's queue thread. The
// workspace allocator's pointer map is one for all devices and has no lock,
// so no launch may be inside it then. Then operators and launches share
// device 0's queue and stream while the operators' workspace block grows.
inline void torch_npu_op_workspace_concurrent(Result &out) {
  aclrtStream s[2] = {};
  for (int d = 0; d < 2; ++d) {
    step(out, "aclrtSetDevice", aclrtSetDevice(d));
    s[d] = new_stream(out);
  }
  Kernel k = kernel("triton_w", 4, 4096, legacy(2, 0), 100);
  std::atomic<bool> inside{false}, go{false};
  acl_sim::TorchNpuOp op;
  op.name = "torch_npu operator (V2 path)";
  op.stream = s[0];
  op.workspace_bytes = uint64_t(1) << 20;
  op.run_us = 200;
  op.inside_workspace_allocator = [&] {
    inside = true;
    wait_for(go);
  };
  aclrtSetDevice(0);
  acl_sim::run_torch_npu_op(op);
  const bool entered = wait_for(inside);
  step(out, "device 0: torch_npu operator queued; its queue thread is inside the workspace allocator",
       entered ? ACL_SUCCESS : ACL_ERROR_INTERNAL_ERROR);
  aclrtSetDevice(1);
  std::vector<Pending> pending;
  for (int i = 0; i < 4; ++i) pending.push_back(submit(k, s[1]));
  acl_sim::drain_task_queue(1);
  int failed = 0;
  for (const Pending &p : pending) failed += code_of(p) != ACL_SUCCESS;
  step(out, "device 1: 4 launches run on its queue thread meanwhile (" + std::to_string(failed) + " failed)",
       failed ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
  go = true;
  acl_sim::drain_task_queues();
  step(out, "aclrtSynchronizeStream (device 1)", aclrtSynchronizeStream(s[1]));
  for (size_t i = 0; i < pending.size(); ++i)
    check_eager(out, "device 1 launch " + std::to_string(i + 1), pending[i].id->load(), k);
  aclrtSetDevice(0);
  pending.clear();
  for (int i = 0; i < 3; ++i) {
    acl_sim::TorchNpuOp grow;
    grow.name = "torch_npu operator (V2 path)";
    grow.stream = s[0];
    grow.workspace_bytes = (uint64_t(2) << 20) << i;  // each one grows the stream's workspace block
    grow.run_us = 100;
    acl_sim::run_torch_npu_op(grow);
    pending.push_back(submit(k, s[0]));
  }
  acl_sim::drain_task_queues();
  failed = 0;
  for (const Pending &p : pending) failed += code_of(p) != ACL_SUCCESS;
  step(out, "device 0: 3 operators with growing workspaces and 3 launches on one queue and stream (" +
                std::to_string(failed) + " failed)",
       failed ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
  step(out, "aclrtSynchronizeStream", aclrtSynchronizeStream(s[0]));
  for (size_t i = 0; i < pending.size(); ++i)
    check_eager(out, "device 0 launch " + std::to_string(i + 1), pending[i].id->load(), k);
}

// Task queue off: a thread launches; between its memory and its kernel
// (inside the launch) another thread calls torch.npu.empty_cache(), which
// synchronises the device and frees every workspace block and every cached
// block. Memory a launch holds must not be among them.
inline void empty_cache_other_thread(Result &out) {
  acl_sim::set_task_queue_enabled(false);
  aclrtStream s = new_stream(out);
  Kernel k = kernel("triton_e", 4, 8192, legacy(4, 3), 500);
  const uint64_t warm = launch(out, "warm-up launch (task queue off: the lambda runs on this thread)", k, s);
  std::string ec_error = "(not called)";
  acl_sim::on_call("aclrtLaunchKernelWithHostArgs", 1, [&] {
    std::thread other([&] {
      try {
        acl_sim::empty_cache();
        ec_error.clear();
      } catch (const std::exception &e) {
        ec_error = e.what();
      }
    });
    other.join();
  });
  const uint64_t hit = launch(out, "launch; before its kernel is queued another thread runs torch.npu.empty_cache()", k, s);
  step(out, "torch.npu.empty_cache() on the other thread", ec_error.empty() ? ACL_SUCCESS : ACL_ERROR_INTERNAL_ERROR,
       ec_error);
  const uint64_t after = launch(out, "launch after the empty_cache", k, s);
  step(out, "aclrtSynchronizeStream", aclrtSynchronizeStream(s));
  check_eager(out, "the warm-up launch", warm, k);
  check_eager(out, "the launch during the empty_cache", hit, k);
  check_eager(out, "the launch after it", after, k);
  acl_sim::clear_faults();
  acl_sim::set_task_queue_enabled(true);
}

// Task queue on, three threads: each launch's lambda waits in torch_npu's
// queue (a queue that lags, as on a busy device) while another thread's
// torch.npu.empty_cache() runs: its drain of the queue returned before the
// launch was queued, then it frees every cached block under the allocator's
// lock (NPUCachingAllocator.cpp v2.7.1:1669-1671, :2832-2840). A launch's
// block given back before its lambda ran is among them; held, it is not.
inline void empty_cache_while_queued(Result &out) {
  aclrtStream s = new_stream(out);
  Kernel k = kernel("triton_q", 8, uint64_t(1) << 20, packed(1, 1), 100);
  const uint64_t warm = launch(out, "warm-up launch", k, s);
  std::vector<Pending> pending;
  for (int round = 0; round < 3; ++round) {
    acl_sim::set_task_queues_paused(true);
    std::vector<std::thread> threads;
    std::vector<Pending> got(2);
    for (int t = 0; t < 2; ++t) threads.emplace_back([&, t] { got[t] = submit(k, s); });
    for (std::thread &th : threads) th.join();
    std::string ec_error;
    std::thread other([&] {
      try {
        acl_sim::empty_cache();
      } catch (const std::exception &e) {
        ec_error = e.what();
      }
    });
    other.join();
    acl_sim::set_task_queues_paused(false);
    acl_sim::drain_task_queues();
    step(out, "round " + std::to_string(round + 1) + ": two threads launch, a third runs torch.npu.empty_cache() "
              "while their lambdas wait in the queue",
         ec_error.empty() ? ACL_SUCCESS : ACL_ERROR_INTERNAL_ERROR, ec_error);
    pending.insert(pending.end(), got.begin(), got.end());
  }
  int failed = 0;
  for (const Pending &p : pending) failed += code_of(p) != ACL_SUCCESS;
  step(out, std::to_string(pending.size()) + " launches (" + std::to_string(failed) + " failed)",
       failed ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
  step(out, "aclrtSynchronizeStream", aclrtSynchronizeStream(s));
  check_eager(out, "the warm-up launch", warm, k);
  for (size_t i = 0; i < pending.size(); ++i)
    check_eager(out, "launch " + std::to_string(i + 1) + " during an empty_cache", pending[i].id->load(), k);
}

struct Entry {
  const char *name;
  void (*run)(Result &);
  const char *what;
};
inline const std::vector<Entry> &all() {
  static const std::vector<Entry> v = {
      {"capture-then-grow", capture_then_grow,
       "capture one launch, then a bigger eager launch and a torch_npu operator growing the stream's workspace block"},
      {"capture-then-empty-cache", capture_then_empty_cache,
       "capture one launch, then torch.npu.empty_cache() frees every workspace block and the cached blocks"},
      {"two-graphs-one-stream", two_graphs_one_stream,
       "two graphs captured on one capture stream, replayed at the same time on two streams"},
      {"global-capture-other-stream", global_capture_other_stream,
       "eager launches with non-zero lock content while another stream captures in global mode"},
      {"devices-threads-queue-off", devices_threads_queue_off,
       "two devices' queue threads, then four threads with the task queue off, launching at once"},
      {"queue-thread-oom-retry", queue_thread_oom_retry,
       "device memory full of blocks cached for another stream: the out-of-memory retry must run off the queue thread"},
      {"torch-npu-op-workspace-concurrent", torch_npu_op_workspace_concurrent,
       "torch_npu's own operator takes its workspace on a queue thread while launches run on another"},
      {"empty-cache-other-thread", empty_cache_other_thread,
       "task queue off: another thread's torch.npu.empty_cache() between a launch's memory and its kernel"},
      {"empty-cache-while-queued", empty_cache_while_queued,
       "task queue on: another thread's torch.npu.empty_cache() while launches' lambdas wait in the queue"},
  };
  return v;
}

inline bool run(const std::string &name, Result *out) {
  for (const Entry &e : all()) {
    if (name != e.name) continue;
    *out = Result();
    out->name = name;
    out->helper_way = helper_way();
    acl_sim::reset();
    e.run(*out);
    acl_sim::drain_task_queues();
#if !defined(ACL_SIM_SCENARIO_IN_LAMBDA) && !defined(ACL_SIM_SCENARIO_RELEASE_ONCE_QUEUED)
    for (int d = 0; d < acl_sim::device_count(); ++d) {  // every kernel finished: what the next launch gives back
      if (aclrtSetDevice(d) != ACL_SUCCESS || aclrtSynchronizeDevice() != ACL_SUCCESS)
        out->notes.push_back("could not synchronise device " + std::to_string(d));
    }
    torch_npu::inductor::HeldBlocks::all().release_done();
#endif
    for (const acl_sim::ErrorReport &r : acl_sim::errors())
      out->sim_errors.push_back(std::string(acl_sim::error_kind_name(r.kind)) + ": " + r.message);
    const acl_sim::Counters c = acl_sim::counters();
    if (c.live_workspace_tensors != 0) out->notes.push_back("workspace tensors still live at the end");
    if (c.live_caching_allocations != 0) out->notes.push_back("caching-allocator blocks still held at the end");
    bool ok = out->sim_errors.empty() && out->notes.empty();
    for (const Step &s : out->steps) ok = ok && s.acl_code == ACL_SUCCESS;
    for (const Replay &r : out->replays) ok = ok && r.acl_code == ACL_SUCCESS && r.lock_content_ok && r.kernels_seen > 0;
    out->ok = ok;
    return true;
  }
  return false;
}

inline std::string json_str(const std::string &s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

inline std::string to_json(const Result &r) {
  std::string o = "{\"scenario\": " + json_str(r.name) + ", \"helper_way\": " + json_str(r.helper_way) +
                  ", \"ok\": " + (r.ok ? "true" : "false") + ", \"steps\": [";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const Step &s = r.steps[i];
    o += (i ? ", " : "") + std::string("{\"step\": ") + json_str(s.what) + ", \"acl_code\": " +
         std::to_string(s.acl_code) + ", \"detail\": " + json_str(s.detail) + ", \"replay\": " +
         std::to_string(s.replay) + "}";
  }
  o += "], \"replays\": [";
  for (size_t i = 0; i < r.replays.size(); ++i) {
    const Replay &p = r.replays[i];
    o += (i ? ", " : "") + std::string("{\"graph\": ") + json_str(p.graph) + ", \"replay\": " +
         std::to_string(p.index) + ", \"acl_code\": " + std::to_string(p.acl_code) +
         ", \"kernels_seen\": " + std::to_string(p.kernels_seen) +
         ", \"lock_content_ok\": " + (p.lock_content_ok ? "true" : "false") + "}";
  }
  o += "], \"sim_errors\": [";
  for (size_t i = 0; i < r.sim_errors.size(); ++i) o += (i ? ", " : "") + json_str(r.sim_errors[i]);
  o += "], \"notes\": [";
  for (size_t i = 0; i < r.notes.size(); ++i) o += (i ? ", " : "") + json_str(r.notes[i]);
  return o + "]}";
}

// argv[1]: a scenario name or "list". Prints one JSON line; exits 0 when it
// ran (ok or not), 2 for an unknown name.
inline int main(int argc, char **argv) {
  const std::string name = argc > 1 ? argv[1] : "list";
  if (name == "list") {
    std::string o = "{\"scenarios\": [";
    for (size_t i = 0; i < all().size(); ++i)
      o += (i ? ", " : "") + std::string("{\"name\": ") + json_str(all()[i].name) + ", \"what\": " +
           json_str(all()[i].what) + "}";
    std::printf("%s]}\n", o.c_str());
    return 0;
  }
  Result r;
  if (!run(name, &r)) {
    std::fprintf(stderr, "unknown scenario '%s'\n", name.c_str());
    return 2;
  }
  std::printf("%s\n", to_json(r).c_str());
  return 0;
}

}  // namespace acl_sim_scenarios
