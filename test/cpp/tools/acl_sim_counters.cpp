// Prints per-launch counters, measured in the host ACL simulation, for the
// launch helper (csrc/npu_launch_resources.h: LaunchMemory on the calling
// thread, the lock fills on the stream) and for torch_npu's own fix
// (docs/facts.md: two workspace-allocator requests, host std::vector,
// synchronous aclrtMemcpy). Steady state: one warm-up launch, then N
// measured launches of a kernel with 4096 bytes of workspace per block, 8
// blocks and 16 lock slots.
//
//   acl_sim_counters            print the table
//   acl_sim_counters --check    also exit non-zero unless the helper shows
//                               1 allocator call, 0 sync copies, 0 device
//                               synchronisations, 0 host-blocking calls, 0
//                               page-locked allocations, 0 heap allocations
//                               and 0 simulation errors per launch
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <cstring>
#include <string>

#include "test_support.h"

ACL_SIM_DEFINE_COUNTING_OPERATOR_NEW()

namespace {
constexpr int N = 200;
constexpr uint32_t kBlocks = 8;
constexpr uint64_t kWsPerBlock = 4096;
constexpr uint64_t kLockNum = 16;

struct Row {
  std::string name;
  acl_sim::Counters c;
  uint64_t heap = 0;
};

void upstream_launch(aclrtFuncHandle h, aclrtStream s, int64_t init, uint64_t *heap) {
  using at_npu::native::allocate_workspace;
  acl_sim::heap_count_begin();
  at::Tensor ws = allocate_workspace(kWsPerBlock * kBlocks, s);
  at::Tensor lk = allocate_workspace(kLockNum * 8, s);
  std::vector<int64_t> host(kLockNum, init);
  aclError rc = aclrtMemcpy(lk.data_ptr(), kLockNum * 8, host.data(), kLockNum * 8, ACL_MEMCPY_HOST_TO_DEVICE);
  *heap += acl_sim::heap_count_end();
  if (rc != ACL_SUCCESS) throw std::runtime_error("aclrtMemcpy failed");
  int32_t grid[3] = {int32_t(kBlocks), 1, 1};
  t::launch(h, s, lk.data_ptr(), ws.data_ptr(), kBlocks, grid);
}

// The generated launcher's two halves: the calling thread's (LaunchMemory,
// release) counted for heap allocations; the lambda's (fills, launch) as the
// queue thread would run it.
void helper_launch(aclrtFuncHandle h, aclrtStream s, int64_t init, uint64_t *heap) {
  acl_sim::heap_count_begin();
  t::LaunchMemory m("triton_probe", s, kBlocks, 1, 1, kBlocks, kWsPerBlock, t::legacy(kLockNum, init));
  const t::LaunchRegions r = m.regions();
  *heap += acl_sim::heap_count_end();
  {
    const t::LaunchDone done{r.held, s};
    if (r.write_locks("triton_probe", s) != ACL_SUCCESS) throw std::runtime_error("lock fill failed");
    int32_t grid[3] = {int32_t(kBlocks), 1, 1};
    t::launch(h, s, r.locks, r.workspace, kBlocks, grid);
  }
  acl_sim::heap_count_begin();
  m.release_when_finished();
  *heap += acl_sim::heap_count_end();
}

template <class F>
Row measure(const std::string &name, acl_sim::MemcpyModel model, int64_t init, F launch_fn) {
  acl_sim::reset();
  acl_sim::set_memcpy_model(model);
  aclrtStream s = t::stream(0);
  aclrtFuncHandle h = t::probe("triton_probe", kLockNum * 8, kWsPerBlock * kBlocks);
  uint64_t heap = 0;
  // Warm-up: N launches in flight at once (queued behind a 200 ms kernel), their kernels finished, then one
  // more that gives their blocks back: the helper's records and lists are as big as the run can need.
  const int32_t one[3] = {1, 1, 1};
  t::launch(t::probe("stall", 0, 0, 200000), s, nullptr, nullptr, 1, one);
  for (int i = 0; i < N; ++i) launch_fn(h, s, init, &heap);
  t::sync(s);
  launch_fn(h, s, init, &heap);
  t::sync(s);
  acl_sim::reset_counters();
  acl_sim::clear_errors();
  // Heap allocations torch_npu's allocate_workspace makes itself (its at::Tensor) are not the launcher's.
  acl_sim::heap_count_begin();
  { at::Tensor bare = at_npu::native::allocate_workspace(64, s); }
  const uint64_t per_request = acl_sim::heap_count_end();
  acl_sim::reset_counters();
  heap = 0;
  for (int i = 0; i < N; ++i) launch_fn(h, s, init, &heap);
  Row r{name, acl_sim::counters(), heap};
  r.heap -= r.c.allocator_requests * per_request;
  t::sync(s);
  r.c.errors = acl_sim::counters().errors;  // include reports from kernels that ran after the loop
  return r;
}

void print(const std::vector<Row> &rows) {
  std::printf("per-launch counters in the host ACL simulation (%d steady-state launches each; 8 blocks, "
              "%llu B workspace/block, %llu lock slots)\n",
              N, static_cast<unsigned long long>(kWsPerBlock), static_cast<unsigned long long>(kLockNum));
  std::printf("%-44s %6s %6s %6s %6s %6s %6s %6s %6s %7s\n", "approach", "alloc", "sync", "async", "memset", "device",
              "block", "pinned", "heap", "errors");
  std::printf("%-44s %6s %6s %6s %6s %6s %6s %6s %6s %7s\n", "", "calls", "copy", "copy", "", "sync", "host", "alloc",
              "alloc", "found");
  for (const Row &r : rows) {
    auto per = [&](uint64_t v) { return double(v) / N; };
    std::printf("%-44s %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %7.2f\n", r.name.c_str(),
                per(r.c.allocator_requests + r.c.caching_requests), per(r.c.sync_copies), per(r.c.async_copies),
                per(r.c.memsets), per(r.c.device_synchronizations), per(r.c.host_blocking), per(r.c.pinned_allocs),
                per(r.heap), per(r.c.errors));
  }
  std::printf("(alloc calls = caching-allocator + workspace-allocator calls; device sync = device synchronisations; "
              "block host = host-blocking calls: sync copies, stream/device syncs, allocator growth; pinned alloc = "
              "page-locked allocations; heap alloc = host heap allocations beyond those allocate_workspace makes for "
              "its tensor; errors found = simulation error reports: aliasing, overwritten locks, ...)\n");
}
}  // namespace

