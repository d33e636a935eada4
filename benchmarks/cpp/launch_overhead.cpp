// Launch-overhead benchmark for the sync resources (workspace + locks) of a
// Triton-Ascend kernel launched from Inductor's C++ wrapper, run in the host
// ACL simulation (acl_sim). Driven by benchmarks/launch_overhead.py; see
// benchmarks/README.md for what the numbers mean.
//
// The launchers come from the generated header (launch_overhead_launchers.h,
// written by `launch_overhead.py --emit-launchers PATH`): the code
// launch_codegen writes, in the launcher shape torch_npu's wrapper has
// (`call_<kernel>`: the lambda handed to launchKernel -> OpCommand::RunOpApiV2,
// so torch_npu's simulated task queue runs it on its thread). Two strategies:
//   null      a plan that needs nothing (NULL sync pointers): the floor, and
//             the same code in every build, so its spread between builds is noise.
//   patchset  the layout's launcher: with this package's helper, LaunchMemory
//             on the calling thread and the lock fills in the lambda; built
//             against a helper without LaunchMemory (b45157f's), the shape that
//             helper's generator wrote: acquire_launch_resources in the lambda.
//
// Per launch, measured: host time of the call on the calling thread, host
// time of the lambda on the queue thread (the simulation times each queued
// task), and the simulation's counters: allocator calls (caching + workspace
// allocator), device synchronisations, host-blocking calls, page-locked
// allocations, host heap allocations by the calling thread.
//
// Usage (one process per layout; JSON lines on stdout):
//   launch_overhead --layout ordered --kernel-us 0,20,100 [--strategies null,patchset]
//                   [--launches 10000] [--rounds 5] [--warmup 200] [--grid 4]
//   launch_overhead --primitives [--launches 5000]   (single simulation calls, to attribute the differences)
#include <acl/acl.h>
#include <acl_sim/control.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch_overhead_launchers.h"  // includes the helper (this package's, or --baseline-helper's)

ACL_SIM_DEFINE_COUNTING_OPERATOR_NEW()

namespace {

using bench_gen::LayoutSpec;
using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "launch_overhead: %s\n", msg.c_str());
  std::exit(2);
}

void check_acl(aclError rc, const char *what) {
  if (rc != ACL_SUCCESS) die(std::string(what) + " failed with error " + std::to_string(rc));
}

// ---- the layout rule (docs/design.md), written independently of the helper
uint32_t launch_blocks(uint32_t g0, uint32_t g1, uint32_t g2) {
  return std::min<uint32_t>(g0 * g1 * g2, bench_gen::kBlockClamp);
}
uint64_t participants(const LayoutSpec &L, uint32_t blocks) { return uint64_t(blocks) * L.participant_factor; }
uint64_t lock_slots(const LayoutSpec &L, uint32_t blocks) {
  if (L.legacy_slots) return L.legacy_slots;
  return uint64_t(L.ordered) * 8 + uint64_t(L.unordered) * (1 + 2 * participants(L, blocks)) * 8;
}
uint64_t workspace_bytes(const LayoutSpec &L, uint32_t g0, uint32_t g1, uint32_t g2) {
  return L.workspace_per_block * g0 * g1 * g2;
}
// Lock content the kernel must see at start.
std::vector<int64_t> lock_content(const LayoutSpec &L, uint32_t blocks) {
  std::vector<int64_t> out(lock_slots(L, blocks), L.unordered ? 0 : L.init_value);
  const uint64_t per = (1 + 2 * participants(L, blocks)) * 8;
  for (uint32_t u = 0; u < L.unordered; ++u) out[uint64_t(L.ordered) * 8 + u * per] = int64_t(participants(L, blocks));
  return out;
}

enum Strategy { kNull = 0, kPatchset = 1, kNumStrategies = 2 };
const char *kStrategyNames[] = {"null", "patchset"};

bench_gen::Launcher launcher_for(Strategy s, int layout) {
  return s == kNull ? bench_gen::kNullLauncher : bench_gen::kLayouts[layout].patchset;
}

