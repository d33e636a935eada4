// HOST SIMULATION stand-in for torch_npu/csrc/framework/OpParamMaker.h (test
// double; not torch_npu): only the PROC_FUNC alias OpCommand.h uses.
#pragma once
#include <functional>

namespace at_npu {
namespace native {

using PROC_FUNC = std::function<int()>;

}  // namespace native
}  // namespace at_npu
