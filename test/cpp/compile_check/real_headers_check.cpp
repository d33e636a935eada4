// Compile check of npu_launch_resources.h against the REAL CANN and torch_npu
// headers (built only when ASCEND_TOOLKIT_HOME is set; see CMakeLists.txt).
// It is never linked or run: it instantiates every entry point once so the
// compiler checks names, prototypes and types.
#include <npu_launch_resources.h>

namespace torch_npu_patchset_compile_check {

void *use_everything(aclrtStream stream) {
  torch_npu::inductor::LockLayout layout;
  layout.ordered = 1;
  layout.unordered = 1;
  layout.participant_factor = 2;
  layout.init_value = -1;
  torch_npu::inductor::LaunchSizes sizes =
      torch_npu::inductor::compute_launch_sizes("check", 1, 1, 1, 1, 64, layout);
  torch_npu::inductor::LaunchResources r =
      torch_npu::inductor::acquire_launch_resources("check", stream, 1, 1, 1, 1, 64, layout);
  torch_npu::inductor::LaunchResources moved(std::move(r));
  torch_npu::inductor::PinnedCacheStats st = torch_npu::inductor::pinned_cache_stats();
  torch_npu::inductor::set_pinned_cache_limits(st.max_entries, st.max_bytes);
  torch_npu::inductor::set_max_launch_bytes(torch_npu::inductor::max_launch_bytes());
  (void)torch_npu::inductor::trim_pinned_cache();
  (void)sizes;
  (void)moved.lock_bytes();
  (void)moved.workspace_bytes();
  (void)moved.total_bytes();
  (void)moved.workspace();
  return moved.locks();
}

}  // namespace torch_npu_patchset_compile_check
