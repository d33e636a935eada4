// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUMacros.h (test double;
// not torch_npu): only the export macros the other stand-ins use.
#pragma once
#ifndef TORCH_NPU_API
#define TORCH_NPU_API __attribute__((visibility("default")))
#endif
#ifndef C10_NPU_API
#define C10_NPU_API __attribute__((visibility("default")))
#endif
