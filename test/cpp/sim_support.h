// Test support for the C++ tests against the HOST ACL SIMULATION (a test double
// and dry-run tool; not CANN): the TEST_CASE / CHECK framework, streams (the
// ACL double's, torch_npu's current one, a held one) and probe-kernel helpers.
// The simulation's own tests use it: they build without the launch helper.
#pragma once
#include <acl/acl.h>
#include <acl_sim/control.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "probe_launch.h"

namespace t {

inline std::string sim_errors_text() {
  std::string s;
  for (const auto &e : acl_sim::errors())
    s += std::string("  [") + acl_sim::error_kind_name(e.kind) + "] " + e.message + "\n";
  return s;
}

inline int run_main(int argc, char **argv) {
  if (argc > 1 && std::string(argv[1]) == "--list") {
    for (auto &c : cases()) std::printf("%s\n", c.name.substr(c.name.find('.') + 1).c_str());
    return 0;
  }
  int failed = 0, ran = 0;
  for (auto &c : cases()) {
    const std::string name = c.name.substr(c.name.find('.') + 1);
    if (argc > 1 && std::string(argv[1]) != name) continue;
    ++ran;
    acl_sim::reset();
    try {
      c.fn();
      std::printf("[ OK ] %s\n", name.c_str());
    } catch (const std::exception &e) {
      ++failed;
      std::printf("[FAIL] %s: %s\n", name.c_str(), e.what());
      std::string errs = sim_errors_text();
      if (!errs.empty()) std::printf("simulation error reports:\n%s", errs.c_str());
    }
  }
  if (ran == 0) {
    std::printf("no test named %s\n", argc > 1 ? argv[1] : "(any)");
    return 2;
  }
  return failed ? 1 : 0;
}

}  // namespace t

#define TEST_MAIN() \
  int main(int argc, char **argv) { return ::t::run_main(argc, argv); }

#define CHECK_NO_SIM_ERRORS()                                                                  \
  do {                                                                                         \
    if (acl_sim::counters().errors != 0)                                                       \
      ::t::fail(__FILE__, __LINE__, "simulation reported errors:\n" + ::t::sim_errors_text()); \
  } while (0)

namespace t {

inline aclrtStream stream(int i) {
  static aclrtStream pool[16] = {};
  if (pool[i] == nullptr) {
    if (aclrtCreateStream(&pool[i]) != ACL_SUCCESS) throw std::runtime_error("aclrtCreateStream failed");
  }
  return pool[i];
}
inline void sync(aclrtStream s) {
  if (aclrtSynchronizeStream(s) != ACL_SUCCESS) throw std::runtime_error("aclrtSynchronizeStream failed");
}
inline void sync_all() {
  if (aclrtSynchronizeDevice() != ACL_SUCCESS) throw std::runtime_error("aclrtSynchronizeDevice failed");
}
inline aclrtFuncHandle probe(const std::string &name, uint64_t lock_bytes, uint64_t ws_bytes, uint32_t us = 0,
                             bool ffts = false) {
  acl_sim::ProbeConfig c;
  c.name = name;
  c.lock_bytes = lock_bytes;
  c.workspace_bytes = ws_bytes;
  c.sim_time_us = us;
  c.has_ffts = ffts;
  c.own_args_bytes = 12;  // one pointer + one int32 of the kernel's own
  return acl_sim::register_probe_kernel(c);
}
inline uint64_t launch(aclrtFuncHandle h, aclrtStream s, void *locks, void *ws, uint32_t block_num,
                       const int32_t grid[3], bool ffts = false) {
  if (launch_rc(h, s, locks, ws, block_num, grid, ffts) != ACL_SUCCESS) throw std::runtime_error("launch failed");
  return acl_sim::last_launch_id();
}
inline acl_sim::ProbeRecord record(uint64_t id) {
  acl_sim::ProbeRecord r;
  if (!acl_sim::probe_record(id, &r)) throw Failure("no probe record for launch " + std::to_string(id));
  return r;
}
// Holds a stream before its next task until released (a kernel that waits): a use's event stays incomplete by
// construction, not by timing. Released at the latest when it goes out of scope, then the stream drained.
class StreamGate {
 public:
  explicit StreamGate(aclrtStream s) : s_(s) {
    static aclrtFuncHandle kernel = acl_sim::register_kernel("gate", &StreamGate::wait, nullptr);
    StreamGate *self = this;
    if (aclrtLaunchKernelWithHostArgs(kernel, 1, s, nullptr, &self, sizeof self, nullptr, 0) != ACL_SUCCESS)
      throw std::runtime_error("the gate kernel could not be launched");
  }
  StreamGate(const StreamGate &) = delete;
  StreamGate &operator=(const StreamGate &) = delete;
  ~StreamGate() {
    open();
    (void)aclrtSynchronizeStream(s_);
  }
  void open() {
    std::lock_guard<std::mutex> g(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  static void wait(const acl_sim::KernelCall &call) {
    StreamGate *self = nullptr;
    std::memcpy(&self, call.args, sizeof self);
    std::unique_lock<std::mutex> l(self->mu_);
    self->cv_.wait(l, [&] { return self->open_; });
  }
  aclrtStream s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};
// A stream of torch_npu's pool made the calling thread's current one (each call a stream not used before in the
// process, up to the pool's 32), as a wrapper's caller does; the previous one current again at its end.
class OnPoolStream {
 public:
  explicit OnPoolStream(int device = 0)
      : before_(c10_npu::getCurrentNPUStream(static_cast<c10::DeviceIndex>(device))),
        mine_(c10_npu::getNPUStreamFromPool(static_cast<c10::DeviceIndex>(device))) {
    c10_npu::setCurrentNPUStream(mine_);
  }
  ~OnPoolStream() { c10_npu::setCurrentNPUStream(before_); }
  const c10_npu::NPUStream &npu() const { return mine_; }
  aclrtStream stream() const { return mine_.stream(false); }

 private:
  c10_npu::NPUStream before_, mine_;
};
// Probe records of the replays of captured launch `id`.
inline std::vector<acl_sim::ProbeRecord> replays_of(uint64_t id) {
  std::vector<acl_sim::ProbeRecord> v;
  for (const auto &r : acl_sim::probe_records())
    if (r.captured_launch_id == id) v.push_back(r);
  return v;
}

}  // namespace t