int main(int argc, char **argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::vector<Row> rows;
  rows.push_back(measure("helper, init 0 (one byte fill)", acl_sim::MemcpyModel::kWaits, 0, helper_launch));
  rows.push_back(measure("helper, init 7 (byte fills: 1 + 1 per slot)", acl_sim::MemcpyModel::kWaits, 7, helper_launch));
  rows.push_back(measure("upstream, init 7, memcpy model 'waits'", acl_sim::MemcpyModel::kWaits, 7, upstream_launch));
  rows.push_back(
      measure("upstream, init 7, memcpy model 'immediate'", acl_sim::MemcpyModel::kImmediate, 7, upstream_launch));
  print(rows);
  if (!check) return 0;
  int bad = 0;
  for (int i = 0; i < 2; ++i) {
    const auto &c = rows[size_t(i)].c;
    if (c.caching_requests != uint64_t(N) || c.allocator_requests || c.sync_copies || c.async_copies ||
        c.device_synchronizations || c.host_blocking || rows[size_t(i)].heap || c.errors || c.pinned_allocs) {
      std::printf("CHECK FAILED for '%s'\n", rows[size_t(i)].name.c_str());
      ++bad;
    }
  }
  for (int i = 2; i < 4; ++i) {
    if (rows[size_t(i)].c.errors == 0) {
      std::printf("CHECK FAILED: simulation found no error in '%s'\n", rows[size_t(i)].name.c_str());
      ++bad;
    }
  }
  return bad ? 1 : 0;
}
