// Compile check of npu_launch_resources.h against the REAL CANN and torch_npu
// headers (built only when ASCEND_TOOLKIT_HOME is set; see CMakeLists.txt).
// It is never linked or run: it instantiates every entry point once so the
// compiler checks names, prototypes and types.
#include <npu_launch_resources.h>

namespace torch_npu_patchset_compile_check {

void *use_everything(aclrtStream stream) {
  torch_npu_patchset::LockLayout layout;
  layout.ordered = 1;
  layout.unordered = 1;
  layout.participant_factor = 2;
  layout.init_value = -1;
  torch_npu_patchset::LaunchSizes sizes =
      torch_npu_patchset::compute_launch_sizes("check", 1, 1, 1, 1, 64, layout);
  torch_npu_patchset::LaunchResources r =
      torch_npu_patchset::acquire_launch_resources("check", stream, 1, 1, 1, 1, 64, layout);
  torch_npu_patchset::LaunchResources moved(std::move(r));
  torch_npu_patchset::PinnedCacheStats st = torch_npu_patchset::pinned_cache_stats();
  torch_npu_patchset::set_pinned_cache_limits(st.max_entries, st.max_bytes);
  torch_npu_patchset::set_max_launch_bytes(torch_npu_patchset::max_launch_bytes());
  (void)torch_npu_patchset::trim_pinned_cache();
  (void)sizes;
  (void)moved.lock_bytes();
  (void)moved.workspace_bytes();
  (void)moved.total_bytes();
  (void)moved.workspace();
  return moved.locks();
}

}  // namespace torch_npu_patchset_compile_check