// ---- verdict ------------------------------------------------------------------
const char *finding_for(const acl_sim::ErrorReport &e) {
  using K = acl_sim::ErrorKind;
  switch (e.kind) {
    case K::kRegionOverlapInKernel: return "aliasing";
    case K::kLocksChangedWhileRunning: return "locks-overwritten-while-running";
    case K::kOverlapWithRunningKernel: return "overlap-with-running-kernel";
    case K::kUninitialisedRead: return "uninitialised-read";
    case K::kUseAfterFree: return "use-after-free";
    case K::kOutOfBounds: return "out-of-bounds";
    case K::kStalePinnedSource: return "stale-pinned-source";
    case K::kRegionOverrun: return "region-overrun";
    case K::kCrossDevice: return "cross-device";
    case K::kCaptureInvalidated: return "capture-invalidated";
    case K::kAllocatorRace: return "allocator-race";
    case K::kSelfWait: return "self-wait";
    case K::kBadArguments:
      return e.message.find("pointer presence") != std::string::npos ? "null-pointers" : "bad-arguments";
  }
  return "bad-arguments";
}

// Adds what the simulation found since the last reset() to `f`.
void collect_findings(uint64_t expected_records, const std::vector<int64_t> &expected_locks,
                      std::map<std::string, uint64_t> &f) {
  for (const auto &e : acl_sim::errors()) ++f[finding_for(e)];
  const auto records = acl_sim::probe_records();
  if (records.size() < expected_records) f["missing-probe-records"] += expected_records - records.size();
  for (const auto &r : records)
    if (r.lock_ptr != 0 && r.locks_readable && r.lock_slots_at_start != expected_locks) ++f["wrong-lock-content"];
}

std::string verdict_of(const std::map<std::string, uint64_t> &f) {
  std::string v;
  for (const auto &kv : f)
    if (kv.second) v += (v.empty() ? "" : "+") + kv.first;
  return v.empty() ? "clean" : v;
}

// ---- one cell's accumulated measurements ------------------------------------------
struct Cell {
  Strategy strategy = kNull;
  uint32_t kernel_us = 0;
  aclrtStream stream = nullptr;
  aclrtFuncHandle probe = nullptr;
  std::vector<int64_t> calling_ns;  // per launch, on the calling thread (capacity reserved up front)
  std::vector<int64_t> queue_ns;    // per launch, the lambda on the queue thread
  uint64_t launches = 0, heap = 0, failures = 0;
  uint64_t peak_live_blocks = 0;  // launch blocks allocated at once (held until their kernels finished), worst round
  acl_sim::Counters c{};
  std::map<std::string, uint64_t> findings;
};

void add_counters(acl_sim::Counters &a, const acl_sim::Counters &b) {
  a.allocator_requests += b.allocator_requests;
  a.caching_requests += b.caching_requests;
  a.device_synchronizations += b.device_synchronizations;
  a.host_blocking += b.host_blocking;
  a.pinned_allocs += b.pinned_allocs;
  a.sync_copies += b.sync_copies;
  a.async_copies += b.async_copies;
  a.memsets += b.memsets;
  a.launches += b.launches;
  a.caching_frees_on_queue_threads += b.caching_frees_on_queue_threads;
  a.errors += b.errors;
}

double pct(std::vector<int64_t> v, double q) {  // nearest-rank percentile
  if (v.empty()) return 0;
  size_t k = size_t(q * double(v.size()));
  if (k >= v.size()) k = v.size() - 1;
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  return double(v[k]);
}
double mean(const std::vector<int64_t> &v) {
  double s = 0;
  for (int64_t x : v) s += double(x);
  return v.empty() ? 0 : s / double(v.size());
}

struct Options {
  std::string layout = "ordered";
  std::vector<uint32_t> kernel_us{0, 20, 100};
  std::vector<Strategy> strategies{kNull, kPatchset};
  uint64_t launches = 10000, rounds = 5, warmup = 200;
  uint32_t grid = 4;
  bool primitives = false;
};

