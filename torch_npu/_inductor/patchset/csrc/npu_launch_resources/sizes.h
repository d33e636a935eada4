// npu_launch_resources: what a launch needs, as numbers.
// Pure functions (no ACL call but logging).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "abi.h"
#include "errors.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

struct LockLayout {                 // what a kernel's lock memory must hold at launch
  uint64_t legacy_slots = 0;        // metadata lock_num: that many int64 slots
  uint32_t ordered = 0;             // sync_block_lock_layout, low 32 bits
  uint32_t unordered = 0;           // sync_block_lock_layout, high 32 bits
  uint32_t participant_factor = 1;  // 2 for mix-mode kernels with automatic sub-block tiling
  int64_t init_value = 0;           // lock_init_val
};

struct LaunchSizes {
  uint64_t participants = 0;  // P (0 without unordered locks)
  uint64_t lock_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t workspace_offset = 0;  // from the aligned base
  uint64_t total_bytes = 0;       // the one allocator request (0: none)
};

// Regions start on 512-byte boundaries: a multiple of the 64-byte line each
// ordered lock owns and of the alignment older CANN wants for async copies.
constexpr uint64_t kRegionAlignment = 512;
constexpr uint64_t kDefaultMaxLaunchBytes = uint64_t(8) << 30;

namespace detail {
// A plain decimal environment value >= min_value, else `def` (with a warning).
inline uint64_t env_u64(const char *name, uint64_t def, uint64_t min_value) noexcept {
  const char *s = std::getenv(name);
  if (s == nullptr || *s == '\0') return def;
  char *end = nullptr;
  errno = 0;
  const unsigned long long v = (*s >= '0' && *s <= '9') ? std::strtoull(s, &end, 10) : 0;
  if (end == nullptr || *end != '\0' || errno != 0 || v < min_value) {
    warn("<config>", "ignoring %s='%s' (want a decimal integer >= %llu); using %llu", name, s,
         static_cast<unsigned long long>(min_value), static_cast<unsigned long long>(def));
    return def;
  }
  return v;
}
inline std::atomic<uint64_t> &max_launch_bytes_storage() noexcept {
  static std::atomic<uint64_t> v{env_u64("TORCH_NPU_LAUNCH_MAX_BYTES", kDefaultMaxLaunchBytes, 1)};
  return v;
}
}  // namespace detail

// Cap on one launch's request (env TORCH_NPU_LAUNCH_MAX_BYTES, default 8 GiB).
inline uint64_t max_launch_bytes() noexcept {
  return detail::max_launch_bytes_storage().load(std::memory_order_relaxed);
}
inline void set_max_launch_bytes(uint64_t bytes) noexcept {
  detail::max_launch_bytes_storage().store(bytes, std::memory_order_relaxed);
}

// Sizes of one launch, overflow-checked. ACL_ERROR_INVALID_PARAM (logged,
// naming the kernel and the numbers) for contradictory or oversized input.
inline aclError compute_launch_sizes(const char *kernel, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                     uint32_t block_num, uint64_t workspace_per_block, const LockLayout &locks,
                                     LaunchSizes *out) noexcept {
  using detail::fail;
  *out = LaunchSizes();
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) return ACL_SUCCESS;  // nothing is launched
  const bool packed = locks.ordered != 0 || locks.unordered != 0;
  if (packed && locks.legacy_slots != 0)
    return fail(ACL_ERROR_INVALID_PARAM, kernel,
                "lock layout has both lock_num %llu and sync_block_lock_layout (%u ordered, %u unordered)",
                static_cast<unsigned long long>(locks.legacy_slots), locks.ordered, locks.unordered);
  if (locks.unordered != 0 && (block_num == 0 || locks.participant_factor == 0))
    return fail(ACL_ERROR_INVALID_PARAM, kernel,
                "%u unordered locks need participants, got block_num %u x participant_factor %u", locks.unordered,
                block_num, locks.participant_factor);

  LaunchSizes s;
  if (__builtin_mul_overflow(workspace_per_block, uint64_t(grid_x), &s.workspace_bytes) ||
      __builtin_mul_overflow(s.workspace_bytes, uint64_t(grid_y), &s.workspace_bytes) ||
      __builtin_mul_overflow(s.workspace_bytes, uint64_t(grid_z), &s.workspace_bytes))
    return fail(ACL_ERROR_INVALID_PARAM, kernel,
                "workspace overflows 64 bits: %llu bytes per block x grid %u x %u x %u",
                static_cast<unsigned long long>(workspace_per_block), grid_x, grid_y, grid_z);

  bool overflow = false;
  if (!packed) {
    overflow = __builtin_mul_overflow(locks.legacy_slots, uint64_t(8), &s.lock_bytes);
  } else {
    s.lock_bytes = uint64_t(locks.ordered) * 64;  // one cache line each; < 2^38
    if (locks.unordered != 0) {
      s.participants = uint64_t(block_num) * locks.participant_factor;  // two 32-bit factors: fits
      uint64_t per_lock = 0, all = 0;                                   // (1 + 2P) lines each
      overflow = __builtin_mul_overflow(s.participants, uint64_t(2), &per_lock) ||
                 __builtin_add_overflow(per_lock, uint64_t(1), &per_lock) ||
                 __builtin_mul_overflow(per_lock, uint64_t(64), &per_lock) ||
                 __builtin_mul_overflow(per_lock, uint64_t(locks.unordered), &all) ||
                 __builtin_add_overflow(s.lock_bytes, all, &s.lock_bytes);
    }
  }
  if (overflow)
    return fail(ACL_ERROR_INVALID_PARAM, kernel,
                "lock size overflows 64 bits: lock_num %llu, %u ordered, %u unordered, %u blocks x %u",
                static_cast<unsigned long long>(locks.legacy_slots), locks.ordered, locks.unordered, block_num,
                locks.participant_factor);
  if (s.lock_bytes == 0 && s.workspace_bytes == 0) return ACL_SUCCESS;

  // [aligned base | locks | pad to 512 | workspace] + 511 bytes of slack for the base alignment.
  uint64_t end = s.lock_bytes;
  if (s.workspace_bytes != 0) {
    s.workspace_offset = s.lock_bytes == 0 ? 0 : (s.lock_bytes + kRegionAlignment - 1) & ~(kRegionAlignment - 1);
    overflow = s.workspace_offset < s.lock_bytes || __builtin_add_overflow(s.workspace_offset, s.workspace_bytes, &end);
  }
  if (overflow || __builtin_add_overflow(end, kRegionAlignment - 1, &s.total_bytes))
    return fail(ACL_ERROR_INVALID_PARAM, kernel, "launch bytes overflow 64 bits: locks %llu + workspace %llu",
                static_cast<unsigned long long>(s.lock_bytes), static_cast<unsigned long long>(s.workspace_bytes));
  const uint64_t cap = max_launch_bytes();
  if (s.total_bytes > cap)
    return fail(ACL_ERROR_INVALID_PARAM, kernel,
                "launch needs %llu bytes (locks %llu, workspace %llu = %llu per block x grid %u x %u x %u), over the "
                "limit of %llu (TORCH_NPU_LAUNCH_MAX_BYTES)",
                static_cast<unsigned long long>(s.total_bytes), static_cast<unsigned long long>(s.lock_bytes),
                static_cast<unsigned long long>(s.workspace_bytes),
                static_cast<unsigned long long>(workspace_per_block), grid_x, grid_y, grid_z,
                static_cast<unsigned long long>(cap));
  *out = s;
  return ACL_SUCCESS;
}

