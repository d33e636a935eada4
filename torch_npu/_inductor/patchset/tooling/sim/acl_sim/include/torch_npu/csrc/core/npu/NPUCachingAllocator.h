// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUCachingAllocator.h
// (test double and dry-run tool for torch-npu-inductor-patches; not torch_npu).
// Only three of the header's inline functions and get(), with the real
// prototypes (the real ones call through the exported
// `c10_npu::NPUCachingAllocator::allocator` pointer, so code loaded into a
// real process can use them; checked against every cached wheel by
// test/test_sim_allocator_surface.py). Here they call the simulation. The
// helper uses raw_alloc_with_stream, raw_delete and get()->hasCapturesUnderway
// (the allocator's virtual, from 2.7.1.post6); the free hasCapturesUnderway is
// kept for the helper of commit b45157f (comparisons).
//
// Simulated contract (torch_npu NPUCachingAllocator.cpp, v2.7.1; details and
// the device memory capacity in acl_sim/control.h, "torch_npu's allocators"):
//  * FreeNPUMemoryCallbacksRegistry: the helper registers its free-memory
//    callback there; the simulated allocator never runs the callbacks (torch_npu
//    runs them at a cache miss: the simulation returns less memory, never more).
//  * raw_alloc_with_stream(n, stream): 0 bytes gives nullptr (:3754-3758); the
//    calling thread's current device's allocator, under that device's lock
//    (:1192). While `stream` captures (status ACTIVE, the capture's own model:
//    the filter NPUGraph::capture_begin registers, NPUGraph.cpp:205-210) the
//    block comes from that capture's private pool (get_pool, :2500-2516), else
//    from the ordinary pool. A freed block goes back to its pool, keyed by
//    stream: only a later request of that pool and stream gets it again
//    (get_free_block, :2567). Out of device memory: the out-of-memory retry
//    (:1279-1293: npuSynchronizeDevice, which drains the task queue, then the
//    cached blocks are freed; skipped while a capture is underway), then
//    OutOfMemoryError (a std::runtime_error, as c10::OutOfMemoryError) with
//    torch_npu's text "NPU out of memory. Tried to allocate ...".
//  * raw_delete(p): back to the pool under the device lock (:1498); a pointer
//    not handed out throws ("invalid device pointer", :3262-3265).
//  * A graph's pool is freed when the graph is destroyed (aclmdlRIDestroy
//    here; NPUGraph::reset -> releasePool, NPUGraph.cpp:338 and :2196-2225):
//    blocks already returned are freed (poisoned) then, blocks still held
//    when they are returned. (torch_npu frees them at the next empty_cache:
//    the simulation is earlier, never later.)
//  * hasCapturesUnderway(device): a stream of `device` is capturing (any mode;
//    torch_npu: captures_underway non-empty, :2189-2193).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "acl/acl_base.h"
#include "acl_sim/caching_allocator.h"

namespace c10 {
using DeviceIndex = int8_t;
}  // namespace c10

namespace c10_npu {
namespace NPUCachingAllocator {

inline void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream)
{
  return ::acl_sim::detail::caching_raw_alloc_with_stream(nbytes, stream);
}

inline void raw_delete(void* ptr)
{
  ::acl_sim::detail::caching_raw_delete(ptr);
}

inline bool hasCapturesUnderway(c10::DeviceIndex device)
{
  return ::acl_sim::detail::caching_has_captures_underway(device);
}

class NPUAllocator {  // torch_npu's allocator interface: only the virtual the helper asks
 public:
  virtual ~NPUAllocator() = default;
  virtual bool hasCapturesUnderway(c10::DeviceIndex device) { return NPUCachingAllocator::hasCapturesUnderway(device); }
};

class FreeMemoryCallback {  // the real header's interface
 public:
  virtual ~FreeMemoryCallback() {}
  virtual bool Execute() = 0;
};
struct FreeMemoryCallbacks {  // c10::Registry's Register, as the helper calls it
  std::map<std::string, std::function<std::unique_ptr<FreeMemoryCallback>()>> creators;
  void Register(const std::string& key, std::function<std::unique_ptr<FreeMemoryCallback>()> creator)
  {
    creators[key] = std::move(creator);
  }
};
inline FreeMemoryCallbacks* FreeNPUMemoryCallbacksRegistry()
{
  static FreeMemoryCallbacks registry;
  return &registry;
}

inline NPUAllocator* get()
{
  static NPUAllocator allocator;
  return &allocator;
}

}  // namespace NPUCachingAllocator
}  // namespace c10_npu
