// Compile check of npu_launch_resources.h against the REAL CANN and torch_npu
// headers (built only when ASCEND_TOOLKIT_HOME is set; see CMakeLists.txt).
// It is never linked or run: it instantiates every entry point once so the
// compiler checks names, prototypes and types.
#include <npu_launch_resources.h>

namespace torch_npu_patchset_compile_check {

aclError use_everything(aclrtStream stream) {
  torch_npu::inductor::LockLayout layout;
  layout.ordered = 1;
  layout.unordered = 1;
  layout.participant_factor = 2;
  layout.init_value = -1;
  const torch_npu::inductor::LaunchSizes sizes = torch_npu::inductor::launch_sizes("check", 1, 1, 1, 1, 64, layout);
  torch_npu::inductor::LaunchMemory memory("check", stream, 1, 1, 1, 1, 64, layout);
  const torch_npu::inductor::LaunchRegions regions = memory.regions();
  aclError rc = ACL_SUCCESS;
  {
    rc = regions.write_locks("check", stream);
  }
  memory.handed();
  torch_npu::inductor::KeptBlocks::all().give_back(true);
  (void)sizes;
  return rc;
}

}  // namespace torch_npu_patchset_compile_check
