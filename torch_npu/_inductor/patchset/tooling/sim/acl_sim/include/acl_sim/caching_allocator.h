// HOST SIMULATION internals behind the NPUCachingAllocator.h stand-in (test
// double; not torch_npu), which includes this file once NPUAllocator is
// declared (include that header, not this one). Kept out of the stand-in so
// that it declares only what the real header declares. The allocator object
// only forwards: every block, event and callback lives in the simulation
// library (src/torch_npu_standins.cpp), shared by whatever code one process
// loads (an AOT host and its model libraries).
#pragma once
#include <stddef.h>

#include <functional>
#include <string>

#include "acl/acl_base.h"

namespace acl_sim {
namespace detail {
// malloc for `stream` on the calling thread's device; 0 bytes: nullptr.
void *caching_raw_alloc_with_stream(size_t nbytes, aclrtStream stream);
// allocate(): the calling thread's device (*device) and its current stream there.
void *caching_allocate(size_t nbytes, int *device);
// free, and the deleter of every DataPtr allocate() hands out.
void caching_raw_delete(void *ptr);
void caching_record_stream(void *ptr, aclrtStream stream, int stream_device);
bool caching_has_captures_underway(int device);
void register_free_memory_callback(const std::string &key, std::function<bool()> execute);

class CachingAllocator final : public c10_npu::NPUCachingAllocator::NPUAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    int device = 0;
    void *p = caching_allocate(n, &device);
    return {p, p, &caching_raw_delete,
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }
  void *raw_alloc_with_stream(size_t nbytes, aclrtStream stream) override {
    return caching_raw_alloc_with_stream(nbytes, stream);
  }
  void raw_delete(void *ptr) override { caching_raw_delete(ptr); }
  void recordStream(const c10::DataPtr &ptr, c10_npu::NPUStream stream) override {
    // no memory, or not this allocator's (NPUCachingAllocator.cpp v2.7.1:3441-3452): nothing to record
    if (ptr.get() != nullptr && ptr.get_deleter() == &caching_raw_delete)
      caching_record_stream(ptr.get(), stream.stream(false), stream.device_index());
  }
  bool hasCapturesUnderway(c10::DeviceIndex device) override { return caching_has_captures_underway(device); }
  std::string name() override { return "native"; }
  bool isHistoryEnabled() override { return false; }  // the simulation records no memory history
};
inline c10_npu::NPUCachingAllocator::NPUAllocator *caching_allocator() {
  static CachingAllocator allocator;
  return &allocator;
}
}  // namespace detail
}  // namespace acl_sim
