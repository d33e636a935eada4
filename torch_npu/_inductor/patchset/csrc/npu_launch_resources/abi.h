// npu_launch_resources: the versioned namespace. The generated source defines
// TORCH_NPU_LAUNCH_RESOURCES_ABI from the helper's content hash: wrappers built
// from different helper versions never share inline functions' state.
#pragma once

#ifndef TORCH_NPU_LAUNCH_RESOURCES_ABI
#define TORCH_NPU_LAUNCH_RESOURCES_ABI unversioned
#endif

#define TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE \
  namespace torch_npu {                            \
  namespace inductor {                             \
  inline namespace TORCH_NPU_LAUNCH_RESOURCES_ABI {
#define TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE \
  }                                              \
  }                                              \
  }
