// npu_launch_resources: the versioned namespace.
//
// Every generated wrapper compiles this header-only helper into its own shared
// object, and the loader merges inline functions' static state across all of
// them (GNU unique symbols). The generated source therefore defines
// TORCH_NPU_LAUNCH_RESOURCES_ABI from the helper's content hash before
// including it: wrappers built from different helper versions get different
// namespaces, so they never share state, and Inductor's compile cache (keyed on
// the generated source) rebuilds wrappers when the helper changes.
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
