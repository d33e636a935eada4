// HOST SIMULATION probe kernel (test double and dry-run tool for
// torch-npu-inductor-patches; not a real NPU kernel). It decodes the launch
// argument struct the way a Triton-Ascend kernel would, records what it sees
// and checks that its sync locks and workspace are its own while it runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "acl_sim/control.h"
#include "internal.h"

namespace acl_sim {
namespace {

std::mutex g_probe_mu;
std::map<uint64_t, ProbeRecord> &done_records() {
  static auto *m = new std::map<uint64_t, ProbeRecord>();
  return *m;
}
std::map<uint64_t, ProbeRecord> &active_records() {
  static auto *m = new std::map<uint64_t, ProbeRecord>();
  return *m;
}

uint8_t pattern_byte(uint64_t launch_id, uint64_t i) { return static_cast<uint8_t>(0x5A ^ (launch_id * 131 + i)); }

void bad(ProbeRecord &r, const char *what) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "probe '%s' (launch %lu): %s", r.name.c_str(), static_cast<unsigned long>(r.launch_id),
                what);
  internal::report(ErrorKind::kBadArguments, buf);
}

// What the kernel got for one pointer: the allocation it lies in (as of the
// launch's issue), the bytes from it to the end of that allocation or to the
// other region's start, and how far the promised region runs past the end.
void measure(ProbeRecord &r, const KernelCall &call, uintptr_t ptr, uintptr_t other, uint64_t promised, Extent *ext,
             uint64_t *available, uint64_t *overrun, const char *what) {
  if (ptr == 0) return;
  allocation_extent(reinterpret_cast<void *>(ptr), ext, call.request_seq);
  const uintptr_t end = ext->kind == ExtentKind::kNone ? ptr : ext->base + ext->size;
  uint64_t avail = ptr < end ? end - ptr : 0;
  if (other > ptr && other < end) avail = std::min<uint64_t>(avail, other - ptr);
  *available = avail;
  const uintptr_t want_end = ptr + promised;
  *overrun = want_end > end ? want_end - std::max(end, ptr) : 0;
  if (*overrun != 0 && promised != 0) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "kernel '%s' (launch %lu): its %s region [%#lx, +%lu) runs %lu bytes past the end of the allocation "
                  "it lies in (%s [%#lx, +%lu))",
                  r.name.c_str(), static_cast<unsigned long>(r.launch_id), what, static_cast<unsigned long>(ptr),
                  static_cast<unsigned long>(promised), static_cast<unsigned long>(*overrun),
                  extent_kind_name(ext->kind), static_cast<unsigned long>(ext->base),
                  static_cast<unsigned long>(ext->size));
    internal::report(ErrorKind::kRegionOverrun, buf);
  }
}

