// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUCachingAllocator.h
// (test double and dry-run tool for torch-npu-inductor-patches; not torch_npu).
// Only what the helper uses, with the real prototypes (checked against every
// cached wheel by test/test_sim_allocator_surface.py): get() and the
// allocator's virtuals allocate (c10::Allocator's), raw_alloc_with_stream,
// raw_delete, recordStream, hasCapturesUnderway (from 2.7.1.post6), name() and isHistoryEnabled();
// the inline functions raw_alloc_with_stream, raw_delete, recordStream and
// hasCapturesUnderway that call them; the free-memory callback registry. The
// real get() reads the exported `allocator` pointer; here it answers the
// simulation's allocator (acl_sim/caching_allocator.h), whose state lives in
// the simulation library, so that code loaded into one process shares it.
//
// Simulated contract (torch_npu NPUCachingAllocator.cpp, v2.7.1; details and
// the device memory capacity in acl_sim/control.h, "torch_npu's allocators"):
//  * allocate(n): the calling thread's device and current stream (:3640-3664);
//    raw_alloc_with_stream(n, stream) the given stream; 0 bytes gives nullptr
//    (:3754-3758). malloc (:1185-1293), under the device's lock: unless a
//    capture is underway on the device, process_events first (a freed block
//    whose events all completed goes back to its pool); while the stream
//    captures (ACTIVE, the capture's own model: the filter
//    NPUGraph::capture_begin registers, NPUGraph.cpp:205-210) the capture's
//    private pool (get_pool, :2500-2516), else the ordinary pool; a free block
//    of that pool and stream (get_free_block, :2555-2567); at a miss, every
//    registered free-memory callback, then the pool again (:1252-1256,
//    trigger_free_memory_callbacks :2620-2630); then a new block; then, unless
//    a capture is underway, the out-of-memory retry (:1279-1293:
//    npuSynchronizeDevice, which drains the task queue, the workspace
//    allocator's emptyCache, then every outstanding event synchronised and its
//    block freed, the cached blocks freed, a new block); then OutOfMemoryError
//    (a std::runtime_error, as c10::OutOfMemoryError) with torch_npu's text
//    "NPU out of memory. Tried to allocate ...".
//  * recordStream(ptr, stream): a use of the block on `stream` (:3439-3459,
//    :1606-1613), also on the block's own stream; none for a DataPtr of another
//    allocator or of no memory.
//  * raw_delete(p), or a DataPtr's deleter: under the device lock (:1494-1531);
//    a pointer not handed out throws ("invalid device pointer", :3257-3265). A
//    block with recorded uses gets an event recorded on each of their streams
//    (insert_events :3064-3089, through torch_npu's task queue when it is on:
//    NPUEvent::record, LaunchRecordEventTask) and is free again only once each
//    completed (process_events :3110-3139: an event the queue has not recorded
//    yet is not complete, NPUEvent::query); while a capture is underway on the
//    device its events wait until none is (:1520-1528, :3091-3108), uses
//    recorded during the capture dropped (:3048-3062). Without uses it goes
//    back to its pool at once.
//  * A graph's pool is freed when the graph is destroyed (aclmdlRIDestroy
//    here; NPUGraph::reset -> releasePool, NPUGraph.cpp:338 and :2196-2225):
//    free blocks then, the others when they become free. (torch_npu frees them
//    at the next empty_cache: the simulation is earlier, never later.)
//  * hasCapturesUnderway(device): a stream of `device` is capturing (any mode;
//    torch_npu: captures_underway non-empty, :2189-2193). name(): "native"
//    (:3885-3888). isHistoryEnabled(): false (memory history is not recorded
//    here; torch_npu: the device allocator's record_history, :1069-1072).
//  * FreeNPUMemoryCallbacksRegistry()->Register(key, creator): c10's Registry
//    (a key registered twice ends the process). The callbacks run at a cache
//    miss as above; a Register while a cache miss reads the registry is a data
//    race in torch_npu (Register locks, Keys() and Create() do not): reported
//    (acl_sim::ErrorKind::kAllocatorRace).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "acl/acl_base.h"
#include "c10/core/Allocator.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace c10_npu {
namespace NPUCachingAllocator {

class FreeMemoryCallback {  // the real header's interface
 public:
  virtual ~FreeMemoryCallback() {}
  virtual bool Execute() = 0;
};

class NPUAllocator : public c10::Allocator {  // torch_npu's allocator interface: only the virtuals the helper reaches
 public:
  virtual void *raw_alloc_with_stream(size_t nbytes, aclrtStream stream) = 0;
  virtual void raw_delete(void *ptr) = 0;
  virtual void recordStream(const c10::DataPtr &ptr, c10_npu::NPUStream stream) = 0;
  virtual bool hasCapturesUnderway(c10::DeviceIndex device) {
    (void)device;
    return false;  // the real default (another allocator)
  }
  virtual std::string name() = 0;
  virtual bool isHistoryEnabled() {  // the real default (another allocator)
    throw std::runtime_error(name() + " does not yet support recordHistory.");
  }
};

}  // namespace NPUCachingAllocator
}  // namespace c10_npu

#include "acl_sim/caching_allocator.h"  // the simulation's allocator behind get(), and its registry

namespace c10_npu {
namespace NPUCachingAllocator {

struct FreeMemoryCallbacks {  // c10::Registry's Register, as the helper calls it
  void Register(const std::string &key, std::function<std::unique_ptr<FreeMemoryCallback>()> creator) {
    ::acl_sim::detail::register_free_memory_callback(key, [creator] {
      const std::unique_ptr<FreeMemoryCallback> callback = creator();  // Create(name)->Execute()
      if (callback == nullptr) throw std::runtime_error("free memory callback get nullptr");
      return callback->Execute();
    });
  }
};
inline FreeMemoryCallbacks *FreeNPUMemoryCallbacksRegistry() {
  static FreeMemoryCallbacks registry;
  return &registry;
}

inline NPUAllocator *get() { return ::acl_sim::detail::caching_allocator(); }

inline void *raw_alloc_with_stream(size_t nbytes, aclrtStream stream) {
  return get()->raw_alloc_with_stream(nbytes, stream);
}

inline void raw_delete(void *ptr) { return get()->raw_delete(ptr); }

inline void recordStream(const c10::DataPtr &ptr, c10_npu::NPUStream stream) {
  return get()->recordStream(ptr, stream);
}

inline bool hasCapturesUnderway(c10::DeviceIndex device) { return get()->hasCapturesUnderway(device); }

}  // namespace NPUCachingAllocator
}  // namespace c10_npu
