// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUStream.h (test double;
// not torch_npu). Only what the helper and the simulation's launching users
// use, with the real prototypes (test/test_sim_surface.py): NPUStream's
// stream(need_empty), device_index(), id() and comparison, and the exported
// functions that hand streams out and set the current one. Simulated
// (src/torch_npu_standins.cpp, "torch_npu's streams"; NPUStream.cpp v2.7.1):
//  * each device has a default stream and two pools (normal, high priority) of
//    32 streams, each a stream of the ACL double made at first use (the
//    default with the device's stream state, initGlobalStreamState :234-269; a
//    pool at its first request, initDeviceStreamState :271-287), handed out
//    round robin (get_idx :323-328, getStreamFromPool :447-473);
//  * each thread has a current stream per device, the default one until
//    setCurrentNPUStream (:733-744) sets another (current_streams :92,
//    initNPUStreamsOnce :305-314, getCurrentNPUStream :517-525);
//  * stream(true) first waits until the device's task queue ran all it was
//    given (MakeSureQueueEmpty of the default stream's queue, :417-445): from
//    that queue's own thread a self-wait, reported (acl_sim::ErrorKind).
// An NPUStream is made only by those functions (the stand-in has no c10::Stream).
// Its id is torch_npu's for its own streams (makeStreamId :186-193): 0 for the
// default stream, (type << 5) | index for a pool's (type 1 normal, 2 high);
// the stand-in has no external streams (an external id carries bit 30).
#pragma once
#include "acl/acl_base.h"
#include "c10/core/Device.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace acl_sim {
namespace detail {
struct StreamAccess;
}  // namespace detail
}  // namespace acl_sim

namespace c10_npu {

class C10_NPU_API NPUStream {
 public:
  bool operator==(const NPUStream &other) const noexcept {
    return stream_ == other.stream_ && device_ == other.device_;
  }
  bool operator!=(const NPUStream &other) const noexcept { return !(*this == other); }
  c10::DeviceIndex device_index() const { return device_; }
  c10::StreamId id() const { return id_; }
  aclrtStream stream(const bool need_empty) const;

 private:
  friend struct ::acl_sim::detail::StreamAccess;
  NPUStream(aclrtStream stream, c10::DeviceIndex device, c10::StreamId id) : stream_(stream), device_(device), id_(id) {}
  aclrtStream stream_;
  c10::DeviceIndex device_;
  c10::StreamId id_;
};

C10_NPU_API NPUStream getNPUStreamFromPool(c10::DeviceIndex device = -1);

C10_NPU_API NPUStream getStreamFromPool(const bool isHighPriority, c10::DeviceIndex device_index);

C10_NPU_API NPUStream getCurrentNPUStream(c10::DeviceIndex device_index = -1);

C10_NPU_API void setCurrentNPUStream(NPUStream stream);

}  // namespace c10_npu