void run_round(Cell &cell, const Options &o, int layout, uint64_t n, const std::vector<int64_t> &expected_locks) {
  const bench_gen::Launcher fn = launcher_for(cell.strategy, layout);
  const uint32_t g = o.grid;
  acl_sim::reset();
  for (uint64_t i = 0; i < o.warmup; ++i) fn(cell.probe, nullptr, nullptr, 1, g, 1, 1, cell.stream);
  acl_sim::drain_task_queues();
  check_acl(aclrtSynchronizeStream(cell.stream), "aclrtSynchronizeStream (warm-up)");
  acl_sim::reset();  // counters, errors, probe records
  acl_sim::clear_op_tasks();

  acl_sim::heap_count_begin();
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t a = now_ns();
    try {
      fn(cell.probe, nullptr, nullptr, 1, g, 1, 1, cell.stream);
    } catch (const std::exception &) {
      ++cell.failures;
    }
    cell.calling_ns.push_back(now_ns() - a);  // capacity reserved: no allocation
  }
  const uint64_t heap = acl_sim::heap_count_end();
  acl_sim::drain_task_queues();
  const acl_sim::Counters c = acl_sim::counters();  // before the final sync: it is not per-launch work
  for (const acl_sim::OpTask &t : acl_sim::op_tasks()) {
    if (t.queued && t.ran) cell.queue_ns.push_back(int64_t(t.run_ns));
    if (t.rc != 0 || t.dropped) ++cell.failures;
  }
  check_acl(aclrtSynchronizeStream(cell.stream), "aclrtSynchronizeStream");
  cell.launches += n;
  cell.heap += heap;
  cell.peak_live_blocks = std::max(cell.peak_live_blocks, c.peak_live_caching_allocations);
  add_counters(cell.c, c);
  collect_findings(n, expected_locks, cell.findings);
  if (cell.failures) cell.findings["launch-failed"] = cell.failures;
}

void print_cell(const Cell &cell, const Options &o, const LayoutSpec &L, uint64_t lock_bytes, uint64_t ws_bytes) {
  const double n = double(cell.launches);
  auto per = [&](uint64_t v) { return double(v) / n; };
  std::string findings = "{";
  for (const auto &kv : cell.findings) {
    if (findings.size() > 1) findings += ", ";
    findings += "\"" + kv.first + "\": " + std::to_string(kv.second);
  }
  findings += "}";
  std::printf(
      "{\"strategy\": \"%s\", \"layout\": \"%s\", \"kernel_us\": %u, \"helper_way\": \"%s\", "
      "\"calling_ns_median\": %.1f, \"calling_ns_p90\": %.1f, \"calling_ns_p99\": %.1f, \"calling_ns_mean\": %.1f, "
      "\"queue_ns_median\": %.1f, \"queue_ns_p90\": %.1f, \"queue_ns_p99\": %.1f, \"queue_ns_mean\": %.1f, "
      "\"queue_samples\": %zu, \"allocator_calls\": %.4f, \"workspace_allocator_calls\": %.4f, "
      "\"device_synchronizations\": %.4f, \"host_blocking_calls\": %.4f, \"page_locked_allocations\": %.4f, "
      "\"host_heap_allocs\": %.4f, \"sync_copies\": %.4f, \"async_copies\": %.4f, \"memsets\": %.4f, "
      "\"sim_launches\": %.4f, \"frees_on_queue_thread\": %.4f, \"sim_errors\": %.4f, "
      "\"peak_live_blocks\": %" PRIu64 ", \"verdict\": \"%s\", "
      "\"findings\": %s, \"launches\": %" PRIu64 ", \"rounds\": %" PRIu64 ", \"warmup_per_round\": %" PRIu64
      ", \"grid\": [%u, 1, 1], \"block_num\": %u, \"lock_bytes\": %" PRIu64 ", \"workspace_bytes\": %" PRIu64
      ", \"init_value\": %" PRId64 "}\n",
      kStrategyNames[cell.strategy], L.key, cell.kernel_us, bench_gen::kHelperWay, pct(cell.calling_ns, 0.5),
      pct(cell.calling_ns, 0.9), pct(cell.calling_ns, 0.99), mean(cell.calling_ns), pct(cell.queue_ns, 0.5),
      pct(cell.queue_ns, 0.9), pct(cell.queue_ns, 0.99), mean(cell.queue_ns), cell.queue_ns.size(),
      per(cell.c.caching_requests + cell.c.allocator_requests), per(cell.c.allocator_requests),
      per(cell.c.device_synchronizations), per(cell.c.host_blocking), per(cell.c.pinned_allocs), per(cell.heap),
      per(cell.c.sync_copies), per(cell.c.async_copies), per(cell.c.memsets), per(cell.c.launches),
      per(cell.c.caching_frees_on_queue_threads), per(cell.c.errors), cell.peak_live_blocks,
      verdict_of(cell.findings).c_str(),
      findings.c_str(), cell.launches, o.rounds, o.warmup, o.grid, launch_blocks(o.grid, 1, 1), lock_bytes, ws_bytes,
      L.init_value);
  std::fflush(stdout);
}

