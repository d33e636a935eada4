// HOST SIMULATION stand-in for torch's c10/core/Device.h and the DeviceType it
// names (c10/core/DeviceType.h) (test double; not torch). Only what the other
// stand-ins use: DeviceIndex, the two device types a DataPtr of the simulation
// names (CPU, a default DataPtr's; PrivateUse1, torch_npu's) and Device's
// constructor, each as torch declares it (test/test_sim_allocator_surface.py
// holds them to the installed torch's headers).
#pragma once
#include <stdint.h>

namespace c10 {

using DeviceIndex = int8_t;
using StreamId = int64_t;  // c10/core/Stream.h

enum class DeviceType : int8_t {
  CPU = 0,
  PrivateUse1 = 20,
};

struct Device final {
  /* implicit */ Device(DeviceType type, DeviceIndex index = -1) : type_(type), index_(index) {}

 private:
  DeviceType type_;
  DeviceIndex index_ = -1;
};

}  // namespace c10
