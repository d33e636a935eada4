// npu_launch_resources: how failures are reported.
//
// The helper runs inside the launch lambda, which torch_npu may run on its
// task-queue thread; an exception escaping there stops all NPU work of the
// process. So nothing here throws: a failure is an aclError returned to the
// lambda, plus ONE message in CANN's application log (aclAppLog, the channel
// torch_npu's own ASCEND_LOGE errors use) naming the kernel, the call and the
// code. The text is also kept per thread for last_error_message().
#pragma once

#include <acl/acl.h>

#include <cstdarg>
#include <cstdio>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE
namespace detail {

constexpr size_t kMessageBytes = 512;

inline char *last_error_buffer() noexcept {
  static thread_local char text[kMessageBytes];
  return text;
}

inline void vlog(aclLogLevel level, char *out, const char *kernel, const char *fmt, va_list ap) noexcept {
  char what[kMessageBytes - 64];
  std::vsnprintf(what, sizeof what, fmt, ap);
  std::snprintf(out, kMessageBytes, "npu_launch_resources: kernel '%s': %s",
                (kernel != nullptr && *kernel != '\0') ? kernel : "<unnamed>", what);
  aclAppLog(level, __func__, __FILE__, __LINE__, "%s", out);
}

// The one place a failed launch is reported; returns `code` for the lambda.
__attribute__((format(printf, 3, 4), cold, noinline)) inline aclError fail(aclError code, const char *kernel,
                                                                           const char *fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vlog(ACL_ERROR, last_error_buffer(), kernel, fmt, ap);
  va_end(ap);
  return code;
}

// Housekeeping that went wrong without failing the launch (retried later).
__attribute__((format(printf, 2, 3), cold, noinline)) inline void warn(const char *kernel, const char *fmt,
                                                                       ...) noexcept {
  char text[kMessageBytes];
  va_list ap;
  va_start(ap, fmt);
  vlog(ACL_WARNING, text, kernel, fmt, ap);
  va_end(ap);
}

}  // namespace detail

// This thread's last failure text ("" if none).
inline const char *last_error_message() noexcept { return detail::last_error_buffer(); }

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