void probe_start(const ProbeConfig &cfg, const KernelCall &call, ProbeRecord &r) {
  r.launch_id = call.launch_id;
  r.captured_launch_id = call.captured_launch_id;
  r.device = call.device;
  r.name = cfg.name;
  r.stream = call.stream;
  r.block_dim = call.block_dim;
  r.lock_bytes = cfg.lock_bytes;
  const auto *a = static_cast<const uint8_t *>(call.args);
  size_t off = 0;
  size_t need = (cfg.has_ffts ? 8 : 0) + (cfg.simt_only ? 0 : 16) + cfg.own_args_bytes + 12;
  if (call.args_size < need) {
    r.decoded = false;
    bad(r, "argument struct too small");
    return;
  }
  r.decoded = true;
  if (cfg.has_ffts) {
    void *f;
    std::memcpy(&f, a + off, 8);
    off += 8;
    r.ffts_ok = f == hardware_sync_addr();
    if (!r.ffts_ok) bad(r, "ffts_addr is not the hardware sync address");
  }
  if (!cfg.simt_only) {
    std::memcpy(&r.lock_ptr, a + off, 8);
    std::memcpy(&r.workspace_ptr, a + off + 8, 8);
    off += 16;
  }
  off += cfg.own_args_bytes;
  std::memcpy(r.grid, a + off, 12);
  // A kernel compiled for any grid needs its workspace per program: the promise follows the grid it got.
  if (cfg.workspace_per_program != 0 && (r.grid[0] <= 0 || r.grid[1] <= 0 || r.grid[2] <= 0)) {
    bad(r, "a grid dimension is not positive");
    return;
  }
  r.workspace_bytes = cfg.workspace_bytes + cfg.workspace_per_program * static_cast<uint64_t>(r.grid[0]) *
                                                static_cast<uint64_t>(r.grid[1]) * static_cast<uint64_t>(r.grid[2]);

  measure(r, call, r.lock_ptr, r.workspace_ptr, cfg.lock_bytes, &r.lock_extent, &r.lock_available, &r.lock_overrun,
          "lock");
  measure(r, call, r.workspace_ptr, r.lock_ptr, r.workspace_bytes, &r.workspace_extent, &r.workspace_available,
          &r.workspace_overrun, "workspace");
  if ((r.lock_ptr == 0) != (cfg.lock_bytes == 0)) bad(r, "sync_block_lock pointer presence does not match lock bytes");
  if ((r.workspace_ptr == 0) != (r.workspace_bytes == 0))
    bad(r, "workspace_addr pointer presence does not match workspace bytes");

  if (r.lock_ptr != 0 && cfg.lock_bytes != 0) {
    r.lock_slots_at_start.assign(cfg.lock_bytes / 8, 0);
    if (!device_read(reinterpret_cast<void *>(r.lock_ptr), r.lock_slots_at_start.data(), cfg.lock_bytes / 8 * 8,
                     "probe kernel (lock read at start)")) {
      r.locks_readable = false;
      r.access_errors++;
      r.lock_slots_at_start.clear();
    }
    r.distinct_lock_values = r.lock_slots_at_start;
    std::sort(r.distinct_lock_values.begin(), r.distinct_lock_values.end());
    r.distinct_lock_values.erase(std::unique(r.distinct_lock_values.begin(), r.distinct_lock_values.end()),
                                 r.distinct_lock_values.end());
  }
  if (r.lock_ptr && r.workspace_ptr && cfg.lock_bytes && r.workspace_bytes) {
    uintptr_t l0 = r.lock_ptr, l1 = r.lock_ptr + cfg.lock_bytes;
    uintptr_t w0 = r.workspace_ptr, w1 = r.workspace_ptr + r.workspace_bytes;
    if (l0 < w1 && w0 < l1) {
      r.regions_overlap = true;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "kernel '%s' (launch %lu): lock region [%#lx, +%lu) and workspace region [%#lx, +%lu) overlap",
                    r.name.c_str(), static_cast<unsigned long>(r.launch_id), static_cast<unsigned long>(l0),
                    static_cast<unsigned long>(cfg.lock_bytes), static_cast<unsigned long>(w0),
                    static_cast<unsigned long>(r.workspace_bytes));
      internal::report(ErrorKind::kRegionOverlapInKernel, buf);
    }
  }
  if (r.lock_ptr && cfg.lock_bytes)
    r.overlaps_with_running += internal::hold_region(r.launch_id, r.name, r.stream, r.lock_ptr, cfg.lock_bytes, "lock");
  if (r.workspace_ptr && r.workspace_bytes)
    r.overlaps_with_running +=
        internal::hold_region(r.launch_id, r.name, r.stream, r.workspace_ptr, r.workspace_bytes, "workspace");

  if (r.workspace_ptr && r.workspace_bytes) {
    std::vector<uint8_t> pat(r.workspace_bytes);
    for (uint64_t i = 0; i < pat.size(); ++i) pat[i] = pattern_byte(r.launch_id, i);
    if (!device_write(reinterpret_cast<void *>(r.workspace_ptr), pat.data(), pat.size(), "probe kernel (workspace)")) {
      r.workspace_written = false;
      r.access_errors++;
    }
  }
  if (cfg.sim_time_us) std::this_thread::sleep_for(std::chrono::microseconds(cfg.sim_time_us));
}

