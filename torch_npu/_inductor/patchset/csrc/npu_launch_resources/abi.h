// npu_launch_resources: the versioned namespace (ABI: the helper's content hash): no state shared across versions.
#pragma once

#ifndef TORCH_NPU_LAUNCH_RESOURCES_ABI
#define TORCH_NPU_LAUNCH_RESOURCES_ABI unversioned
#endif

#define TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE \
  namespace torch_npu::inductor {                  \
  inline namespace TORCH_NPU_LAUNCH_RESOURCES_ABI {
#define TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE \
  }                                              \
  }
