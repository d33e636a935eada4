"""Earlier and wrong launch-memory rules, as C++ classes a mutant launcher uses instead of the helper's
``LaunchMemory`` (same constructor, ``regions()`` and ``handed()``). The real runtime and the C++ tests must catch each (docs/design.md, "When
the block goes back"):

* ``release-once-queued``: a block per launch, back to the cache once the launch is queued (commit 698f526): a
  lambda still in torch_npu's queue can write memory another thread's ``empty_cache`` freed (issue 31);
* ``shared-by-threads``: one kept block per stream for every thread: with the task queue off, two threads' fills
  and kernels interleave on the stream;
* ``retire-at-once``: kept per (thread, stream), but a block replaced by a larger one goes back to the cache at
  once, while its last kernel may still run;
* ``kept-while-captured``: kept per (thread, stream), a replaced block back once its stream has run its kernels,
  but the kept block also used while the stream captures: the graph's kernel then writes an eager block, which the
  graph does not hold and which a later, larger launch replaces and ``empty_cache`` frees before the replay.

The helper itself with one decision changed (issue 47: memory back whenever the allocator needs it), its text
renamed into a namespace of its own and edited (:data:`HELPER_EDITS`):

* ``recorded-when-asked``: issue 39's rule (the helper at 38f24dc): a block goes back only once an event of the
  helper's own, recorded behind its last kernel when a call asks and queried at once, has completed; the helper's
  retry skips idle blocks. A CANN event is not complete right after its record: at the allocator's cache miss an
  idle thread's block stays allocated, and the out-of-memory retry that follows asks no callback again;
* ``idle-kept-at-cache-miss``: the allocator's free-memory callback gives back retired blocks only: an idle thread's
  block stays allocated when the allocator needs the memory;
* ``given-back-without-a-use``: a block goes back to the allocator without its stream recorded as a use: free in
  its cache at once, so another thread's empty_cache, whose device synchronisation came first, frees it under its
  kernel;
* ``capture-error-read-as-capturing``: an error from CANN's capture status of the launch's stream (a chip without ACL
  graphs answers every stream so) read as an active capture: the launch takes the graph pool's path, whose block
  goes back once queued, though no graph holds it;
* ``no-memory-taken-as-memory``: an allocator's answer of no memory without an error (a pluggable one's may) taken
  as a block: the kernel's regions start at address 0.
"""
from __future__ import annotations

from ...launch_codegen import helper_inlined_text

_COMMON = r"""
  const torch_npu::inductor::LaunchRegions &regions() const noexcept { return r_; }
  void carve(void *raw) {
    const uintptr_t base = (reinterpret_cast<uintptr_t>(raw) + 511) & ~uintptr_t(511);
    if (r_.sizes.lock_bytes != 0) r_.locks = reinterpret_cast<void *>(base);
    if (r_.sizes.workspace_bytes != 0) r_.workspace = reinterpret_cast<void *>(base + r_.sizes.workspace_offset);
  }
  bool sized(const char *kernel, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bn, uint64_t ws,
             const torch_npu::inductor::LockLayout &locks) {
    r_.layout = locks;
    r_.sizes = torch_npu::inductor::launch_sizes(kernel, gx, gy, gz, bn, ws, locks);
    return r_.sizes.total_bytes != 0;
  }
  torch_npu::inductor::LaunchRegions r_;
"""
_CTOR = ("LaunchMemory(const char *kernel, aclrtStream stream, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bn, "
         "uint64_t ws, const torch_npu::inductor::LockLayout &locks)")
_NS = "npu_mutant_{}"

