// Test support for the C++ tests against the HOST ACL SIMULATION (a test double
// and dry-run tool; not CANN): the TEST_CASE / CHECK framework, streams and
// probe-kernel helpers. The simulation's own tests use it: they build without
// the launch helper.
#pragma once
#include <acl/acl.h>
#include <acl_sim/control.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
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
// Probe records of the replays of captured launch `id`.
inline std::vector<acl_sim::ProbeRecord> replays_of(uint64_t id) {
  std::vector<acl_sim::ProbeRecord> v;
  for (const auto &r : acl_sim::probe_records())
    if (r.captured_launch_id == id) v.push_back(r);
  return v;
}

}  // namespace t
