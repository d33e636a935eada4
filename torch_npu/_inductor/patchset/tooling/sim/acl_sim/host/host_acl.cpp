// HOST ACL LIBRARY: a TEST DOUBLE of CANN's runtime libraries for torch-npu-inductor-patches' tests
// and dry runs, loaded by a released torch_npu wheel (unchanged) in a test's subprocess only, never
// in a user's process. It adds to acl_sim (../src: device memory, streams, events, copies, memsets,
// launches, graph capture, the probe kernel) what torch_npu's own binaries call beyond that: ACL
// initialisation, contexts, device queries, the caching allocator's aclrtMallocAlign32, stream and
// event variants, runtime settings torch_npu writes and reads back, kernel binaries in both launch
// layouts, and the control surface of host_acl.h. Compiled against the wheel's own ACL headers
// (tooling/sim/host_library.py), so that every definition here has the wheel's prototype; what the
// wheel's headers do not declare comes from supplement.h. Every ACL function defined here is
// renamed at build time and reached through a generated entry point that counts the call.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "acl_host_prelude.h"  // the wheel's headers, the supplement, acl_host_has.h
#include "acl_sim/control.h"
#include "host_acl.h"
#include "internal.h"
#include "opapi.h"

// The generated table of every function the build exports as ACL (tooling/sim/host_library.py).
extern "C" {
extern const char *const acl_host_function_names[];
extern const int acl_host_function_kinds[];  // 0 implemented, 1 stated no-op, 2 missing
extern const int acl_host_function_count;
}

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- configuration
constexpr uint64_t kGiB = uint64_t(1) << 30;
// Two devices (several-device runs are real); each reports this much memory (acl_sim's arena is
// 64 GiB for all devices and never reuses an address, so a freed range stays detectable).
int env_int(const char *name, int dflt) {
  const char *v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}
const int kDevices = [] {
  const int n = env_int("ACL_HOST_DEVICES", 2);
  return n < 1 ? 1 : n > 16 ? 16 : n;
}();
const uint64_t kDeviceMemory = uint64_t(env_int("ACL_HOST_DEVICE_GIB", 16)) * kGiB;
// Streams per device, the default one counted (acl_sim::set_stream_limit; unset or 0: CANN's 2038 for the 910B); a
// test lowers it to reach the limit.
const int kStreamsPerDevice = env_int("ACL_HOST_STREAMS_PER_DEVICE", 0);

void apply_configuration() {
  acl_sim::set_device_count(kDevices);
  for (int d = 0; d < kDevices; ++d) {
    acl_sim::set_device_memory_capacity(d, kDeviceMemory);
    acl_sim::set_stream_limit(d, kStreamsPerDevice > 0 ? static_cast<uint32_t>(kStreamsPerDevice) : 0);
  }
}
const bool g_configured = (apply_configuration(), true);

long gettid_now() { return static_cast<long>(syscall(SYS_gettid)); }

// ---------------------------------------------------------------- call accounting
struct Stat {
  uint64_t calls = 0, failed = 0;
  std::map<long, uint64_t> threads;
};
std::mutex g_calls_mu;
std::map<int, Stat> &stats() {
  static auto *m = new std::map<int, Stat>();
  return *m;
}
std::set<int> &logged_missing() {
  static auto *s = new std::set<int>();
  return *s;
}
struct TraceEntry {
  uint64_t seq;
  long tid;
  int index;
  long long rc;
};
const size_t kTrace = static_cast<size_t>(env_int("ACL_HOST_TRACE", 0));
std::deque<TraceEntry> &trace() {
  static auto *d = new std::deque<TraceEntry>();
  return *d;
}
uint64_t g_trace_seq = 0;  // under g_calls_mu

const char *fn_name(int index) {
  return index >= 0 && index < acl_host_function_count ? acl_host_function_names[index] : "?";
}

// aclGetRecentErrMsg / aclrtGetLastError: per thread, as CANN keeps them.
thread_local std::string t_recent_msg, t_returned_msg;
thread_local bool t_has_msg = false;
thread_local aclError t_last_error = ACL_SUCCESS;

// ---------------------------------------------------------------- settings torch_npu writes and reads
std::mutex g_settings_mu;
std::map<int, int64_t> g_sys_params;        // aclrtSetSysParamOpt / aclrtCtxSetSysParamOpt
std::map<int, std::string> g_compile_opts;  // aclSetCompileopt
int g_sat_mode = 0;                          // aclrtSetDeviceSatMode
uint64_t g_op_execute_timeout = 0, g_op_wait_timeout = 0;
std::map<void *, int32_t> g_stream_ids;
std::map<void *, uint32_t> g_overflow_switch;
std::map<void *, uint64_t> g_failure_mode;
int32_t g_next_stream_id = 1;
// Core counts of the stand-in device (the project's Ascend 910B: tooling/sim/samples.py, releases/wheels.py),
// which aclrtSetDeviceResLimit lowers for later kernels and aclrtResetDeviceResLimit restores.
constexpr uint32_t kCubeCores = 24, kVectorCores = 48;
uint32_t g_res_limit[16][2];  // under g_settings_mu; 0: the device's own count
std::atomic<bool> g_initialised{false};
thread_local int t_capture_mode = ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;

