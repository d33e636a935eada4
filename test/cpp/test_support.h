// Test support for the counters table (tools/acl_sim_counters.cpp) in the HOST ACL SIMULATION, on its
// torch_npu stand-ins: sim_support.h (the framework and probe helpers over the simulation) plus the launch
// the generated launcher makes (launch_codegen.launcher_source written by hand in the same shape):
// LaunchMemory on the calling thread, only the LaunchRegions copied into the lambda handed to
// OpCommand::RunOpApiV2 (LaunchDone first in it), release_when_finished() right after that call returns.
// The helper's own C++ tests run on a released torch_npu's runtime instead (real_support.h).
#pragma once
#include <npu_launch_resources.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "lock_layouts.h"
#include "sim_support.h"

namespace t {

using torch_npu::inductor::HeldBlocks;
using torch_npu::inductor::LaunchDone;
using torch_npu::inductor::LaunchMemory;
using torch_npu::inductor::LaunchRegions;
using torch_npu::inductor::LaunchSizes;
using torch_npu::inductor::LockLayout;

static_assert(!std::is_copy_constructible<LaunchMemory>::value && !std::is_copy_assignable<LaunchMemory>::value,
              "LaunchMemory owns a block: never copied into a lambda");
static_assert(std::is_trivially_copyable<LaunchRegions>::value, "LaunchRegions is what the lambda copies");

inline LaunchSizes sizes(const char *name, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block_num,
                         uint64_t ws_per_block, const LockLayout &l) {
  return torch_npu::inductor::launch_sizes(name, gx, gy, gz, block_num, ws_per_block, l);
}

using acl_sim_scenarios::expected_locks;  // lock layouts and the content they need (scenarios/lock_layouts.h)
using acl_sim_scenarios::legacy;
using acl_sim_scenarios::packed;

// One launch of the generated shape, through torch_npu's launchKernel (RunOpApiV2).
struct Launch {
  LaunchRegions regions;  // what the lambda got (nullptr regions if the calling thread threw)
  std::shared_ptr<std::atomic<int>> rc = std::make_shared<std::atomic<int>>(-1);  // the lambda's result
  std::shared_ptr<std::atomic<uint64_t>> id = std::make_shared<std::atomic<uint64_t>>(0);  // its kernel launch
};
inline Launch generated_launch(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t gy,
                               uint32_t gz, uint32_t block_num, uint64_t ws_per_block, const LockLayout &l,
                               bool ffts = false) {
  Launch out;
  if (gx == 0 || gy == 0 || gz == 0) return out;
  LaunchMemory memory(name, s, gx, gy, gz, block_num, ws_per_block, l);
  const LaunchRegions regions = memory.regions();
  out.regions = regions;
  auto rc = out.rc;
  auto id = out.id;
  const std::string kernel = name;
  at_npu::native::OpCommand::RunOpApiV2(kernel, [=]() -> int {
    const LaunchDone done{regions.held, s};
    aclError r = regions.write_locks(kernel.c_str(), s);
    if (r != ACL_SUCCESS) {
      rc->store(r);
      return r;
    }
    const int32_t grid[3] = {int32_t(gx), int32_t(gy), int32_t(gz)};
    r = launch_rc(h, s, regions.locks, regions.workspace, block_num, grid, ffts);
    if (r == ACL_SUCCESS) id->store(acl_sim::last_launch_id());
    rc->store(r);
    return r;
  });
  memory.release_when_finished();  // held until its kernel has finished
  return out;
}

// What the next launch does first, once the device is idle: every block whose kernel finished goes back.
inline size_t settle_held() {
  sync_all();
  return HeldBlocks::all().release_done();
}

// generated_launch, waited for: the task queues drained; returns the kernel's launch id.
inline uint64_t helper_launch(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t gy,
                              uint32_t gz, uint32_t block_num, uint64_t ws_per_block, const LockLayout &l,
                              bool ffts = false) {
  Launch L = generated_launch(name, h, s, gx, gy, gz, block_num, ws_per_block, l, ffts);
  acl_sim::drain_task_queues();
  if (L.rc->load() != ACL_SUCCESS) throw Failure(std::string(name) + ": the launch returned " + std::to_string(L.rc->load()));
  return L.id->load();
}

inline bool disjoint(uintptr_t a, uint64_t an, uintptr_t b, uint64_t bn) { return an == 0 || bn == 0 || a + an <= b || b + bn <= a; }

// The caching-allocator block a region lies in (the simulation's bookkeeping).
inline acl_sim::Extent extent_of(const void *p) {
  acl_sim::Extent e;
  if (!acl_sim::allocation_extent(p, &e)) throw Failure("pointer in no device allocation");
  return e;
}

}  // namespace t
