// Test support for the counters table (tools/acl_sim_counters.cpp) in the HOST ACL SIMULATION, on its
// torch_npu stand-ins: sim_support.h (the framework and probe helpers over the simulation) plus the launch
// the generated launcher makes (launch_codegen.launcher_source written by hand in the same shape):
// LaunchMemory on the calling thread, only the LaunchRegions copied into the lambda handed to
// OpCommand::RunOpApiV2 (LaunchDone first in it), release_when_finished() right after that call returns.
// The helper's own C++ tests run on a released torch_npu's runtime instead (real_support.h).
#pragma once
#include <sys/syscall.h>
#include <unistd.h>

#include "sim_support.h"

namespace t {

inline uint64_t last_launch_id() { return acl_sim::last_launch_id(); }
inline long tid() { return static_cast<long>(syscall(SYS_gettid)); }
inline void drain() { acl_sim::drain_task_queues(); }

}  // namespace t

#include "generated_launch.h"  // the launch of the generated shape, through the stand-in OpCommand

namespace t {

// The caching-allocator block a region lies in (the simulation's bookkeeping).
inline acl_sim::Extent extent_of(const void *p) {
  acl_sim::Extent e;
  if (!acl_sim::allocation_extent(p, &e)) throw Failure("pointer in no device allocation");
  return e;
}

}  // namespace t