int run_grid(const Options &o) {
  int layout = -1;
  for (int i = 0; i < bench_gen::kNumLayouts; ++i)
    if (o.layout == bench_gen::kLayouts[i].key) layout = i;
  if (layout < 0) die("unknown layout '" + o.layout + "'");
  const LayoutSpec &L = bench_gen::kLayouts[layout];
  acl_sim::set_task_queue_enabled(true);  // torch_npu's default (TASK_QUEUE_ENABLE=1)

  const uint32_t blocks = launch_blocks(o.grid, 1, 1);
  const uint64_t lock_bytes = lock_slots(L, blocks) * 8;
  const uint64_t ws_bytes = workspace_bytes(L, o.grid, 1, 1);
  const std::vector<int64_t> expected_locks = lock_content(L, blocks);

  aclrtStream streams[kNumStrategies] = {};  // one stream per strategy
  for (Strategy s : o.strategies) check_acl(aclrtCreateStream(&streams[s]), "aclrtCreateStream");
  const uint64_t rounds = std::max<uint64_t>(1, std::min(o.rounds, o.launches));
  for (uint32_t kus : o.kernel_us) {
    std::vector<Cell> cells;
    for (Strategy s : o.strategies) {
      Cell c;
      c.strategy = s;
      c.kernel_us = kus;
      c.stream = streams[s];
      acl_sim::ProbeConfig pc;
      pc.name = std::string("bench_") + L.key + "_" + kStrategyNames[s] + "_" + std::to_string(kus) + "us";
      pc.lock_bytes = lock_bytes;  // what the kernel needs, whatever the strategy hands it
      pc.workspace_bytes = ws_bytes;
      pc.sim_time_us = kus;
      pc.own_args_bytes = bench_gen::kOwnArgsBytes;
      c.probe = acl_sim::register_probe_kernel(pc);
      c.calling_ns.reserve(o.launches);
      c.queue_ns.reserve(o.launches);
      cells.push_back(std::move(c));
    }
    // Interleave: every round runs each strategy once, in rotating order, so
    // slow drifts of the machine (other jobs) hit all strategies alike.
    for (uint64_t r = 0; r < rounds; ++r) {
      const uint64_t n = o.launches / rounds + (r < o.launches % rounds ? 1 : 0);
      for (size_t k = 0; k < cells.size(); ++k) run_round(cells[(k + r) % cells.size()], o, layout, n, expected_locks);
    }
    for (const Cell &c : cells) print_cell(c, o, L, lock_bytes, ws_bytes);
  }
  for (Strategy s : o.strategies) check_acl(aclrtDestroyStream(streams[s]), "aclrtDestroyStream");
  return 0;
}

// ---- primitives: what single calls cost on the host in the simulation (no kernel work) ----
template <class F>
double median_ns(uint64_t n, aclrtStream s, F f) {
  std::vector<int64_t> v;
  v.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t a = now_ns();
    f();
    v.push_back(now_ns() - a);
    if ((i & 255) == 255) check_acl(aclrtSynchronizeStream(s), "aclrtSynchronizeStream");
  }
  check_acl(aclrtSynchronizeStream(s), "aclrtSynchronizeStream");
  return pct(v, 0.5);
}