// ---------------------------------------------------------------- contexts
// One primary context per device (what aclrtSetDevice makes current), plus created ones.
struct Context {
  int device;
};
Context g_primary[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
std::mutex g_ctx_mu;
std::set<Context *> &created_contexts() {
  static auto *s = new std::set<Context *>();
  return *s;
}
int context_device(void *ctx) {
  auto *c = static_cast<Context *>(ctx);
  if (c >= g_primary && c < g_primary + kDevices) return c->device;
  std::lock_guard<std::mutex> g(g_ctx_mu);
  return created_contexts().count(c) ? c->device : -1;
}

// ---------------------------------------------------------------- kernel binaries
// A "binary" names probe kernels (host_acl.h); each kernel is registered with acl_sim once.
struct KernelSpec {
  std::string name, binary;
  acl_sim::ProbeConfig cfg;
  aclrtFuncHandle handle = nullptr;
  std::string execute;  // the binary's execute=<token>: the kernel asks the executor to run it (below)
};

// ---------------------------------------------------------------- the kernel executor (acl_host_set_executor)
// A kernel whose binary line says execute=<token> is also RUN: after the probe's start checks, on the stream's
// thread, the library hands the executor (another process, attached with acl_host_set_executor) the token, the
// kernel's name, its own argument bytes and the grid the launch got, and waits for its answer: which device bytes
// the kernel read and which it wrote (with the bytes). The library then reads every range read (checked: bounds,
// use after free, another device's memory, uninitialised bytes) and writes every range written (checked the same
// way, and so initialised), as its copies do; a failure is reported like any access. The stream's thread waits
// on a pipe only: it never runs interpreter code of the process that launched, so it takes no lock of that process.
struct Execution {
  uint64_t launch_id = 0;
  std::string name, error;
  bool ok = false;
  uint64_t reads = 0, read_bytes = 0, writes = 0, written_bytes = 0, access_errors = 0;
  double seconds = 0;
};
std::mutex g_exec_mu;  // one request at a time on the executor's pipes; guards the fds
int g_exec_request_fd = -1, g_exec_reply_fd = -1;
std::mutex g_exec_records_mu;
std::vector<Execution> &executions() {
  static auto *v = new std::vector<Execution>();
  return *v;
}

// The whole of n bytes through a pipe, as read(2) / write(2) may move part of them (EINTR retried).
template <class Byte, class Call>
bool transfer(int fd, Byte *p, size_t n, Call call) {
  while (n != 0) {
    const ssize_t done = call(fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    p += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}
bool write_all(int fd, const void *data, size_t n) {
  return transfer(fd, static_cast<const char *>(data), n, ::write);
}
bool read_all(int fd, void *data, size_t n) { return transfer(fd, static_cast<char *>(data), n, ::read); }

// One exchange with the executor (g_exec_mu held). Request: u32 length + "token name launch_id g0 g1 g2", u32
// length + the kernel's own argument bytes. Reply: u32 status (0: ran), u32 length + message, u32 count + that many
// (u64 address, u64 bytes) read, u32 count + that many (u64 address, u64 bytes, the bytes) written.
bool exchange(const std::string &head, const uint8_t *args, uint32_t args_size, Execution *e,
              std::vector<std::pair<uint64_t, uint64_t>> *reads,
              std::vector<std::pair<uint64_t, std::vector<uint8_t>>> *writes) {
  const auto head_size = static_cast<uint32_t>(head.size());
  if (!write_all(g_exec_request_fd, &head_size, 4) || !write_all(g_exec_request_fd, head.data(), head.size()) ||
      !write_all(g_exec_request_fd, &args_size, 4) || !write_all(g_exec_request_fd, args, args_size)) {
    e->error = "the executor's request pipe is closed";
    return false;
  }
  uint32_t status = 0, n = 0;
  if (!read_all(g_exec_reply_fd, &status, 4) || !read_all(g_exec_reply_fd, &n, 4)) {
    e->error = "the executor ended without an answer";
    return false;
  }
  auto cut_short = [&] {
    e->error = "the executor's answer is cut short";
    return false;
  };
  std::string message(n, '\0');
  if (!read_all(g_exec_reply_fd, message.data(), n) || !read_all(g_exec_reply_fd, &n, 4)) return cut_short();
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t range[2];
    if (!read_all(g_exec_reply_fd, range, 16)) return cut_short();
    reads->emplace_back(range[0], range[1]);
  }
  if (!read_all(g_exec_reply_fd, &n, 4)) return cut_short();
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t range[2];
    if (!read_all(g_exec_reply_fd, range, 16)) return cut_short();
    writes->emplace_back(range[0], std::vector<uint8_t>(range[1]));
    if (!read_all(g_exec_reply_fd, writes->back().second.data(), range[1])) return cut_short();
  }
  if (status != 0) {
    e->error = "the executor could not run the kernel: " + message;
    return false;
  }
  return true;
}

void execute_kernel(const acl_sim::KernelCall &call, const acl_sim::ProbeRecord &record, void *ctx) {
  const auto *k = static_cast<const KernelSpec *>(ctx);
  const auto started = Clock::now();
  Execution e;
  e.launch_id = call.launch_id;
  e.name = k->name;
  std::vector<std::pair<uint64_t, uint64_t>> reads;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> writes;
  {
    std::lock_guard<std::mutex> g(g_exec_mu);
    if (g_exec_request_fd < 0) {
      e.error = "the kernel's binary asks to be executed and no executor is attached (acl_host_set_executor)";
    } else {
      std::ostringstream head;
      head << k->execute << ' ' << k->name << ' ' << call.launch_id << ' ' << record.grid[0] << ' ' << record.grid[1]
           << ' ' << record.grid[2];
      const size_t off = (k->cfg.has_ffts ? 8 : 0) + (k->cfg.simt_only ? 0 : 16);  // the probe decoded the size
      e.ok = exchange(head.str(), static_cast<const uint8_t *>(call.args) + off,
                      static_cast<uint32_t>(k->cfg.own_args_bytes), &e, &reads, &writes);
      if (!e.ok && e.error.rfind("the executor could not", 0) != 0) {  // the pipes are broken: never again
        g_exec_request_fd = g_exec_reply_fd = -1;
      }
    }
  }
  // What the kernel read must have been readable, what it wrote writable: checked as every access is.
  std::vector<uint8_t> scratch;
  for (const auto &r : reads) {
    scratch.resize(r.second);
    e.reads++;
    e.read_bytes += r.second;
    if (!acl_sim::device_read(reinterpret_cast<const void *>(r.first), scratch.data(), r.second,
                              "executed kernel (read)"))
      e.access_errors++;
  }
  for (const auto &w : writes) {
    e.writes++;
    e.written_bytes += w.second.size();
    if (!acl_sim::device_write(reinterpret_cast<void *>(w.first), w.second.data(), w.second.size(),
                               "executed kernel (write)"))
      e.access_errors++;
  }
  e.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (!e.ok)
    std::fprintf(stderr, "acl_host: kernel '%s' (launch %lu) did not run: %s\n", e.name.c_str(),
                 static_cast<unsigned long>(e.launch_id), e.error.c_str());
  std::lock_guard<std::mutex> g(g_exec_records_mu);
  executions().push_back(std::move(e));
}
struct Binary {
  std::string origin;
  std::map<std::string, KernelSpec *> kernels;
};
std::mutex g_bin_mu;
std::set<Binary *> &binaries() {
  static auto *s = new std::set<Binary *>();
  return *s;
}
std::vector<KernelSpec *> &all_kernels() {
  static auto *v = new std::vector<KernelSpec *>();
  return *v;
}
std::map<const void *, KernelSpec *> &rt_stubs() {  // rtFunctionRegister's stub -> kernel
  static auto *m = new std::map<const void *, KernelSpec *>();
  return *m;
}

constexpr const char *kBinaryMagic = "ACL_HOST_PROBE_BINARY";

// A text field `key=value` (the rest of the token); false when `tok` is not that field.
bool text_field(const std::string &tok, const char *key, std::string *value) {
  const std::string k = std::string(key) + "=";
  if (tok.compare(0, k.size(), k) != 0) return false;
  *value = tok.substr(k.size());
  return true;
}

uint64_t field(const std::string &tok, const char *key, bool *ok) {
  const std::string k = std::string(key) + "=";
  if (tok.compare(0, k.size(), k) != 0) return 0;
  *ok = true;
  return std::strtoull(tok.c_str() + k.size(), nullptr, 10);
}

// Parses a probe binary; nullptr (and `why`) when it is not one.
Binary *parse_binary(const std::string &text, const std::string &origin, std::string *why) {
  std::istringstream in(text);
  std::string magic;
  int version = 0;
  if (!(in >> magic >> version) || magic != kBinaryMagic || version != 1) {
    *why = "not a host ACL probe binary (the first line must read '" + std::string(kBinaryMagic) + " 1')";
    return nullptr;
  }
  auto *bin = new Binary();
  bin->origin = origin;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string word, name;
    if (!(ls >> word)) continue;
    if (word != "kernel" || !(ls >> name)) {
      *why = "unreadable line: " + line;
      delete bin;
      return nullptr;
    }
    auto *k = new KernelSpec();
    k->name = name;
    k->binary = origin;
    k->cfg.name = name;
    std::string tok;
    while (ls >> tok) {
      bool ok = false;
      const uint64_t v0 = field(tok, "has_ffts", &ok);
      if (ok) { k->cfg.has_ffts = v0 != 0; continue; }
      const uint64_t v1 = field(tok, "simt_only", &ok);
      if (ok) { k->cfg.simt_only = v1 != 0; continue; }
      const uint64_t v2 = field(tok, "lock_bytes", &ok);
      if (ok) { k->cfg.lock_bytes = v2; continue; }
      const uint64_t v3 = field(tok, "workspace_bytes", &ok);
      if (ok) { k->cfg.workspace_bytes = v3; continue; }
      const uint64_t v6 = field(tok, "workspace_per_program", &ok);
      if (ok) { k->cfg.workspace_per_program = v6; continue; }
      const uint64_t v4 = field(tok, "own_args_bytes", &ok);
      if (ok) { k->cfg.own_args_bytes = v4; continue; }
      const uint64_t v5 = field(tok, "sim_time_us", &ok);
      if (ok) { k->cfg.sim_time_us = static_cast<uint32_t>(v5); continue; }
      const uint64_t v7 = field(tok, "locks_used", &ok);
      if (ok) { k->cfg.locks_used = v7 != 0; continue; }
      if (text_field(tok, "execute", &k->execute) && !k->execute.empty()) continue;
      *why = "unknown kernel field '" + tok + "'";
      delete k;
      delete bin;
      return nullptr;
    }
    if (!k->execute.empty()) {
      k->cfg.execute = &execute_kernel;
      k->cfg.execute_ctx = k;
    }
    k->handle = acl_sim::register_probe_kernel(k->cfg);
    bin->kernels[name] = k;
    std::lock_guard<std::mutex> g(g_bin_mu);
    all_kernels().push_back(k);
  }
  if (bin->kernels.empty()) {
    *why = "the binary names no kernel";
    delete bin;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(g_bin_mu);
  binaries().insert(bin);
  return bin;
}

Binary *known_binary(void *handle) {
  std::lock_guard<std::mutex> g(g_bin_mu);
  auto *b = static_cast<Binary *>(handle);
  return binaries().count(b) ? b : nullptr;
}

void recent_error(const std::string &msg) {
  t_recent_msg = msg;
  t_has_msg = true;
}

// ---------------------------------------------------------------- JSON
void json_str(std::ostringstream &o, const std::string &s) {
  o << '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': o << "\\\""; break;
      case '\\': o << "\\\\"; break;
      case '\n': o << "\\n"; break;
      case '\t': o << "\\t"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o << b;
        } else {
          o << c;
        }
    }
  }
  o << '"';
}

