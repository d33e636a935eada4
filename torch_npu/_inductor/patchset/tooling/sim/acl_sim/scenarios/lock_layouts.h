// HOST SIMULATION support (test double; not torch_npu): lock layouts by name and the
// lock content a kernel needs at its start (docs/design.md, "Lock content"), computed
// here, independently of the helper, for the scenarios and the C++ tests alike.
// Include the helper first: it defines LockLayout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace acl_sim_scenarios {

using torch_npu::inductor::LockLayout;

// `slots` int64 lock slots (metadata lock_num), each = value.
inline LockLayout legacy(uint64_t slots, int64_t value) {
  LockLayout l;
  l.legacy_slots = slots;
  l.init_value = value;
  return l;
}
// The packed layout (sync_block_lock_layout): ordered and unordered lock counts.
inline LockLayout packed(uint32_t ordered, uint32_t unordered, uint32_t factor = 1, int64_t init = 0) {
  LockLayout l;
  l.ordered = ordered;
  l.unordered = unordered;
  l.participant_factor = factor;
  l.init_value = init;
  return l;
}

// init_value everywhere for lock_num slots and ordered-only layouts; with any
// unordered lock, zero but slot 0 of each unordered lock = P (blocks x factor).
inline std::vector<int64_t> expected_locks(const LockLayout &l, uint32_t blocks) {
  if (l.ordered == 0 && l.unordered == 0) return std::vector<int64_t>(l.legacy_slots, l.init_value);
  const int64_t fill = l.unordered == 0 ? l.init_value : 0;
  std::vector<int64_t> v(size_t(l.ordered) * 8, fill);
  const int64_t p = int64_t(blocks) * l.participant_factor;
  for (uint32_t u = 0; u < l.unordered; ++u) {
    v.push_back(p);
    v.insert(v.end(), size_t((1 + 2 * p) * 8 - 1), 0);
  }
  return v;
}

}  // namespace acl_sim_scenarios