_CLASSES = {
    "release-once-queued": f"""
class LaunchMemory {{
 public:
  {_CTOR} {{
    if (sized(kernel, gx, gy, gz, bn, ws, locks)) carve(raw_ = c10_npu::NPUCachingAllocator::raw_alloc_with_stream(r_.sizes.total_bytes, stream));
  }}
  void handed() {{
    if (raw_ != nullptr) c10_npu::NPUCachingAllocator::raw_delete(std::exchange(raw_, nullptr));
  }}
  void *raw_ = nullptr;
{_COMMON}}};
""",
    "shared-by-threads": f"""
inline std::mutex shared_mu;
inline std::map<aclrtStream, std::pair<void *, uint64_t>> shared_blocks;  // stream -> (block, bytes), every thread's
class LaunchMemory {{
 public:
  {_CTOR} {{
    if (!sized(kernel, gx, gy, gz, bn, ws, locks)) return;
    std::lock_guard<std::mutex> g(shared_mu);
    auto &b = shared_blocks[stream];
    if (b.second < r_.sizes.total_bytes)
      b = {{c10_npu::NPUCachingAllocator::raw_alloc_with_stream(r_.sizes.total_bytes, stream), r_.sizes.total_bytes}};
    carve(b.first);
  }}
  void handed() {{}}
{_COMMON}}};
inline void release_all() {{  // (tests: what this rule keeps, given back once the device is idle)
  std::lock_guard<std::mutex> g(shared_mu);
  for (auto &kv : shared_blocks) c10_npu::NPUCachingAllocator::raw_delete(kv.second.first);
  shared_blocks.clear();
}}
""",
    "retire-at-once": f"""
inline std::mutex kept_mu;
inline std::map<std::pair<std::thread::id, aclrtStream>, std::pair<void *, uint64_t>> kept;  // (thread, stream)
class LaunchMemory {{
 public:
  {_CTOR} {{
    if (!sized(kernel, gx, gy, gz, bn, ws, locks)) return;
    std::lock_guard<std::mutex> g(kept_mu);
    auto &b = kept[{{std::this_thread::get_id(), stream}}];
    if (b.second < r_.sizes.total_bytes) {{
      if (b.first != nullptr) c10_npu::NPUCachingAllocator::raw_delete(b.first);  // its kernel may still run
      b = {{c10_npu::NPUCachingAllocator::raw_alloc_with_stream(r_.sizes.total_bytes, stream), r_.sizes.total_bytes}};
    }}
    carve(b.first);
  }}
  void handed() {{}}
{_COMMON}}};
inline void release_all() {{  // (tests: what this rule keeps, given back once the device is idle)
  std::lock_guard<std::mutex> g(kept_mu);
  for (auto &kv : kept) c10_npu::NPUCachingAllocator::raw_delete(kv.second.first);
  kept.clear();
}}
""",
    "kept-while-captured": f"""
inline std::mutex captured_mu;
inline std::map<std::pair<std::thread::id, aclrtStream>, std::pair<void *, uint64_t>> kept;  // (thread, stream)
class LaunchMemory {{
 public:
  {_CTOR} {{
    if (!sized(kernel, gx, gy, gz, bn, ws, locks)) return;
    std::lock_guard<std::mutex> g(captured_mu);
    auto &b = kept[{{std::this_thread::get_id(), stream}}];  // whether the stream captures or not
    if (b.second < r_.sizes.total_bytes) {{
      if (b.first != nullptr && aclrtSynchronizeStream(stream) == ACL_SUCCESS)  // its kernels have run
        c10_npu::NPUCachingAllocator::raw_delete(b.first);
      b = {{c10_npu::NPUCachingAllocator::raw_alloc_with_stream(r_.sizes.total_bytes, stream), r_.sizes.total_bytes}};
    }}
    carve(b.first);
  }}
  void handed() {{}}
{_COMMON}}};
inline void release_all() {{  // (tests: what this rule keeps, given back once the device is idle)
  std::lock_guard<std::mutex> g(captured_mu);
  for (auto &kv : kept) c10_npu::NPUCachingAllocator::raw_delete(kv.second.first);
  kept.clear();
}}
""",
}
_FINISHED_WHEN_ASKED = """
// issue 39's rule: an event of the helper's own, recorded behind the block's last kernel when a call asks, queried
// at once (called under KeptBlocks' mutex)
inline bool finished_when_asked(KeptBlock &k) {
  static std::map<KeptBlock *, std::pair<aclrtEvent, uint64_t>> events;
  auto &e = events[&k];
  const uint64_t covered = e.second + 1;  // a new record each time a call asks
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  if (e.second != covered && (e.first != nullptr || aclrtCreateEvent(&e.first) == ACL_SUCCESS) &&
      aclrtRecordEvent(e.first, k.stream.stream(false)) == ACL_SUCCESS)
    e.second = covered;
  return e.second == covered && aclrtQueryEventStatus(e.first, &status) == ACL_SUCCESS &&
         status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}
class KeptBlocks {"""
_ASKED = "(s == kIdle && !idle)) continue;\n      if (s == kIdle && !retire"
_USE = "npu_alloc::recordStream(k->memory, k->stream);"
#: The helper's text edits, per mutant of the helper itself: (old, new), each of which must apply once.
HELPER_EDITS = {
    "recorded-when-asked": (
        ("class KeptBlocks {", _FINISHED_WHEN_ASKED),
        (_ASKED, _ASKED.replace(") continue;", " ||\n          !finished_when_asked(*k)) continue;")),
        (_USE, ""),
        ("if (give_back(true) != 0 || handed_back_.load() != handed) return allocate(kernel, bytes);",
         "if (give_back(false) != 0) return allocate(kernel, bytes);")),
    "idle-kept-at-cache-miss": (
        ("all().give_back(true) != 0; }", "all().give_back(false) != 0; }"),),
    "given-back-without-a-use": ((_USE, ""),),
    "capture-error-read-as-capturing": ((": ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED;", ": ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;"),),
    "no-memory-taken-as-memory": (("if (c10::DataPtr block = npu_alloc::get()->allocate(bytes)) return block;",
                                   "return npu_alloc::get()->allocate(bytes);"),),
}
CLASS_NAMES = tuple(_CLASSES)  # the earlier and wrong rules, each a LaunchMemory class of its own
NAMES = CLASS_NAMES + tuple(HELPER_EDITS)
_INCLUDES = "#include <algorithm>\n#include <map>\n#include <mutex>\n#include <thread>\n#include <utility>\n#include <vector>\n"
_HELPER_CLASS = "torch_npu::inductor::LaunchMemory "


