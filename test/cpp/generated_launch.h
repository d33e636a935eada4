// The launch the generated launcher makes (launch_codegen.launcher_source written by hand in the same
// shape): LaunchMemory on the calling thread, only the LaunchRegions copied into the lambda handed to
// OpCommand::RunOpApiV2, handed() right after that call returns.
// Included by real_support.h (torch_npu's own runtime), which defines first, in namespace t: last_launch_id(),
// tid(), drain() (the queue run empty) and sync_all().
#pragma once
#include <npu_launch_resources.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include <atomic>
#include <memory>
#include <string>
#include <type_traits>

#include "check.h"
#include "lock_layouts.h"
#include "probe_launch.h"

namespace t {

using torch_npu::inductor::KeptBlock;
using torch_npu::inductor::KeptBlocks;
using torch_npu::inductor::LaunchMemory;
using torch_npu::inductor::LaunchRegions;
using torch_npu::inductor::LaunchSizes;
using torch_npu::inductor::LockLayout;

static_assert(!std::is_copy_constructible<LaunchMemory>::value && !std::is_copy_assignable<LaunchMemory>::value,
              "LaunchMemory owns a block: never copied into a lambda");
static_assert(std::is_trivially_copyable<LaunchRegions>::value, "LaunchRegions is what the lambda copies");

using acl_sim_scenarios::expected_locks;  // lock layouts and the content they need (scenarios/lock_layouts.h)
using acl_sim_scenarios::legacy;
using acl_sim_scenarios::packed;

inline LaunchSizes sizes(const char *name, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block_num,
                         uint64_t ws_per_block, const LockLayout &l) {
  return torch_npu::inductor::launch_sizes(name, gx, gy, gz, block_num, ws_per_block, l);
}

struct Launch {
  LaunchRegions regions;  // what the lambda got (nullptr regions if the calling thread threw)
  std::shared_ptr<std::atomic<int>> rc = std::make_shared<std::atomic<int>>(-1);           // the lambda's result
  std::shared_ptr<std::atomic<uint64_t>> id = std::make_shared<std::atomic<uint64_t>>(0);  // its kernel launch
  std::shared_ptr<std::atomic<long>> ran_on = std::make_shared<std::atomic<long>>(0);      // the lambda's thread
};
// (Memory: the helper's LaunchMemory, or a mutant rule's class of the same shape: mutant_helpers.py)
template <class Memory = LaunchMemory>
inline Launch generated_launch(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t gy,
                               uint32_t gz, uint32_t block_num, uint64_t ws_per_block, const LockLayout &l,
                               bool ffts = false) {
  Launch out;
  if (gx == 0 || gy == 0 || gz == 0) return out;
  const OnStream current(s);  // the wrapper launches on the thread's current stream
  Memory memory(name, s, gx, gy, gz, block_num, ws_per_block, l);
  const LaunchRegions regions = memory.regions();
  out.regions = regions;
  auto rc = out.rc;
  auto id = out.id;
  auto ran_on = out.ran_on;
  const std::string kernel = name;
  at_npu::native::OpCommand::RunOpApiV2(kernel, [=]() -> int {
    ran_on->store(tid());
    aclError r = regions.write_locks(kernel.c_str(), s);
    if (r != ACL_SUCCESS) {
      rc->store(r);
      return r;
    }
    const int32_t grid[3] = {int32_t(gx), int32_t(gy), int32_t(gz)};
    r = launch_rc(h, s, regions.locks, regions.workspace, block_num, grid, ffts);
    if (r == ACL_SUCCESS) id->store(last_launch_id());
    rc->store(r);
    return r;
  });
  memory.handed();  // kept for this thread's next launch on the stream
  return out;
}

// What the allocator's free-memory callback does, once the device is idle: every kept block goes back.
inline size_t settle_held() {
  sync_all();
  return KeptBlocks::all().give_back(true);
}

// generated_launch, waited for (the queue drained); returns the kernel's launch id.
inline uint64_t helper_launch(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t gy, uint32_t gz,
                              uint32_t block_num, uint64_t ws_per_block, const LockLayout &l, bool ffts = false) {
  Launch L = generated_launch(name, h, s, gx, gy, gz, block_num, ws_per_block, l, ffts);
  drain();
  if (L.rc->load() != ACL_SUCCESS)
    throw Failure(std::string(name) + ": the launch returned " + std::to_string(L.rc->load()));
  return L.id->load();
}

inline bool disjoint(uintptr_t a, uint64_t an, uintptr_t b, uint64_t bn) {
  return an == 0 || bn == 0 || a + an <= b || b + bn <= a;
}

}  // namespace t
