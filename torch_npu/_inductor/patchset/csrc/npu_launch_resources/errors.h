// npu_launch_resources: how failures are reported. On the thread that runs the
// graph (sizes, the allocation): an exception naming the kernel, which the
// graph's caller sees like any failed torch call; nothing is queued. Inside the
// launch lambda, which torch_npu may run on its task-queue thread where an
// escaping exception stops all NPU work: the ACL code, returned to the queue as
// torch_npu's own launches do, plus ONE line in CANN's application log
// (aclAppLog, where torch_npu's own errors go) naming the kernel.
#pragma once

#include <acl/acl.h>

#include <cstdarg>
#include <cstdio>
#include <stdexcept>

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