void json_extent(std::ostringstream &o, const acl_sim::Extent &e) {
  o << "{\"kind\":";
  json_str(o, acl_sim::extent_kind_name(e.kind));
  o << ",\"base\":" << e.base << ",\"size\":" << e.size << ",\"device\":" << e.device << ",\"block_base\":"
    << e.block_base << ",\"block_size\":" << e.block_size << ",\"freed\":" << (e.freed ? "true" : "false")
    << ",\"request_seq\":" << e.request_seq << "}";
}

template <class V>
void json_list(std::ostringstream &o, const V &v) {
  o << '[';
  bool first = true;
  for (const auto &x : v) {
    if (!first) o << ',';
    first = false;
    o << x;
  }
  o << ']';
}

void json_counters(std::ostringstream &o) {
  const acl_sim::Counters c = acl_sim::counters();
  o << "{";
#define ACL_HOST_COUNTER(n) o << "\"" #n "\":" << c.n << ",";
  ACL_HOST_COUNTER(sync_copies) ACL_HOST_COUNTER(async_copies) ACL_HOST_COUNTER(pageable_async_copies)
  ACL_HOST_COUNTER(memsets) ACL_HOST_COUNTER(launches) ACL_HOST_COUNTER(host_blocking)
  ACL_HOST_COUNTER(pinned_allocs) ACL_HOST_COUNTER(pinned_frees) ACL_HOST_COUNTER(device_allocs)
  ACL_HOST_COUNTER(device_frees) ACL_HOST_COUNTER(events_created) ACL_HOST_COUNTER(events_recorded)
  ACL_HOST_COUNTER(event_queries) ACL_HOST_COUNTER(errors) ACL_HOST_COUNTER(captured_tasks)
  ACL_HOST_COUNTER(replays) ACL_HOST_COUNTER(stale_replay_sources) ACL_HOST_COUNTER(captures_invalidated)
  ACL_HOST_COUNTER(app_logs) ACL_HOST_COUNTER(device_synchronizations) ACL_HOST_COUNTER(live_device_allocs)
  ACL_HOST_COUNTER(live_pinned) ACL_HOST_COUNTER(live_events) ACL_HOST_COUNTER(live_models)
#undef ACL_HOST_COUNTER
  o << "\"device_memory_in_use\":[";
  for (int d = 0; d < kDevices; ++d) o << (d ? "," : "") << acl_sim::device_memory_in_use(d);
  o << "]}";
}

void json_probe(std::ostringstream &o, const acl_sim::ProbeRecord &r) {
  o << "{\"launch_id\":" << r.launch_id << ",\"captured_launch_id\":" << r.captured_launch_id
    << ",\"device\":" << r.device << ",\"name\":";
  json_str(o, r.name);
  o << ",\"stream\":" << reinterpret_cast<uintptr_t>(r.stream) << ",\"block_dim\":" << r.block_dim << ",\"grid\":["
    << r.grid[0] << "," << r.grid[1] << "," << r.grid[2] << "],\"decoded\":" << (r.decoded ? "true" : "false")
    << ",\"ffts_ok\":" << (r.ffts_ok ? "true" : "false") << ",\"lock_ptr\":" << r.lock_ptr
    << ",\"workspace_ptr\":" << r.workspace_ptr << ",\"lock_bytes\":" << r.lock_bytes
    << ",\"workspace_bytes\":" << r.workspace_bytes << ",\"lock_slots_at_start\":";
  json_list(o, r.lock_slots_at_start);
  o << ",\"distinct_lock_values\":";
  json_list(o, r.distinct_lock_values);
  o << ",\"locks_readable\":" << (r.locks_readable ? "true" : "false")
    << ",\"regions_overlap\":" << (r.regions_overlap ? "true" : "false")
    << ",\"overlaps_with_running\":" << r.overlaps_with_running
    << ",\"locks_unchanged\":" << (r.locks_unchanged ? "true" : "false")
    << ",\"workspace_written\":" << (r.workspace_written ? "true" : "false") << ",\"access_errors\":" << r.access_errors
    << ",\"lock_extent\":";
  json_extent(o, r.lock_extent);
  o << ",\"workspace_extent\":";
  json_extent(o, r.workspace_extent);
  o << ",\"lock_available\":" << r.lock_available << ",\"workspace_available\":" << r.workspace_available
    << ",\"lock_overrun\":" << r.lock_overrun << ",\"workspace_overrun\":" << r.workspace_overrun << "}";
}

