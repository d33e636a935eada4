// npu_launch_resources: what a launch needs, as numbers, and its lock content as byte fills. Pure functions, in a
// namespace versioned by the helper's content hash (TORCH_NPU_LAUNCH_RESOURCES_ABI): no state shared across them.
#pragma once

#include <acl/acl.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#ifndef TORCH_NPU_LAUNCH_RESOURCES_ABI
#define TORCH_NPU_LAUNCH_RESOURCES_ABI unversioned
#endif
#define TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE \
  namespace torch_npu::inductor {                  \
  inline namespace TORCH_NPU_LAUNCH_RESOURCES_ABI {
#define TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE \
  }                                              \
  }

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

struct LockLayout {                 // what a kernel's lock memory must hold at launch
  uint64_t legacy_slots = 0;        // metadata lock_num: that many int64 slots
  uint32_t ordered = 0;             // sync_block_lock_layout, low 32 bits: one 64-byte line each
  uint32_t unordered = 0;           // sync_block_lock_layout, high 32 bits: (1 + 2P) lines each
  uint32_t participant_factor = 1;  // 2 for mix-mode kernels with automatic sub-block tiling
  int64_t init_value = 0;           // lock_init_val (where no unordered lock exists)
};

struct LaunchSizes {
  uint64_t participants = 0;  // P: block count x participant_factor (0 without unordered locks)
  uint64_t lock_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t workspace_offset = 0;  // from the aligned base
  uint64_t total_bytes = 0;       // the one allocator request (0: none)
};

constexpr uint64_t kRegionAlignment = 512;  // where regions start: a multiple of the 64-byte lock line

// Sizes of one launch, every product and sum checked: std::invalid_argument naming the kernel if one overflows.
// [aligned base | locks | pad to 512 | workspace] + 511 bytes of slack for the base's alignment.
inline LaunchSizes launch_sizes(const char *kernel, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                uint32_t block_num, uint64_t workspace_per_block, const LockLayout &locks) {
  LaunchSizes s;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) return s;  // nothing is launched
  bool overflow = false;
  auto mul = [&](uint64_t a, uint64_t b) { return overflow |= __builtin_mul_overflow(a, b, &a), a; };
  auto add = [&](uint64_t a, uint64_t b) { return overflow |= __builtin_add_overflow(a, b, &a), a; };
  s.workspace_bytes = mul(mul(workspace_per_block, uint64_t(grid_x) * grid_y), grid_z);
  if (locks.unordered != 0) s.participants = uint64_t(block_num) * locks.participant_factor;  // fits
  s.lock_bytes =
      locks.ordered == 0 && locks.unordered == 0
          ? mul(locks.legacy_slots, 8)
          : add(uint64_t(locks.ordered) * 64, mul(add(mul(s.participants, 2), 1), UINT64_C(64) * locks.unordered));
  if (s.workspace_bytes != 0) s.workspace_offset = add(s.lock_bytes, kRegionAlignment - 1) & ~(kRegionAlignment - 1);
  const uint64_t end = s.workspace_bytes != 0 ? add(s.workspace_offset, s.workspace_bytes) : s.lock_bytes;
  s.total_bytes = add(end, kRegionAlignment - 1);
  if (overflow) {
    auto n = [](uint64_t v) { return std::to_string(v); };
    throw std::invalid_argument("npu_launch_resources: kernel '" + std::string(kernel) +
                                "': launch sizes overflow 64 bits: workspace " + n(workspace_per_block) + " B x grid " +
                                n(grid_x) + " x " + n(grid_y) + " x " + n(grid_z) + ", lock_num " +
                                n(locks.legacy_slots) + ", " + n(locks.ordered) + " ordered + " + n(locks.unordered) +
                                " unordered locks, " + n(block_num) + " blocks x " + n(locks.participant_factor));
  }
  return end == 0 ? LaunchSizes() : s;
}

// The lock content at kernel start, as torch_npu's own fix writes it: every slot = init_value (lock_num slots, ordered-
// only layouts); with any unordered lock all zero but slot 0 of each unordered lock = P. As byte fills: the whole
// region, then each run of equal non-zero bytes of a slot whose value is not one repeated byte. Stops at the first
// failed fill.
template <class Fill>
aclError for_each_lock_fill(const LockLayout &locks, const LaunchSizes &s, Fill &&fill) {
  if (s.lock_bytes == 0) return ACL_SUCCESS;
  const uint64_t common = locks.unordered != 0 ? 0 : static_cast<uint64_t>(locks.init_value);
  const bool one_byte = common == (common & 0xff) * UINT64_C(0x0101010101010101);
  aclError rc = fill(uint64_t(0), static_cast<uint8_t>(one_byte ? common & 0xff : 0), s.lock_bytes);
  auto put = [&](uint64_t offset, uint64_t value) {
    for (int b = 0, e = 0; b < 8 && rc == ACL_SUCCESS; b = e) {
      const uint8_t byte = static_cast<uint8_t>(value >> (8 * b));
      for (e = b + 1; e < 8 && static_cast<uint8_t>(value >> (8 * e)) == byte;) ++e;
      if (byte != 0) rc = fill(offset + b, byte, uint64_t(e - b));
    }
  };
  for (uint64_t slot = 0; !one_byte && slot < s.lock_bytes / 8; ++slot) put(slot * 8, common);
  for (uint64_t u = 0; u < locks.unordered; ++u)
    put(locks.ordered * UINT64_C(64) + u * (1 + 2 * s.participants) * 64, s.participants);
  return rc;
}

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
