// HOST SIMULATION internals behind the NPUCachingAllocator.h stand-in (test
// double; not torch_npu). Kept out of the stand-in so that it declares only
// what the real header declares.
#pragma once
#include <stddef.h>

#include "acl/acl_base.h"

namespace acl_sim {
namespace detail {
void *caching_raw_alloc_with_stream(size_t nbytes, aclrtStream stream);
void caching_raw_delete(void *ptr);
bool caching_has_captures_underway(int device);
}  // namespace detail
}  // namespace acl_sim