std::string report_json() {
  std::ostringstream o;
  o << "{\"library\":\"host ACL library: a test double of CANN for torch-npu-inductor-patches' tests, never "
       "in a user's process\",\"devices\":"
    << kDevices << ",\"device_memory\":" << kDeviceMemory << ",\"counters\":";
  json_counters(o);
  o << ",\"errors\":[";
  bool first = true;
  for (const acl_sim::ErrorReport &e : acl_sim::errors()) {
    o << (first ? "" : ",") << "{\"kind\":";
    first = false;
    json_str(o, acl_sim::error_kind_name(e.kind));
    o << ",\"message\":";
    json_str(o, e.message);
    o << "}";
  }
  o << "],\"probe_records\":[";
  first = true;
  for (const acl_sim::ProbeRecord &r : acl_sim::probe_records()) {
    o << (first ? "" : ",");
    first = false;
    json_probe(o, r);
  }
  o << "]";
  std::lock_guard<std::mutex> g(g_calls_mu);
  o << ",\"calls\":{";
  first = true;
  for (const auto &kv : stats()) {
    o << (first ? "" : ",");
    first = false;
    json_str(o, fn_name(kv.first));
    o << ":{\"calls\":" << kv.second.calls << ",\"failed\":" << kv.second.failed << ",\"threads\":{";
    bool f2 = true;
    for (const auto &t : kv.second.threads) {
      o << (f2 ? "" : ",") << "\"" << t.first << "\":" << t.second;
      f2 = false;
    }
    o << "}}";
  }
  for (int kind = 1; kind <= 2; ++kind) {
    o << (kind == 1 ? "},\"noop_calls\":{" : "},\"missing_calls\":{");
    first = true;
    for (const auto &kv : stats()) {
      if (kv.first < 0 || kv.first >= acl_host_function_count || acl_host_function_kinds[kv.first] != kind) continue;
      o << (first ? "" : ",");
      first = false;
      json_str(o, fn_name(kv.first));
      o << ":" << kv.second.calls;
    }
  }
  o << "},\"trace\":[";
  first = true;
  for (const TraceEntry &t : trace()) {
    o << (first ? "" : ",") << "[" << t.seq << "," << t.tid << ",";
    first = false;
    json_str(o, fn_name(t.index));
    o << "," << t.rc << "]";
  }
  o << "],\"operators\":";
  acl_host::opapi_report_json(o);
  o << ",\"kernels\":[";
  {
    std::lock_guard<std::mutex> gb(g_bin_mu);
    first = true;
    for (const KernelSpec *k : all_kernels()) {
      o << (first ? "" : ",") << "{\"name\":";
      first = false;
      json_str(o, k->name);
      o << ",\"binary\":";
      json_str(o, k->binary);
      o << ",\"has_ffts\":" << (k->cfg.has_ffts ? "true" : "false")
        << ",\"simt_only\":" << (k->cfg.simt_only ? "true" : "false") << ",\"lock_bytes\":" << k->cfg.lock_bytes
        << ",\"workspace_bytes\":" << k->cfg.workspace_bytes
        << ",\"workspace_per_program\":" << k->cfg.workspace_per_program << ",\"own_args_bytes\":" << k->cfg.own_args_bytes
        << ",\"sim_time_us\":" << k->cfg.sim_time_us << ",\"execute\":";
      json_str(o, k->execute);
      o << "}";
    }
  }
  o << "],\"executions\":[";
  {
    std::lock_guard<std::mutex> ge(g_exec_records_mu);
    first = true;
    for (const Execution &e : executions()) {
      o << (first ? "" : ",") << "{\"launch_id\":" << e.launch_id << ",\"name\":";
      first = false;
      json_str(o, e.name);
      o << ",\"ok\":" << (e.ok ? "true" : "false") << ",\"error\":";
      json_str(o, e.error);
      o << ",\"reads\":" << e.reads << ",\"read_bytes\":" << e.read_bytes << ",\"writes\":" << e.writes
        << ",\"written_bytes\":" << e.written_bytes << ",\"access_errors\":" << e.access_errors
        << ",\"seconds\":" << e.seconds << "}";
    }
  }
  o << "]}";
  return o.str();
}

}  // namespace

void acl_host::recent_error(const std::string &msg) { ::recent_error(msg); }

// ---- stream holds (host_acl.h): a kernel of the double's own that waits on its stream's thread until released
namespace {
struct Holds {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next = 0;
  std::map<uint64_t, int> state;  // 0 held, 1 released, 2 let go by its limit
};
Holds &holds() {
  static auto *h = new Holds();
  return *h;
}
struct HoldArgs {
  uint64_t id;
  uint32_t limit_ms;
};
void hold_kernel(const acl_sim::KernelCall &call) {
  HoldArgs a;
  std::memcpy(&a, call.args, sizeof a);
  Holds &h = holds();
  std::unique_lock<std::mutex> lk(h.mu);
  if (!h.cv.wait_for(lk, std::chrono::milliseconds(a.limit_ms), [&] { return h.state[a.id] != 0; }))
    h.state[a.id] = 2;
}
}  // namespace

