// The entry points of the helper's C++ tests on a released torch_npu's runtime (real_support.h), called with
// ctypes by the child tooling/releases/cpp_tests.py starts (torch_npu imported, device 0 set). Included
// once, last, by the translation unit that build generates.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "real_support.h"

namespace t {
inline std::string json_text(const std::string &s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += char(c);
    }
  }
  return o + "\"";
}
// Between cases: every device's queue drained and device synchronised, every kept block given back and torch_npu's
// cache emptied (the blocks given back waited for events of the allocator's own), the double's counters, reports
// and faults and torch_npu's allocator statistics reset; device 0 current.
inline void settle_between_cases() {
  acl_host_stream_release(0);  // a stream a case left held (StreamHold releases its own; this is the backstop)
  for (int d = 1; d >= 0; --d) {  // a device's blocks go back on a thread of that device
    set_device(d);
    sync_all();
    KeptBlocks::all().give_back(true);
    c10_npu::NPUCachingAllocator::emptyCache(true);
  }
  acl_host_reset();
  for (int d = 0; d < 2; ++d) {
    c10_npu::NPUCachingAllocator::resetAccumulatedStats(d);
    c10_npu::NPUCachingAllocator::resetPeakStats(d);
  }
}
}  // namespace t

// [{"name": "test_regions.x", "queues": "1"}, ...]
extern "C" __attribute__((visibility("default"))) const char *tnip_cpp_tests_list() {
  static std::string out;
  out = "[";
  for (const t::Case &c : t::cases())
    out += (out.size() > 1 ? "," : "") + std::string("{\"name\":") + t::json_text(c.name) +
           ",\"queues\":" + t::json_text(c.queues) + "}";
  out += "]";
  return out.c_str();
}

// Runs case `name` (after settling what the one before left): {"name", "ok", "message", "seconds"}.
extern "C" __attribute__((visibility("default"))) const char *tnip_cpp_tests_run(const char *name) {
  static std::string out;
  std::string message = "no such case";
  bool ok = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (const t::Case &c : t::cases()) {
    if (c.name != name) continue;
    try {
      t::settle_between_cases();
      c.fn();
      ok = true;
      message.clear();
    } catch (const std::exception &e) {
      message = e.what();
      if (acl_host_error_count() != 0) message += "\nhost ACL library reports: " + t::errors_text();
    } catch (...) {
      message = "a non-standard exception";
    }
    break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out = "{\"name\":" + t::json_text(name) + ",\"ok\":" + (ok ? "true" : "false") +
        ",\"message\":" + t::json_text(message) + ",\"seconds\":" + std::to_string(s) + "}";
  return out.c_str();
}