// The lock content at kernel start, as torch_npu's own fix writes it
// (2.7.1.post11 .. 2.14.0): every slot = init_value for lock_num slots or
// ordered-only layouts; once any unordered lock exists, all zero except
// slot 0 of each unordered lock = P (ordered lines then hold 0).
inline void fill_lock_content(const LockLayout &layout, uint64_t participants, int64_t *out, uint64_t slots) noexcept {
  if (layout.unordered == 0) {
    for (uint64_t i = 0; i < slots; ++i) out[i] = layout.init_value;
    return;
  }
  for (uint64_t i = 0; i < slots; ++i) out[i] = 0;
  const uint64_t first = uint64_t(layout.ordered) * 8, per_lock = (1 + 2 * participants) * 8;
  for (uint64_t u = 0; u < layout.unordered; ++u) {
    const uint64_t slot = first + u * per_lock;
    if (slot < slots) out[slot] = static_cast<int64_t>(participants);
  }
}

// Slot `slot` of that content, computed without a buffer.
inline int64_t lock_slot_value(const LockLayout &layout, uint64_t participants, uint64_t slot) noexcept {
  if (layout.unordered == 0) return layout.init_value;
  const uint64_t first = uint64_t(layout.ordered) * 8, per_lock = (1 + 2 * participants) * 8;
  return slot >= first && (slot - first) % per_lock == 0 && (slot - first) / per_lock < layout.unordered
             ? static_cast<int64_t>(participants)
             : 0;
}

// The content's bytes (little-endian slots, as a host image holds them) as
// maximal runs of one byte value: fn(offset, byte, count) per run, in order.
// Stops after `max_runs` runs and returns max_runs + 1 then, else the number
// of runs. With fn a no-op it only counts. Lets content be written with byte
// fills alone (aclrtMemsetAsync), where no page-locked image may be made.
template <class Fn>
uint64_t for_each_lock_byte_run(const LockLayout &layout, uint64_t participants, uint64_t bytes, uint64_t max_runs,
                                Fn &&fn) {
  uint64_t runs = 0, start = 0;
  int current = -1;  // byte value of the open run
  auto put = [&](uint64_t offset, int byte) -> bool {
    if (byte == current) return true;
    if (current >= 0) {
      if (++runs > max_runs) return false;
      fn(start, static_cast<uint8_t>(current), offset - start);
    }
    current = byte;
    start = offset;
    return true;
  };
  for (uint64_t slot = 0; slot < bytes / 8; ++slot) {
    const uint64_t v = static_cast<uint64_t>(lock_slot_value(layout, participants, slot));
    const int low = static_cast<int>(v & 0xff);
    if (v == uint64_t(low) * UINT64_C(0x0101010101010101)) {  // one byte value for the whole slot
      if (!put(slot * 8, low)) return max_runs + 1;
      continue;
    }
    for (int b = 0; b < 8; ++b)
      if (!put(slot * 8 + b, static_cast<int>((v >> (8 * b)) & 0xff))) return max_runs + 1;
  }
  if (current >= 0) {
    if (++runs > max_runs) return max_runs + 1;
    fn(start, static_cast<uint8_t>(current), bytes - start);
  }
  return runs;
}

// True when the content is all zero bytes (then a byte fill is exact).
inline bool lock_content_is_zero(const LockLayout &layout) noexcept {
  return layout.unordered == 0 && layout.init_value == 0;
}

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