// ================================================================ control surface (host_acl.h)
extern "C" {

__attribute__((visibility("default"))) const char *acl_host_report_json(void) {
  static std::mutex mu;
  static std::string *out = new std::string();
  std::string r = report_json();
  std::lock_guard<std::mutex> g(mu);
  *out = std::move(r);
  return out->c_str();
}

__attribute__((visibility("default"))) void acl_host_reset(void) {
  acl_host_stream_release(0);
  acl_sim::reset();
  apply_configuration();  // reset() forgets device capacities
  acl_host::opapi_reset();
  std::lock_guard<std::mutex> g(g_calls_mu);
  stats().clear();
  logged_missing().clear();
  trace().clear();
  std::lock_guard<std::mutex> ge(g_exec_records_mu);
  executions().clear();
}

__attribute__((visibility("default"))) int acl_host_set_executor(int request_fd, int reply_fd) {
  if ((request_fd < 0) != (reply_fd < 0)) return -1;
  std::lock_guard<std::mutex> g(g_exec_mu);
  g_exec_request_fd = request_fd;
  g_exec_reply_fd = reply_fd;
  return 0;
}

__attribute__((visibility("default"))) uint64_t acl_host_stream_hold(void *stream, uint32_t limit_ms) {
  static aclrtFuncHandle kernel = acl_sim::register_kernel("acl_host_stream_hold", &hold_kernel, nullptr);
  Holds &h = holds();
  HoldArgs a{0, limit_ms};
  {
    std::lock_guard<std::mutex> g(h.mu);
    a.id = ++h.next;
    h.state[a.id] = 0;
  }
  if (aclrtLaunchKernelWithHostArgs(kernel, 1, static_cast<aclrtStream>(stream), nullptr, &a, sizeof a, nullptr, 0) ==
      ACL_SUCCESS)
    return a.id;
  std::lock_guard<std::mutex> g(h.mu);
  h.state.erase(a.id);
  return 0;
}

__attribute__((visibility("default"))) int acl_host_stream_release(uint64_t id) {
  Holds &h = holds();
  int released = 0;
  {
    std::lock_guard<std::mutex> g(h.mu);
    for (auto &kv : h.state)
      if ((id == 0 || kv.first == id) && kv.second == 0) {
        kv.second = 1;
        ++released;
      }
  }
  h.cv.notify_all();
  return released;
}

__attribute__((visibility("default"))) uint64_t acl_host_pause_arm(const char *functions, int after,
                                                                   uint32_t limit_ms) {
  return acl_sim::arm_pause(functions, after != 0, limit_ms);
}

__attribute__((visibility("default"))) int acl_host_pause_reached(uint64_t id, uint32_t wait_ms) {
  return acl_sim::pause_reached(id, wait_ms) ? 1 : 0;
}

__attribute__((visibility("default"))) int acl_host_pause_release(uint64_t id) { return acl_sim::release_pause(id); }

__attribute__((visibility("default"))) int acl_host_error_count(void) {
  return static_cast<int>(acl_sim::errors().size());
}

__attribute__((visibility("default"))) uint64_t acl_host_last_launch_id(void) { return acl_sim::last_launch_id(); }

__attribute__((visibility("default"))) const char *acl_host_probe_record_json(uint64_t launch_id) {
  static thread_local std::string out;
  acl_sim::ProbeRecord r;
  if (!acl_sim::probe_record(launch_id, &r)) return nullptr;
  std::ostringstream o;
  json_probe(o, r);
  out = o.str();
  return out.c_str();
}

__attribute__((visibility("default"))) const char *acl_host_counters_json(void) {
  static thread_local std::string out;
  std::ostringstream o;
  json_counters(o);
  out = o.str();
  return out.c_str();
}

__attribute__((visibility("default"))) int acl_host_error_count_of(const char *kind) {
  int n = 0;
  for (const acl_sim::ErrorReport &e : acl_sim::errors())
    n += kind != nullptr && std::strcmp(acl_sim::error_kind_name(e.kind), kind) == 0;
  return n;
}

__attribute__((visibility("default"))) const char *acl_host_app_log(int index, int *level) {
  static thread_local std::string out;
  const std::vector<acl_sim::AppLog> logs = acl_sim::app_logs();
  if (index < 0 || static_cast<size_t>(index) >= logs.size()) return nullptr;
  if (level != nullptr) *level = static_cast<int>(logs[static_cast<size_t>(index)].level);
  out = logs[static_cast<size_t>(index)].message;
  return out.c_str();
}

__attribute__((visibility("default"))) int acl_host_inject_fault(const char *function, uint64_t nth, int code) {
  try {
    acl_sim::inject_fault(function, nth, static_cast<aclError>(code));
    return 0;
  } catch (const std::exception &) {  // a function acl_sim cannot fail on purpose
    return -1;
  }
}

__attribute__((visibility("default"))) void acl_host_set_device_base_offset(uint64_t bytes) {
  acl_sim::set_device_base_offset(static_cast<size_t>(bytes));
}

__attribute__((visibility("default"))) void acl_host_set_device_memory(int device, uint64_t bytes) {
  acl_sim::set_device_memory_capacity(device, bytes != 0 ? bytes : kDeviceMemory);
}

__attribute__((visibility("default"))) void acl_host_set_event_id_limit(int device, uint32_t n) {
  acl_sim::set_event_id_limit(device, n);
}

__attribute__((visibility("default"))) uint32_t acl_host_event_ids_in_use(int device) {
  return acl_sim::event_ids_in_use(device);
}

__attribute__((visibility("default"))) int acl_host_missing_count(void) {
  std::lock_guard<std::mutex> g(g_calls_mu);
  uint64_t n = 0;
  for (const auto &kv : stats())
    if (kv.first >= 0 && kv.first < acl_host_function_count && acl_host_function_kinds[kv.first] == 2)
      n += kv.second.calls;
  return static_cast<int>(n);
}

void acl_host_note_call(int index, long long rc) {
  acl_sim::pause_point(fn_name(index), true);
  const long tid = gettid_now();
  if (rc != 0) {
    t_last_error = static_cast<aclError>(rc);
    if (!t_has_msg) recent_error(std::string("host ACL library: ") + fn_name(index) + " returned " + std::to_string(rc));
  }
  std::lock_guard<std::mutex> g(g_calls_mu);
  Stat &s = stats()[index];
  s.calls++;
  s.failed += rc != 0;
  s.threads[tid]++;
  if (kTrace != 0) {
    trace().push_back(TraceEntry{++g_trace_seq, tid, index, rc});
    if (trace().size() > kTrace) trace().pop_front();
  }
}

void acl_host_note_missing(int index) {
  recent_error(std::string("host ACL library (a test double of CANN): ") + fn_name(index) + " is not implemented");
  std::lock_guard<std::mutex> g(g_calls_mu);
  if (logged_missing().insert(index).second)
    std::fprintf(stderr, "acl_host: %s is not implemented by the host ACL library (a test double of CANN): failed\n",
                 fn_name(index));
}

// ================================================================ ACL functions beyond acl_sim
// Initialisation. A second aclInit fails as CANN's does (torch_npu accepts that code).
aclError aclInit(const char *configPath) {
  (void)configPath;
  if (g_initialised.exchange(true)) return ACL_ERROR_REPEAT_INITIALIZE;
  return ACL_SUCCESS;
}

const char *aclGetRecentErrMsg() {
  if (!t_has_msg) return nullptr;
  t_returned_msg = t_recent_msg;  // stays valid until this thread's next call
  t_has_msg = false;
  return t_returned_msg.c_str();
}

aclError aclrtGetLastError(aclrtLastErrLevel level) {
  (void)level;
  const aclError e = t_last_error;
  t_last_error = ACL_SUCCESS;
  return e;
}

aclError aclrtPeekAtLastError(aclrtLastErrLevel level) {
  (void)level;
  return t_last_error;
}

// ---- devices and contexts
aclError aclrtGetDeviceCount(uint32_t *count) {
  if (count == nullptr) return ACL_ERROR_INVALID_PARAM;
  *count = static_cast<uint32_t>(acl_sim::device_count());
  return ACL_SUCCESS;
}

aclError aclrtGetCurrentContext(aclrtContext *context) {
  if (context == nullptr) return ACL_ERROR_INVALID_PARAM;
  const int d = acl_sim::internal::thread_device();
  if (d < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  *context = &g_primary[d];
  return ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  const int d = context_device(context);
  if (d < 0) return ACL_ERROR_RT_INVALID_HANDLE;
  return aclrtSetDevice(d);
}

aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId) {
  if (context == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (deviceId < 0 || deviceId >= acl_sim::device_count()) return ACL_ERROR_INVALID_DEVICE;
  auto *c = new Context{deviceId};
  {
    std::lock_guard<std::mutex> g(g_ctx_mu);
    created_contexts().insert(c);
  }
  *context = c;
  return aclrtSetDevice(deviceId);  // CANN: the new context becomes the thread's current one
}

aclError aclrtDestroyContext(aclrtContext context) {
  std::lock_guard<std::mutex> g(g_ctx_mu);
  auto *c = static_cast<Context *>(context);
  if (!created_contexts().erase(c)) return ACL_ERROR_RT_INVALID_HANDLE;
  delete c;
  return ACL_SUCCESS;
}

// What torch_npu 2.7.1 knows as an Ascend 910B (SocVersion 220, the project's stand-in device).
const char *aclrtGetSocName() { return "Ascend910B1"; }

// The SoC's platform table, as CANN reads it (acl.cpp, aclGetDeviceCapabilityImpl: SoCInfo's ai_core_cnt,
// vector_core_cnt and l2_size from platform_config/cann/Ascend910B1.ini): fixed counts, not the resource limits.
// torch_npu's device properties, and so torch_npu Inductor's tiling, read them.
aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo deviceInfo, int64_t *value) {
  if (value == nullptr || deviceId >= static_cast<uint32_t>(acl_sim::device_count())) return ACL_ERROR_INVALID_PARAM;
  switch (deviceInfo) {
    case ACL_DEVICE_INFO_AI_CORE_NUM: *value = kCubeCores; return ACL_SUCCESS;
    case ACL_DEVICE_INFO_VECTOR_CORE_NUM: *value = kVectorCores; return ACL_SUCCESS;
    case ACL_DEVICE_INFO_L2_SIZE: *value = 192LL << 20; return ACL_SUCCESS;
    default: return ACL_ERROR_INVALID_PARAM;
  }
}

// The device's memory as allocations see it: the capacity a test set (acl_host_set_device_memory), not more
// (torch_npu's allocator takes its memory fraction and its out-of-memory message from it).
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total) {
  (void)attr;
  if (free == nullptr || total == nullptr) return ACL_ERROR_INVALID_PARAM;
  const int d = acl_sim::internal::thread_device();
  if (d < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  uint64_t capacity = 0, used = 0;
  acl_sim::internal::device_memory(d, &capacity, &used);
  *total = capacity;
  *free = used < capacity ? capacity - used : 0;
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t *value) {
  if (value == nullptr || (type != ACL_RT_DEV_RES_CUBE_CORE && type != ACL_RT_DEV_RES_VECTOR_CORE))
    return ACL_ERROR_INVALID_PARAM;
  if (deviceId < 0 || deviceId >= acl_sim::device_count()) return ACL_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  const uint32_t limit = g_res_limit[deviceId][type == ACL_RT_DEV_RES_VECTOR_CORE];
  *value = limit != 0 ? limit : type == ACL_RT_DEV_RES_VECTOR_CORE ? kVectorCores : kCubeCores;
  return ACL_SUCCESS;
}

aclError aclrtSetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t value) {
  if (type != ACL_RT_DEV_RES_CUBE_CORE && type != ACL_RT_DEV_RES_VECTOR_CORE) return ACL_ERROR_INVALID_PARAM;
  if (deviceId < 0 || deviceId >= acl_sim::device_count()) return ACL_ERROR_INVALID_DEVICE;
  const uint32_t most = type == ACL_RT_DEV_RES_VECTOR_CORE ? kVectorCores : kCubeCores;
  if (value == 0 || value > most) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_res_limit[deviceId][type == ACL_RT_DEV_RES_VECTOR_CORE] = value;
  return ACL_SUCCESS;
}

