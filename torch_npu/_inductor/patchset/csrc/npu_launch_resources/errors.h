// npu_launch_resources: failures. On the calling thread (sizes, allocation):
// an exception naming the kernel, nothing queued. In the lambda (maybe on
// torch_npu's queue thread, where an escaping exception stops all NPU work):
// the ACL code, as torch_npu's launches return it, and ONE aclAppLog line.
#pragma once

#include <acl/acl.h>

#include <cstdarg>
#include <cstdio>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE
namespace detail {

struct Message {  // "npu_launch_resources: kernel '<kernel>': <what>"
  char text[512] = {};
  __attribute__((format(printf, 3, 4))) Message(const char *kernel, const char *fmt, ...) noexcept {
    char what[sizeof text - 64];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    std::snprintf(text, sizeof text, "npu_launch_resources: kernel '%s': %s", kernel, what);
  }
};

// A failure inside the launch lambda: logged once, its code returned.
__attribute__((cold, noinline)) inline aclError fail(aclError code, const Message &m) noexcept {
  aclAppLog(ACL_ERROR, __func__, __FILE__, __LINE__, "%s", m.text);
  return code;
}

}  // namespace detail
TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
