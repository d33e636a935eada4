// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h
// (test double and dry-run tool for torch-npu-inductor-patches; not torch_npu).
// Declares only the header's one EXPORTED entry point, with the real
// prototype (test/test_sim_surface.py checks it against every cached wheel:
// the header's other functions, malloc_with_stream among them, are not
// exported by libtorch_npu.so, so code loaded into a real process cannot call
// them). Simulated contract (docs/facts.md, "The workspace allocator" and
// "Graph capture, the allocators and threads"; torch_npu's
// NPUWorkspaceAllocator.cpp, v2.7.1): one block per (current device, stream);
// every request that fits returns the same pointer, even while an earlier
// tensor lives; a larger request synchronises the device (invalidating any
// capture on it, then throwing), frees the old block and allocates
// round_up(request + 32, 2 MiB) (:75-130); releasing a tensor only updates
// statistics (:530-539); acl_sim::empty_cache() frees every block
// (:226-240); the request and every release go through the unguarded pointer
// map (:549-567), where two threads at once are reported as a race; a request
// of 0 bytes gives a defined tensor with a null data_ptr(); failure throws (an
// out-of-memory std::runtime_error).
#pragma once
#include <stdint.h>

#include "ATen/core/Tensor.h"
#include "acl/acl_base.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace at_npu {
namespace native {

TORCH_NPU_API at::Tensor allocate_workspace(uint64_t workspace_size, aclrtStream stream);

}  // namespace native
}  // namespace at_npu