aclError aclrtResetDeviceResLimit(int32_t deviceId) {
  if (deviceId < 0 || deviceId >= acl_sim::device_count()) return ACL_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_res_limit[deviceId][0] = g_res_limit[deviceId][1] = 0;
  return ACL_SUCCESS;
}

aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
  if (canAccessPeer == nullptr) return ACL_ERROR_INVALID_PARAM;
  const int n = acl_sim::device_count();
  if (deviceId < 0 || deviceId >= n || peerDeviceId < 0 || peerDeviceId >= n) return ACL_ERROR_INVALID_DEVICE;
  *canAccessPeer = 0;  // acl_sim reports a kernel touching another device's memory: no peer access here
  return ACL_SUCCESS;
}

// ---- memory
// The caching allocator's allocation from torch_npu 2.7.1.post10 on: the size rounded up to 32 bytes,
// without aclrtMalloc's padding.
aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  if (size == 0) return ACL_ERROR_INVALID_PARAM;
  return aclrtMalloc(devPtr, (size + 31) / 32 * 32, policy);
}

// Synchronous memset: written now, checked (bounds, use after free) as acl_sim checks every access. The thread needs a
// context (CANN: ApiImpl::MemSetSync, api_impl.cc:3205-3206).
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  if (devPtr == nullptr || count > maxCount) return ACL_ERROR_INVALID_PARAM;
  if (count == 0) return ACL_SUCCESS;
  if (acl_sim::internal::thread_device() < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  std::vector<uint8_t> bytes(count, static_cast<uint8_t>(value));
  return acl_sim::device_write(devPtr, bytes.data(), count, "aclrtMemset") ? ACL_SUCCESS : ACL_ERROR_RT_PARAM_INVALID;
}

// ---- streams
// CANN's ACL layer keeps the flags it knows and drops the others (acl/aclrt_impl/stream.cpp:53-92); the runtime then
// takes ACL_STREAM_DEVICE_USE_ONLY (its RT_STREAM_CP_PROCESS_USE) only alone (api_error.cc:1375-1381:
// ACL_ERROR_RT_PARAM_INVALID) and clamps the priority. A PERSISTENT or DEVICE_USE_ONLY stream: its synchronisation and
// query return at once, as CANN's do; the host's work on it is refused (acl_runtime.cpp, unmodelled_stream).
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag) {
  (void)priority;
  constexpr uint32_t kKnown = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20;  // FAST_LAUNCH .. DEVICE_USE_ONLY (acl_rt.h)
  constexpr uint32_t kDeviceUseOnly = 0x20;
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  flag &= kKnown;
  if ((flag & kDeviceUseOnly) != 0 && flag != kDeviceUseOnly) return ACL_ERROR_RT_PARAM_INVALID;
  return acl_sim::internal::create_stream(stream, flag);
}

