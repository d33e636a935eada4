// npu_launch_resources: how failures are reported.
//
// The helper runs inside the launch lambda, which torch_npu may run on its
// task-queue thread; an exception escaping there stops all NPU work of the
// process. So nothing here throws: a failure is an aclError returned to the
// lambda, plus ONE message in CANN's application log (aclAppLog, the channel
// torch_npu's own ASCEND_LOGE errors use) naming the kernel, the call and the
// code. The text is also kept for the failing thread (last_error_message())
// and for the process (last_launch_error_message()): with torch_npu's task
// queue on, the lambda fails on the queue thread, never the caller's.
#pragma once

#include <acl/acl.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE
namespace detail {

constexpr size_t kMessageBytes = 512;

inline char *last_error_buffer() noexcept {
  static thread_local char text[kMessageBytes];
  return text;
}

struct ProcessError {
  std::mutex mutex;
  char text[kMessageBytes] = {};
};
inline ProcessError &process_error() noexcept {
  static ProcessError *e = new ProcessError();  // never destroyed: read during exit
  return *e;
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
  try {
    std::lock_guard<std::mutex> guard(process_error().mutex);
    std::memcpy(process_error().text, last_error_buffer(), kMessageBytes);
  } catch (const std::exception &) {  // the mutex failed: the thread's copy and the log still have it
  }
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

// The calling thread's last failure text ("" if none). With torch_npu's task
// queue on (the default) launches fail on the queue thread: the thread that
// called the compiled graph sees "" here; use last_launch_error_message().
inline const char *last_error_message() noexcept { return detail::last_error_buffer(); }

// The process's last failure text, any thread ("" if none), copied into
// `out` (NUL-terminated, cut to `size`); returns its full length.
inline size_t last_launch_error_message(char *out, size_t size) noexcept {
  char copy[detail::kMessageBytes];
  try {
    std::lock_guard<std::mutex> guard(detail::process_error().mutex);
    std::memcpy(copy, detail::process_error().text, sizeof copy);
  } catch (const std::exception &) {
    copy[0] = '\0';
  }
  copy[sizeof copy - 1] = '\0';
  if (out != nullptr && size != 0) std::snprintf(out, size, "%s", copy);
  return std::strlen(copy);
}

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
