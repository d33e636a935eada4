// HOST SIMULATION internals (test double and dry-run tool for
// torch-npu-inductor-patches; not CANN). Shared between the sim's sources.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "acl_sim/control.h"

namespace acl_sim {
namespace internal {

void report(ErrorKind kind, const std::string &message);

// Running-kernel registry: regions a simulated kernel holds while it runs.
// Returns how many overlaps with other running launches were found (each reported).
int hold_region(uint64_t launch_id, const std::string &kernel, aclrtStream stream, uintptr_t lo, uint64_t n,
                const char *what);
void release_regions(uint64_t launch_id);

void probe_reset();

// Host library hooks (acl_sim/host/): stream-ordered wait for an event's last record (a task on
// `stream`), a host wait for it, whether a stream ran all it was given, a stream's device (-1: no
// such stream), the calling thread's device (-1: never set).
aclError stream_wait_event(aclrtStream stream, aclrtEvent event);
aclError synchronize_event(aclrtEvent event);
aclError stream_idle(aclrtStream stream, bool *idle);
int stream_device(aclrtStream stream);
int thread_device();
// A captured model's id (also while it is being captured); false for an unknown handle.
bool model_id(aclmdlRI model, uint64_t *id);

}  // namespace internal
}  // namespace acl_sim