// CANN drops the work the stream has not started (acl_runtime.cpp, destroy_stream, says what becomes of the events
// the dropped tasks would have recorded).
aclError aclrtDestroyStreamForce(aclrtStream stream) { return acl_sim::internal::destroy_stream(stream, true); }

// The timeout in ms: -1 none, 0 and below -1 refused (CANN: stream.cpp:137-149, device.cpp:168-175 and the
// runtime's api_error.cc:1441-1444, :3479-3481); past it ACL_ERROR_RT_STREAM_SYNC_TIMEOUT.
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
  if (timeout < -1 || timeout == 0) return ACL_ERROR_RT_PARAM_INVALID;
  return acl_sim::internal::synchronize_stream(stream, timeout);
}

aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout) {
  if (timeout < -1 || timeout == 0) return ACL_ERROR_RT_PARAM_INVALID;
  return acl_sim::internal::synchronize_device(timeout);
}

aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status) {
  if (status == nullptr) return ACL_ERROR_INVALID_PARAM;
  bool idle = false;
  if (aclError e = acl_sim::internal::stream_idle(stream, &idle)) return e;
  *status = idle ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError aclrtStreamGetId(aclrtStream stream, int32_t *streamId) {
  if (streamId == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (acl_sim::internal::stream_device(stream) < 0) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  auto it = g_stream_ids.find(stream);
  if (it == g_stream_ids.end()) it = g_stream_ids.emplace(stream, g_next_stream_id++).first;
  *streamId = it->second;
  return ACL_SUCCESS;
}

aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode) {
  if (acl_sim::internal::stream_device(stream) < 0) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_failure_mode[stream] = mode;
  return ACL_SUCCESS;
}

aclError aclrtSetStreamOverflowSwitch(aclrtStream stream, uint32_t flag) {
  if (acl_sim::internal::stream_device(stream) < 0) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_overflow_switch[stream] = flag;
  return ACL_SUCCESS;
}

aclError aclrtGetStreamOverflowSwitch(aclrtStream stream, uint32_t *flag) {
  if (flag == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (acl_sim::internal::stream_device(stream) < 0) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_settings_mu);
  auto it = g_overflow_switch.find(stream);
  *flag = it == g_overflow_switch.end() ? 0 : it->second;
  return ACL_SUCCESS;
}

// Stream-ordered: later work on `stream` waits (on the stream's thread) for the event's last record.
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  return acl_sim::internal::stream_wait_event(stream, event);
}

// ---- events: the creation kind decides the never-recorded query, the waits and the event ids a record takes
// (acl_sim/control.h: set_event_id_limit); flags the double does not model (IPC, EXTERNAL, MC2) are refused.
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag) {
  return acl_sim::internal::create_event(event, flag, false);
}

aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag) {
  return acl_sim::internal::create_event(event, flag, true);
}

aclError aclrtSynchronizeEvent(aclrtEvent event) {
  acl_sim::pause_point("aclrtSynchronizeEvent", false);  // a window before the wait (the real-runtime scenarios)
  return acl_sim::internal::synchronize_event(event);
}

// ---- settings torch_npu writes (and reads back)
aclError aclrtSetSysParamOpt(aclSysParamOpt opt, int64_t value) {
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_sys_params[static_cast<int>(opt)] = value;
  return ACL_SUCCESS;
}