def _edited_helper(name: str, ns: str) -> str:
    """The helper's text in namespace ``ns`` (its macros renamed too), with ``HELPER_EDITS[name]`` made."""
    text = helper_inlined_text().replace("TORCH_NPU_LAUNCH_RESOURCES", ns.upper()).replace("torch_npu::inductor", ns)
    for old, new in HELPER_EDITS[name]:
        if text.count(old) != 1:
            raise ValueError(f"mutant {name}: the edit no longer applies to the helper: {old!r}")
        text = text.replace(old, new)
    return text


def definition(name: str) -> str:
    """The C++ of mutant ``name``: its class, or the edited helper, in a namespace of its own (after the helper's
    include; guarded, so that every launcher using it may carry it)."""
    ns = _NS.format(name.replace("-", "_"))
    body = f"namespace {ns} {{{_CLASSES[name]}}}  // namespace {ns}" if name in _CLASSES else _edited_helper(name, ns)
    return f"#ifndef {ns.upper()}\n#define {ns.upper()}\n{_INCLUDES}{body}\n#endif\n"


def use(cpp: str, name: str) -> str:
    """Launcher text ``cpp`` (the generated shape) with its LaunchMemory replaced by mutant ``name``'s (with every
    name of the helper's, for an edited helper)."""
    if _HELPER_CLASS not in cpp:
        return cpp
    ns = _NS.format(name.replace("-", "_"))
    if name in HELPER_EDITS:
        return cpp.replace("torch_npu::inductor::", f"{ns}::")
    return cpp.replace(_HELPER_CLASS, f"{ns}::LaunchMemory ")
