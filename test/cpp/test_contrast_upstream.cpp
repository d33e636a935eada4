// Contrast: the launch code of the released upstream fix (torch_npu 2.7.1.post11 .. 2.14.0, docs/design.md:
// two workspace-allocator requests, a host std::vector, a synchronous
// aclrtMemcpy) run against the simulation. The simulation must catch its
// aliasing; the helper must be clean in the very same scenarios.
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <chrono>
#include <thread>

#include "test_support.h"

using namespace t;

namespace {
// One upstream launch: workspace request, then lock request, host vector, sync copy.
uint64_t upstream_launch(aclrtFuncHandle h, aclrtStream s, uint32_t g, uint64_t ws_per_block, uint64_t lock_num,
                         int64_t init) {
  using at_npu::native::allocate_workspace;
  const uint64_t ws_bytes = ws_per_block * g;
  at::Tensor ws = ws_bytes ? allocate_workspace(ws_bytes, s) : at::Tensor();
  at::Tensor lk = lock_num ? allocate_workspace(lock_num * 8, s) : at::Tensor();
  if (lock_num) {
    std::vector<int64_t> host(lock_num, init);
    if (aclrtMemcpy(lk.data_ptr(), lock_num * 8, host.data(), lock_num * 8, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS)
      throw std::runtime_error("aclrtMemcpy");
  }
  int32_t grid[3] = {int32_t(g), 1, 1};
  return launch(h, s, lk.defined() ? lk.data_ptr() : nullptr, ws.defined() ? ws.data_ptr() : nullptr, g, grid);
}
}  // namespace

TEST_CASE(upstream_locks_and_workspace_alias) {
  aclrtFuncHandle h = probe("upstream", 4 * 8, 4 * 1024);
  uint64_t id = upstream_launch(h, stream(0), 4, 1024, 4, 7);
  sync(stream(0));
  auto r = record(id);
  CHECK_EQ(r.lock_ptr, r.workspace_ptr);  // the same memory
  CHECK(r.regions_overlap);
  CHECK(!r.locks_unchanged);  // its own workspace writes clobbered its locks
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kRegionOverlapInKernel) >= 1);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kLocksChangedWhileRunning) >= 1);
  auto c = acl_sim::counters();
  CHECK_EQ(c.allocator_requests, 2u);
  CHECK_EQ(c.sync_copies, 1u);
}

TEST_CASE(upstream_growth_leaves_workspace_dangling) {
  aclrtFuncHandle h = probe("upstream", (3u << 20), 1024);
  // ws fits the current block; the lock request (3 MiB) grows it and frees the old one
  { at::Tensor warm = at_npu::native::allocate_workspace(1024, stream(0)); }
  uint64_t id = upstream_launch(h, stream(0), 1, 1024, (3u << 20) / 8, 0);
  sync(stream(0));
  auto r = record(id);
  CHECK(!r.workspace_written);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kUseAfterFree) >= 1);
}

TEST_CASE(upstream_immediate_copy_changes_running_kernel_locks) {
  acl_sim::set_memcpy_model(acl_sim::MemcpyModel::kImmediate);
  aclrtFuncHandle slow = probe("first", 4 * 8, 0, 300000);
  aclrtFuncHandle second = probe("second", 4 * 8, 0);
  uint64_t a = upstream_launch(slow, stream(0), 1, 0, 4, 7);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  upstream_launch(second, stream(0), 1, 0, 4, 9);
  sync(stream(0));
  CHECK(!record(a).locks_unchanged);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kLocksChangedWhileRunning) >= 1);
  CHECK(acl_sim::error_count(acl_sim::ErrorKind::kOverlapWithRunningKernel) >= 1);
}

TEST_CASE(upstream_waits_model_blocks_host_every_launch) {
  acl_sim::set_memcpy_model(acl_sim::MemcpyModel::kWaits);
  aclrtFuncHandle h = probe("upstream", 4 * 8, 0);
  upstream_launch(h, stream(0), 1, 0, 4, 7);
  sync(stream(0));
  acl_sim::reset_counters();
  for (int i = 0; i < 10; ++i) upstream_launch(h, stream(0), 1, 0, 4, 7);
  auto c = acl_sim::counters();
  CHECK_EQ(c.sync_copies, 10u);
  CHECK_EQ(c.host_blocking, 10u);
}

TEST_CASE(helper_is_clean_in_the_same_scenarios) {
  for (auto model : {acl_sim::MemcpyModel::kWaits, acl_sim::MemcpyModel::kImmediate}) {
    acl_sim::set_memcpy_model(model);
    // aliasing scenario
    aclrtFuncHandle h = probe("helper", 4 * 8, 4 * 1024);
    uint64_t id = helper_launch("helper", h, stream(0), 4, 1, 1, 4, 1024, legacy(4, 7));
    // growth scenario
    aclrtFuncHandle big = probe("helper_big", 3u << 20, 1024);
    uint64_t id2 = helper_launch("helper_big", big, stream(0), 1, 1, 1, 1, 1024, legacy((3u << 20) / 8, 0));
    // running-kernel scenario
    aclrtFuncHandle slow = probe("first", 4 * 8, 0, 80000);
    aclrtFuncHandle second = probe("second", 4 * 8, 0);
    uint64_t a = helper_launch("first", slow, stream(0), 1, 1, 1, 1, 0, legacy(4, 7));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    helper_launch("second", second, stream(0), 1, 1, 1, 1, 0, legacy(4, 9));
    sync(stream(0));
    CHECK(!record(id).regions_overlap && record(id).locks_unchanged);
    CHECK(record(id2).workspace_written);
    CHECK(record(a).locks_unchanged);
  }
  CHECK_EQ(acl_sim::counters().sync_copies, 0u);
  CHECK_NO_SIM_ERRORS();
}

TEST_MAIN()