aclError aclrtCtxSetSysParamOpt(aclSysParamOpt opt, int64_t value) {
  if (acl_sim::internal::thread_device() < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_sys_params[static_cast<int>(opt)] = value;
  return ACL_SUCCESS;
}

// An option never set reads as 0, CANN's default for each of them.
aclError aclrtGetSysParamOpt(aclSysParamOpt opt, int64_t *value) {
  if (value == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  auto it = g_sys_params.find(static_cast<int>(opt));
  *value = it == g_sys_params.end() ? 0 : it->second;
  return ACL_SUCCESS;
}

aclError aclrtCtxGetSysParamOpt(aclSysParamOpt opt, int64_t *value) {
  if (acl_sim::internal::thread_device() < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  return aclrtGetSysParamOpt(opt, value);
}

aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode) {
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_sat_mode = static_cast<int>(mode);
  return ACL_SUCCESS;
}

#ifdef ACL_HOST_HAS_aclrtGetDeviceSatMode
aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode) {
  if (mode == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  *mode = static_cast<aclrtFloatOverflowMode>(g_sat_mode);
  return ACL_SUCCESS;
}
#endif

aclError aclrtSetOpExecuteTimeOut(uint32_t timeout) {
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_op_execute_timeout = timeout;
  return ACL_SUCCESS;
}

#ifdef ACL_HOST_HAS_aclrtSetOpExecuteTimeOutV2
aclError aclrtSetOpExecuteTimeOutV2(uint64_t timeout, uint64_t *actualTimeout) {
  if (actualTimeout == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_op_execute_timeout = timeout;
  *actualTimeout = timeout;
  return ACL_SUCCESS;
}
#endif

aclError aclrtSetOpWaitTimeout(uint32_t timeout) {
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_op_wait_timeout = timeout;
  return ACL_SUCCESS;
}

aclError aclSetCompileopt(aclCompileOpt opt, const char *value) {
  if (value == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  g_compile_opts[static_cast<int>(opt)] = value;
  return ACL_SUCCESS;
}

size_t aclGetCompileoptSize(aclCompileOpt opt) {
  std::lock_guard<std::mutex> g(g_settings_mu);
  auto it = g_compile_opts.find(static_cast<int>(opt));
  return (it == g_compile_opts.end() ? 0 : it->second.size()) + 1;
}

aclError aclGetCompileopt(aclCompileOpt opt, char *value, size_t length) {
  if (value == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_settings_mu);
  auto it = g_compile_opts.find(static_cast<int>(opt));
  const std::string v = it == g_compile_opts.end() ? "" : it->second;
  if (length < v.size() + 1) return ACL_ERROR_INVALID_PARAM;
  std::memcpy(value, v.c_str(), v.size() + 1);
  return ACL_SUCCESS;
}

// Capture mode of this thread (torch_npu swaps it around a capture).
aclError aclmdlRICaptureThreadExchangeMode(aclmdlRICaptureMode *mode) {
  if (mode == nullptr) return ACL_ERROR_INVALID_PARAM;
  const int old = t_capture_mode;
  t_capture_mode = static_cast<int>(*mode);
  *mode = static_cast<aclmdlRICaptureMode>(old);
  return ACL_SUCCESS;
}

#ifdef ACL_HOST_HAS_aclmdlRIGetId
// A captured model's id: acl_sim's (the id of its private memory pool too), live or still capturing.
aclError aclmdlRIGetId(aclmdlRI modelRI, uint32_t *modelRIId) {
  if (modelRIId == nullptr) return ACL_ERROR_INVALID_PARAM;
  uint64_t id = 0;
  if (!acl_sim::internal::model_id(modelRI, &id)) return ACL_ERROR_RT_INVALID_HANDLE;
  *modelRIId = static_cast<uint32_t>(id);
  return ACL_SUCCESS;
}
#endif

// ---- kernel binaries: the probe (host_acl.h); the layout of cpp_wrapper_npu.py
#ifdef ACL_HOST_HAS_aclrtBinaryLoadFromData
aclError aclrtBinaryLoadFromData(const void *data, size_t length, const aclrtBinaryLoadOptions *options,
                                 aclrtBinHandle *binHandle) {
  (void)options;
  if (data == nullptr || length == 0 || binHandle == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::string why;
  Binary *b = parse_binary(std::string(static_cast<const char *>(data), length), "(data)", &why);
  if (b == nullptr) {
    recent_error("aclrtBinaryLoadFromData: " + why);
    return ACL_ERROR_INVALID_FILE;
  }
  *binHandle = b;
  return ACL_SUCCESS;
}
#endif

#ifdef ACL_HOST_HAS_aclrtBinaryLoadFromFile
aclError aclrtBinaryLoadFromFile(const char *binPath, aclrtBinaryLoadOptions *options, aclrtBinHandle *binHandle) {
  (void)options;
  if (binPath == nullptr || binHandle == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::ifstream f(binPath, std::ios::binary);
  if (!f) return ACL_ERROR_INVALID_FILE;
  std::stringstream text;
  text << f.rdbuf();
  std::string why;
  Binary *b = parse_binary(text.str(), binPath, &why);
  if (b == nullptr) {
    recent_error(std::string("aclrtBinaryLoadFromFile: ") + binPath + ": " + why);
    return ACL_ERROR_INVALID_FILE;
  }
  *binHandle = b;
  return ACL_SUCCESS;
}
#endif

#ifdef ACL_HOST_HAS_aclrtBinaryGetFunction
aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char *kernelName, aclrtFuncHandle *funcHandle) {
  if (kernelName == nullptr || funcHandle == nullptr) return ACL_ERROR_INVALID_PARAM;
  Binary *b = known_binary(binHandle);
  if (b == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  auto it = b->kernels.find(kernelName);
  if (it == b->kernels.end()) {
    recent_error(std::string("aclrtBinaryGetFunction: no kernel '") + kernelName + "' in " + b->origin);
    return ACL_ERROR_RT_PARAM_INVALID;
  }
  *funcHandle = it->second->handle;
  return ACL_SUCCESS;
}
#endif

#ifdef ACL_HOST_HAS_aclrtBinaryUnLoad
aclError aclrtBinaryUnLoad(aclrtBinHandle binHandle) {
  std::lock_guard<std::mutex> g(g_bin_mu);
  // The kernels stay registered with acl_sim (a handle once handed out stays decodable for reports).
  return binaries().erase(static_cast<Binary *>(binHandle)) ? ACL_SUCCESS : ACL_ERROR_RT_INVALID_HANDLE;
}
#endif

// ---- the older layout (codegen/cpp_wrapper.py): rtDevBinaryRegister / rtFunctionRegister / rtKernelLaunch
#ifdef ACL_HOST_HAS_rtKernelLaunch
rtError_t rtSetDevice(int32_t device) { return static_cast<rtError_t>(aclrtSetDevice(device)); }

rtError_t rtDevBinaryRegister(const rtDevBinary_t *bin, void **handle) {
  if (bin == nullptr || handle == nullptr || bin->data == nullptr || bin->length == 0)
    return static_cast<rtError_t>(ACL_ERROR_RT_PARAM_INVALID);
  std::string why;
  Binary *b = parse_binary(std::string(static_cast<const char *>(bin->data), bin->length), "(rtDevBinaryRegister)",
                           &why);
  if (b == nullptr) {
    recent_error("rtDevBinaryRegister: " + why);
    return static_cast<rtError_t>(ACL_ERROR_INVALID_FILE);
  }
  *handle = b;
  return RT_ERROR_NONE;
}

// `devFunc` is the kernel's name (the rendered launchers pass it as a const char*).
rtError_t rtFunctionRegister(void *binHandle, const void *stubFunc, const char *stubName, const void *devFunc,
                             uint32_t funcMode) {
  (void)stubName;
  (void)funcMode;
  if (stubFunc == nullptr || devFunc == nullptr) return static_cast<rtError_t>(ACL_ERROR_RT_PARAM_INVALID);
  Binary *b = known_binary(binHandle);
  if (b == nullptr) return static_cast<rtError_t>(ACL_ERROR_RT_INVALID_HANDLE);
  auto it = b->kernels.find(static_cast<const char *>(devFunc));
  if (it == b->kernels.end()) return static_cast<rtError_t>(ACL_ERROR_RT_PARAM_INVALID);
  std::lock_guard<std::mutex> g(g_bin_mu);
  if (!rt_stubs().emplace(stubFunc, it->second).second) return RT_ERROR_KERNEL_DUPLICATE;
  return RT_ERROR_NONE;
}

rtError_t rtKernelLaunch(const void *stubFunc, uint32_t blockDim, void *args, uint32_t argsSize, rtSmDesc_t *smDesc,
                         rtStream_t stream) {
  (void)smDesc;
  KernelSpec *k = nullptr;
  {
    std::lock_guard<std::mutex> g(g_bin_mu);
    auto it = rt_stubs().find(stubFunc);
    if (it != rt_stubs().end()) k = it->second;
  }
  if (k == nullptr) return static_cast<rtError_t>(ACL_ERROR_RT_INVALID_HANDLE);
  return static_cast<rtError_t>(
      aclrtLaunchKernelWithHostArgs(k->handle, blockDim, stream, nullptr, args, argsSize, nullptr, 0));
}

// The FFTS control address the older launchers pass: acl_sim's hardware sync address.
rtError_t rtGetC2cCtrlAddr(uint64_t *addr, uint32_t *len) {
  if (addr == nullptr || len == nullptr) return static_cast<rtError_t>(ACL_ERROR_RT_PARAM_INVALID);
  void *p = nullptr;
  if (aclError e = aclrtGetHardwareSyncAddr(&p)) return static_cast<rtError_t>(e);
  *addr = reinterpret_cast<uint64_t>(p);
  *len = 64;  // the bytes acl_sim reserves there
  return RT_ERROR_NONE;
}
#endif

// ---- profiler services torch_npu reads outside profiling too
uint64_t MsprofSysCycleTime(void) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   Clock::now().time_since_epoch()).count());
}

// A stable id per string (FNV-1a): the same text always maps to the same id, as CANN's does.
uint64_t MsprofGetHashId(const char *hashInfo, size_t length) {
  if (hashInfo == nullptr) return 0;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < length; ++i) {
    h ^= static_cast<unsigned char>(hashInfo[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

}  // extern "C"