void probe_end(const ProbeConfig &cfg, ProbeRecord &r) {
  if (!r.decoded) return;
  if (r.lock_ptr && cfg.lock_bytes && r.locks_readable) {
    std::vector<int64_t> now(cfg.lock_bytes / 8);
    if (!device_read(reinterpret_cast<void *>(r.lock_ptr), now.data(), now.size() * 8, "probe kernel (lock read at end)")) {
      r.locks_unchanged = false;
      r.access_errors++;
    } else if (now != r.lock_slots_at_start) {
      r.locks_unchanged = false;
      char buf[200];
      std::snprintf(buf, sizeof buf, "kernel '%s' (launch %lu): its lock slots changed while it ran", r.name.c_str(),
                    static_cast<unsigned long>(r.launch_id));
      internal::report(ErrorKind::kLocksChangedWhileRunning, buf);
    } else if (cfg.locks_used) {
      // Used, as a kernel leaves its sync counters: every slot's bits inverted, so the next kernel on the region
      // finds the content it needs only if its own launch wrote it again after this kernel ran.
      for (int64_t &v : now) v = ~v;
      if (!device_write(reinterpret_cast<void *>(r.lock_ptr), now.data(), now.size() * 8, "probe kernel (locks used)"))
        r.access_errors++;
    }
  }
  if (r.workspace_ptr && r.workspace_bytes && r.workspace_written) {
    std::vector<uint8_t> now(r.workspace_bytes);
    bool ok = device_read(reinterpret_cast<void *>(r.workspace_ptr), now.data(), now.size(),
                          "probe kernel (workspace check at end)");
    for (uint64_t i = 0; ok && i < now.size(); ++i) ok = now[i] == pattern_byte(r.launch_id, i);
    if (!ok) {
      r.workspace_written = false;
      char buf[200];
      std::snprintf(buf, sizeof buf, "kernel '%s' (launch %lu): its workspace was overwritten while it ran",
                    r.name.c_str(), static_cast<unsigned long>(r.launch_id));
      internal::report(ErrorKind::kOverlapWithRunningKernel, buf);
    }
  }
  internal::release_regions(r.launch_id);
}

void probe_fn(const KernelCall &call) {
  const auto &cfg = *static_cast<const ProbeConfig *>(call.user);
  ProbeRecord *r;
  {
    std::lock_guard<std::mutex> g(g_probe_mu);
    r = &active_records()[call.launch_id];
  }
  if (call.block_idx == 0) {
    probe_start(cfg, call, *r);
    if (cfg.execute != nullptr && r->decoded) cfg.execute(call, *r, cfg.execute_ctx);
  }
  if (call.block_idx + 1 == call.block_dim) {
    probe_end(cfg, *r);
    std::lock_guard<std::mutex> g(g_probe_mu);
    done_records()[call.launch_id] = std::move(*r);
    active_records().erase(call.launch_id);
  }
}

}  // namespace

namespace internal {
void probe_reset() {
  std::lock_guard<std::mutex> g(g_probe_mu);
  done_records().clear();
}
}  // namespace internal

aclrtFuncHandle register_probe_kernel(const ProbeConfig &cfg) {
  auto *c = new ProbeConfig(cfg);  // lives as long as the handle (process)
  return register_kernel(c->name.c_str(), &probe_fn, c);
}

std::vector<ProbeRecord> probe_records() {
  std::lock_guard<std::mutex> g(g_probe_mu);
  std::vector<ProbeRecord> v;
  for (auto &kv : done_records()) v.push_back(kv.second);
  return v;
}

bool probe_record(uint64_t launch_id, ProbeRecord *out) {
  std::lock_guard<std::mutex> g(g_probe_mu);
  auto it = done_records().find(launch_id);
  if (it == done_records().end()) return false;
  *out = it->second;
  return true;
}

}  // namespace acl_sim
