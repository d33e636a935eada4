// HOST SIMULATION stand-in for torch_npu/csrc/framework/OpCommand.h (test
// double and dry-run tool for torch-npu-inductor-patches; not torch_npu).
// Declares only OpCommand::RunOpApiV2, exported by every torch_npu wheel and
// what a generated C++ wrapper's launchKernel() calls, with the real
// prototype (checked by test/test_sim_surface.py).
//
// Simulated behaviour (torch_npu's OpCommand.cpp / OpParamMaker.cpp /
// NPUQueue.cpp, branch v2.7.1):
//  * task queue on (TASK_QUEUE_ENABLE unset or not 0, ASCEND_LAUNCH_BLOCKING
//    not 1, or acl_sim::set_task_queue_enabled(true)): `func` is copied and
//    run later on the calling thread's current device's queue thread (that
//    device set there), in program order. A std::exception escaping it
//    becomes ACL_ERROR_INVALID_PARAM; a non-zero result (or that) puts the
//    queue into its error state: every task still queued is dropped, the next
//    RunOpApiV2 on that device throws std::runtime_error ("The Inner error is
//    reported as above ... the current working operator name is <op>") and
//    later ones are dropped silently (torch_npu logs "Task queue thread is
//    exit"). `sync` is accepted and ignored, as in torch_npu's queue path.
//  * queue off: `func` runs on the calling thread; an exception propagates;
//    a non-zero result throws std::runtime_error (ACL_REQUIRE_OK_OP).
// Every task is recorded (acl_sim::op_tasks()).
#pragma once
#include <string>

#include "torch_npu/csrc/core/npu/NPUMacros.h"
#include "torch_npu/csrc/framework/OpParamMaker.h"

namespace at_npu {
namespace native {

class TORCH_NPU_API OpCommand {
 public:
  static void RunOpApiV2(const std::string &op_name, const PROC_FUNC &func, bool sync = false);
};

}  // namespace native
}  // namespace at_npu
