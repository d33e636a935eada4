// HOST SIMULATION scenarios (test double; not torch_npu): graph capture and
// threads against the simulated torch_npu allocators (issue 17). Each runs
// launches the way a generated launcher does (acquire_launch_resources inside
// the launch lambda, handed to OpCommand::RunOpApiV2) with the probe kernel,
// and reports the ACL code of every step and replay, the simulation's error
// reports and whether the kernels saw the lock content they need.
//
// Used by `python -m torch_npu._inductor.patchset launcher --scenario NAME`
// (tooling/launcher_cli.py) and by test/cpp/test_capture_threads.cpp. Only
// the helper API every version has is used, so the same scenarios build
// against an older helper: define ACL_SIM_SCENARIO_HELPER to its header path.
#pragma once

#ifdef ACL_SIM_SCENARIO_HELPER
#include ACL_SIM_SCENARIO_HELPER
#else
#include <npu_launch_resources.h>
#endif

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "acl_sim/control.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace acl_sim_scenarios {

using torch_npu::inductor::LaunchResources;
using torch_npu::inductor::LockLayout;

struct Step {
  std::string what;
  int acl_code = 0;
};
struct Replay {
  std::string graph;
  int index = 0;
  int acl_code = 0;        // aclmdlRIExecuteAsync, then the stream's synchronise
  int kernels_seen = 0;    // probe records of this replay (1: its kernel ran)
  bool lock_content_ok = true;
};
struct Result {
  std::string name;
  std::vector<Step> steps;
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

inline LockLayout packed(uint32_t ordered, uint32_t unordered) {
  LockLayout l;
  l.ordered = ordered;
  l.unordered = unordered;
  return l;
}
inline LockLayout legacy(uint64_t slots, int64_t value) {
  LockLayout l;
  l.legacy_slots = slots;
  l.init_value = value;
  return l;
}

// Lock content at kernel start (design.md's table), computed here, not by the helper.
inline std::vector<int64_t> expected_locks(const LockLayout &l, uint32_t blocks) {
  if (l.ordered == 0 && l.unordered == 0) return std::vector<int64_t>(l.legacy_slots, l.init_value);
  const int64_t fill = l.unordered == 0 ? l.init_value : 0;
  std::vector<int64_t> v(size_t(l.ordered) * 8, fill);
  const int64_t p = int64_t(blocks) * l.participant_factor;
  for (uint32_t u = 0; u < l.unordered; ++u) {
    v.push_back(p);
    v.insert(v.end(), size_t((1 + 2 * p) * 8 - 1), 0);
  }
  return v;
}

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

// The launch lambda's body as a generated launcher has it: acquire, pack the
// argument struct [locks, workspace, grid], launch, release.
inline int launch_body(const Kernel &k, aclrtStream stream, uint64_t *launch_id) {
  LaunchResources res;
  aclError rc = torch_npu::inductor::acquire_launch_resources(k.name.c_str(), stream, k.blocks, 1, 1, k.blocks,
                                                              k.workspace_per_block, k.locks, &res);
  if (rc != ACL_SUCCESS) return rc;
  uint8_t args[28];
  void *locks = res.locks(), *ws = res.workspace();
  const int32_t grid[3] = {int32_t(k.blocks), 1, 1};
  std::memcpy(args, &locks, 8);
  std::memcpy(args + 8, &ws, 8);
  std::memcpy(args + 16, grid, 12);
  rc = aclrtLaunchKernelWithHostArgs(k.handle, k.blocks, stream, nullptr, args, sizeof args, nullptr, 0);
  if (rc == ACL_SUCCESS) *launch_id = acl_sim::last_launch_id();
  return rc;
}

struct Pending {  // one launch handed to torch_npu's task queue
  std::shared_ptr<std::atomic<int>> rc = std::make_shared<std::atomic<int>>(-1);
  std::shared_ptr<std::atomic<uint64_t>> id = std::make_shared<std::atomic<uint64_t>>(0);
  bool threw = false;
};

// launchKernel(...) of the generated wrapper: RunOpApiV2 with the lambda.
inline Pending submit(const Kernel &k, aclrtStream stream) {
  Pending p;
  auto rc = p.rc;
  auto id = p.id;
  try {
    at_npu::native::OpCommand::RunOpApiV2(k.name, [k, stream, rc, id]() -> int {
      uint64_t launch_id = 0;
      const int r = launch_body(k, stream, &launch_id);
      id->store(launch_id);
      rc->store(r);
      return r;
    });
  } catch (const std::exception &) {
    p.threw = true;
  }
  return p;
}
inline int code_of(const Pending &p) { return p.threw && p.rc->load() == 0 ? ACL_ERROR_INTERNAL_ERROR : p.rc->load(); }

// One launch, waited for (the queue drained) and recorded as a step.
inline uint64_t launch(Result &out, const std::string &what, const Kernel &k, aclrtStream stream) {
  Pending p = submit(k, stream);
  acl_sim::drain_task_queues();
  out.steps.push_back({what, code_of(p)});
  return p.id->load();
}

inline void step(Result &out, const std::string &what, aclError rc) { out.steps.push_back({what, rc}); }

inline void replay(Result &out, const std::string &graph, int index, aclmdlRI model, aclrtStream stream) {
  Replay r;
  r.graph = graph;
  r.index = index;
  r.acl_code = aclmdlRIExecuteAsync(model, stream);
  if (r.acl_code == ACL_SUCCESS) r.acl_code = aclrtSynchronizeStream(stream);
  out.replays.push_back(r);
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

// ---- the scenarios --------------------------------------------------------------------
// Warm the capture stream's block, capture one launch, run one bigger eager
// launch on the same stream (torch_npu's workspace allocator syncs the device
// and frees the block), replay: the graph must not use the freed block.
inline void capture_then_grow(Result &out) {
  aclrtStream s = new_stream(out);
  Kernel small = kernel("triton_small", 4, 1024, packed(1, 1));
  Kernel big = kernel("triton_big", 8, uint64_t(1) << 20, packed(0, 0));
  launch(out, "warm-up (eager)", small, s);
  aclmdlRI g = nullptr;
  const uint64_t id = capture_one(out, "graph", small, s, &g);
  launch(out, "bigger eager launch (the stream's block grows)", big, s);
  for (int i = 0; i < 2; ++i) replay(out, "graph", i + 1, g, s);
  check_replays(out, "graph", id, small);
  if (g != nullptr) step(out, "aclmdlRIDestroy", aclmdlRIDestroy(g));
}

// Capture, then torch.npu.empty_cache() (frees every workspace block), replay.
inline void capture_then_empty_cache(Result &out) {
  aclrtStream s = new_stream(out);
  Kernel k = kernel("triton_k", 4, 4096, legacy(4, 0));
  launch(out, "warm-up (eager)", k, s);
  aclmdlRI g = nullptr;
  const uint64_t id = capture_one(out, "graph", k, s, &g);
  try {
    acl_sim::workspace_empty_cache(0);
    step(out, "torch.npu.empty_cache()", ACL_SUCCESS);
  } catch (const std::exception &e) {
    step(out, std::string("torch.npu.empty_cache(): ") + e.what(), ACL_ERROR_INTERNAL_ERROR);
  }
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
    out.replays.push_back(ra);
    out.replays.push_back(rb);
  }
  check_replays(out, "graph A", ida, a);
  check_replays(out, "graph B", idb, b);
  if (ga != nullptr) step(out, "aclmdlRIDestroy A", aclmdlRIDestroy(ga));
  if (gb != nullptr) step(out, "aclmdlRIDestroy B", aclmdlRIDestroy(gb));
}

// One stream captures in global mode while eager launches on another stream
// of the same device need new lock images and push old ones out (a cache of
// one entry): no event query or record, page-locked allocation or free may
// happen until the capture ends; the eager kernels still get their content.
inline void global_capture_other_stream(Result &out) {
  torch_npu::inductor::set_pinned_cache_limits(1, uint64_t(1) << 20);
  aclrtStream cs = new_stream(out), eager = new_stream(out);
  Kernel captured = kernel("triton_captured", 2, 512, legacy(4, 0));
  std::vector<Kernel> eager_kernels;
  for (int v = 1; v <= 4; ++v) eager_kernels.push_back(kernel("triton_eager_" + std::to_string(v), 2, 0, legacy(4, v)));
  launch(out, "eager launch before the capture (caches an image)", eager_kernels[0], eager);
  launch(out, "eager launch before the capture (retires the first image)", eager_kernels[1], eager);
  launch(out, "warm-up of the captured kernel", captured, cs);
  aclmdlRI g = nullptr;
  step(out, "graph: aclmdlRICaptureBegin", aclmdlRICaptureBegin(cs, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  const uint64_t id = launch(out, "graph: captured launch", captured, cs);
  std::vector<uint64_t> eager_ids;
  for (int i = 0; i < 4; ++i)
    eager_ids.push_back(launch(out, "eager launch on another stream during the capture", eager_kernels[i], eager));
  step(out, "graph: aclmdlRICaptureEnd", aclmdlRICaptureEnd(cs, &g));
  step(out, "aclrtSynchronizeStream (eager)", aclrtSynchronizeStream(eager));
  for (size_t i = 0; i < eager_ids.size(); ++i) {
    acl_sim::ProbeRecord rec;
    if (!acl_sim::probe_record(eager_ids[i], &rec) ||
        rec.lock_slots_at_start != expected_locks(eager_kernels[i].locks, eager_kernels[i].blocks))
      out.notes.push_back("eager launch " + std::to_string(i + 1) + " during the capture got the wrong lock content");
  }
  for (int i = 0; i < 2; ++i) replay(out, "graph", i + 1, g, cs);
  check_replays(out, "graph", id, captured);
  // After the capture, deferred housekeeping catches up: nothing page-locked stays behind.
  launch(out, "eager launch after the capture", eager_kernels[0], eager);
  step(out, "aclrtSynchronizeStream (eager)", aclrtSynchronizeStream(eager));
  (void)torch_npu::inductor::trim_pinned_cache();
  if (torch_npu::inductor::trim_pinned_cache() != 0) out.notes.push_back("retired lock images still wait after trim");
  if (g != nullptr) step(out, "aclmdlRIDestroy", aclmdlRIDestroy(g));
}

// Two devices' queue threads, then four threads with the task queue off
// (two devices, two streams each), allocate and release at once; sizes vary
// so that blocks grow. The workspace allocator's pointer map has no lock: the
// helper's requests and releases must never overlap.
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

struct Entry {
  const char *name;
  void (*run)(Result &);
  const char *what;
};
inline const std::vector<Entry> &all() {
  static const std::vector<Entry> v = {
      {"capture-then-grow", capture_then_grow,
       "capture one launch, then a bigger eager launch on the capture stream grows (frees) its workspace block"},
      {"capture-then-empty-cache", capture_then_empty_cache,
       "capture one launch, then torch.npu.empty_cache() frees every workspace block"},
      {"two-graphs-one-stream", two_graphs_one_stream,
       "two graphs captured on one capture stream, replayed at the same time on two streams"},
      {"global-capture-other-stream", global_capture_other_stream,
       "eager launches needing new lock images while another stream captures in global mode"},
      {"devices-threads-queue-off", devices_threads_queue_off,
       "two devices' queue threads, then four threads with the task queue off, allocating at once"},
  };
  return v;
}

inline bool run(const std::string &name, Result *out) {
  for (const Entry &e : all()) {
    if (name != e.name) continue;
    *out = Result();
    out->name = name;
    acl_sim::reset();
    e.run(*out);
    acl_sim::drain_task_queues();
    for (const acl_sim::ErrorReport &r : acl_sim::errors())
      out->sim_errors.push_back(std::string(acl_sim::error_kind_name(r.kind)) + ": " + r.message);
    if (acl_sim::counters().live_workspace_tensors != 0) out->notes.push_back("workspace tensors still live at the end");
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
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

inline std::string to_json(const Result &r) {
  std::string o = "{\"scenario\": " + json_str(r.name) + ", \"ok\": " + (r.ok ? "true" : "false") + ", \"steps\": [";
  for (size_t i = 0; i < r.steps.size(); ++i)
    o += (i ? ", " : "") + std::string("{\"step\": ") + json_str(r.steps[i].what) +
         ", \"acl_code\": " + std::to_string(r.steps[i].acl_code) + "}";
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