int run_primitives(const Options &o) {
  aclrtStream s = nullptr;
  check_acl(aclrtCreateStream(&s), "aclrtCreateStream");
  const LayoutSpec &L = bench_gen::kLayouts[0];
  const uint32_t g = o.grid, blocks = launch_blocks(g, 1, 1);
  const uint64_t bytes = lock_slots(L, blocks) * 8 + workspace_bytes(L, g, 1, 1) + 1023;
  void *dev = nullptr;
  check_acl(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
  acl_sim::ProbeConfig pc;
  pc.name = "bench_primitive_probe";
  pc.own_args_bytes = bench_gen::kOwnArgsBytes;
  aclrtFuncHandle probe = acl_sim::register_probe_kernel(pc);
  struct __attribute__((packed)) {
    void *p[4];
    int32_t v[4];
  } args = {{nullptr, nullptr, nullptr, nullptr}, {1, int32_t(g), 1, 1}};
  static_assert(sizeof(args) == 16 + bench_gen::kOwnArgsBytes + 12, "argument struct size");
  const uint64_t n = std::max<uint64_t>(o.launches, 100);
  std::vector<std::pair<std::string, double>> rows;
  for (int rep = 0; rep < 2; ++rep) {  // the second pass is the one reported (the first warms everything)
    rows.clear();
    acl_sim::reset();
    rows.emplace_back("timer_pair", median_ns(n, s, [] {}));
    rows.emplace_back("aclrtLaunchKernelWithHostArgs", median_ns(n, s, [&] {
                        (void)aclrtLaunchKernelWithHostArgs(probe, g, s, nullptr, &args, sizeof(args), nullptr, 0);
                      }));
    rows.emplace_back("aclrtMemsetAsync_128B", median_ns(n, s, [&] { (void)aclrtMemsetAsync(dev, 128, 0, 128, s); }));
    rows.emplace_back("caching_raw_alloc_and_raw_delete", median_ns(n, s, [&] {
                        c10_npu::NPUCachingAllocator::raw_delete(
                            c10_npu::NPUCachingAllocator::raw_alloc_with_stream(bytes, s));
                      }));
    rows.emplace_back("workspace_allocate_and_release",
                      median_ns(n, s, [&] { at::Tensor t = at_npu::native::allocate_workspace(bytes, s); }));
    rows.emplace_back("std_function_and_RunOpApiV2_queue_off", median_ns(n, s, [&] {
                        acl_sim::set_task_queue_enabled(false);
                        at_npu::native::OpCommand::RunOpApiV2("bench", [] { return 0; });
                        acl_sim::set_task_queue_enabled(true);
                      }));
  }
  std::printf("{\"primitives_ns_median\": {");
  for (size_t i = 0; i < rows.size(); ++i)
    std::printf("%s\"%s\": %.1f", i ? ", " : "", rows[i].first.c_str(), rows[i].second);
  std::printf("}, \"primitive_calls\": %" PRIu64 ", \"bytes\": %" PRIu64 "}\n", n, bytes);
  check_acl(aclrtFree(dev), "aclrtFree");
  check_acl(aclrtDestroyStream(s), "aclrtDestroyStream");
  return 0;
}

std::vector<std::string> split(const std::string &s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

uint64_t parse_u64(const std::string &v, const char *flag) {
  char *end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') die(std::string("bad value for ") + flag + ": '" + v + "'");
  return x;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--layout") o.layout = val();
    else if (a == "--kernel-us") {
      o.kernel_us.clear();
      for (const auto &x : split(val())) o.kernel_us.push_back(uint32_t(parse_u64(x, "--kernel-us")));
    } else if (a == "--strategies") {
      o.strategies.clear();
      for (const auto &x : split(val())) {
        int k = -1;
        for (int j = 0; j < kNumStrategies; ++j)
          if (x == kStrategyNames[j]) k = j;
        if (k < 0) die("unknown strategy '" + x + "' (null, patchset)");
        o.strategies.push_back(Strategy(k));
      }
    } else if (a == "--launches") o.launches = parse_u64(val(), "--launches");
    else if (a == "--rounds") o.rounds = parse_u64(val(), "--rounds");
    else if (a == "--warmup") o.warmup = parse_u64(val(), "--warmup");
    else if (a == "--grid") o.grid = uint32_t(parse_u64(val(), "--grid"));
    else if (a == "--primitives") o.primitives = true;
    else if (a == "--list-layouts") {
      for (int j = 0; j < bench_gen::kNumLayouts; ++j) std::printf("%s\n", bench_gen::kLayouts[j].key);
      return 0;
    } else die("unknown argument '" + a + "'");
  }
  if (o.grid == 0) die("--grid must be positive");
  if (o.launches == 0) die("--launches must be positive");
  try {
    return o.primitives ? run_primitives(o) : run_grid(o);
  } catch (const std::exception &e) {
    die(std::string("exception: ") + e.what());
  }
}
