"""From a :class:`~.launch_plan.SyncPlan` to the C++ of a Triton launch.

Pure Python, no torch import. :func:`resource_code` writes what one launch needs for its workspace and locks,
in the three places torch_npu's launcher has (docs/design.md): ``before`` the launch lambda, on the thread
that runs the graph: the block count, the lock layout and ONE ``torch_npu::inductor::LaunchMemory`` (the
runtime helper in ``csrc/npu_launch_resources.h``), which takes the block from torch_npu's caching allocator
and carves it; ``in_lambda``: the lock fills on the stream, then the two pointers the kernel's packed argument struct needs,
``sync_block_lock`` and ``workspace_addr`` (``nullptr`` when the kernel needs neither, with no helper call at
all); ``after`` ``launchKernel(...)`` returns: the block handed back, kept for the thread's next launch on the
stream (a captured one goes back to the graph's pool). SIMT-only kernels get no lines: their struct has no
such fields. The torch_npu hooks splice exactly these lines into the launcher torch_npu's C++ wrapper
generates. The ``helper_*`` functions say how a wrapper includes (or, for AOTInductor, inlines) that helper.

Whole launchers around these lines (for the ``launcher`` command, the tests and the
harnesses) are tooling: ``tooling/sim/launcher_writer.py``.

The grid and the launch block count come from the wrapper's variables
(``grid_0``, ``grid_1``, ``grid_2``; the block count is their product, clamped
to the vector-core count when auto-blockify is on, as torch_npu computes its
``block_num``), and the stream from ``stream_``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

from .launch_plan import INT64_MIN, LAYOUT_LEGACY, LAYOUT_PACKED, SyncPlan

HELPER_HEADER = "npu_launch_resources.h"
HELPER_PARTS = "npu_launch_resources"  # folder of the header's parts, beside it
HELPER_DIR = Path(__file__).resolve().parent / "csrc"
HELPER_NAMESPACE = "torch_npu::inductor"
#: Marker in the emitted comment; tests and the hook look for it.
MARKER = "npu-sync-resources"
#: The launch rule in a few words, for status lines and plans; the rule itself is stated once, in docs/design.md
#: ("When the block goes back").
LAUNCH_MEMORY = "one caching-allocator block kept per calling thread and stream, taken before the launch is queued"


@dataclasses.dataclass(frozen=True)
class LaunchSite:
    """The generated wrapper's names and the launch facts known at codegen time."""

    stream: str = "stream_"
    grid: tuple[str, str, str] = ("grid_0", "grid_1", "grid_2")
    block_clamp: int | None = None  # auto-blockify: clamp the block count to this many vector cores
    has_ffts: bool = False
    simt_only: bool | None = None  # None: the plan's; torch_npu honours it on Ascend 950 only
    prefix: str = "npu_sync_"  # of every local variable the resource lines declare

    def simt(self, plan: SyncPlan) -> bool:
        return plan.simt_only if self.simt_only is None else self.simt_only


def c_string(text: str) -> str:
    escaped = ("\\" + ch if ch in '"\\' else ch if 32 <= ord(ch) < 127 else "".join(f"\\{b:03o}" for b in ch.encode())
               for ch in text)
    return '"' + "".join(escaped) + '"'


def int64_literal(value: int) -> str:
    return "INT64_MIN" if value == INT64_MIN else f"INT64_C({value})"


def _comment(plan: SyncPlan, site: LaunchSite) -> list[str]:
    what = []
    if plan.needs_locks:
        if plan.lock_layout == LAYOUT_LEGACY:
            what.append(f"locks {plan.legacy_slots} int64 slots, each {plan.lock_init_value}")
        elif not plan.unordered_locks:
            what.append(f"locks {plan.ordered_locks} ordered, each {plan.lock_init_value}")
        else:  # with any unordered lock the region starts zeroed (docs/design.md, lock content)
            p = "2 x blocks" if plan.participant_factor == 2 else "blocks"
            ordered = f"{plan.ordered_locks} ordered (0), " if plan.ordered_locks else ""
            what.append(f"locks {ordered}{plan.unordered_locks} unordered (slot 0 = {p}, then 0)")
    if plan.needs_workspace:
        what.append(f"workspace {plan.workspace_per_block} B per block x grid")
    return [
        f"// {MARKER}: {'; '.join(what)}.",
        f"// ONE block from torch_npu's caching allocator for {site.stream}, taken here before the launch is queued",
        "// and carved into [locks | workspace]; kept for this thread's next launch on the stream.",
    ]


@dataclasses.dataclass(frozen=True)
class ResourceCode:
    """The C++ one launch needs for its workspace and locks, by where it goes."""

    before: list[str]  # before ``auto launch_call = ...``, on the thread that runs the graph
    in_lambda: list[str]  # first in the lambda: lock fills, ``sync_block_lock``, ``workspace_addr``
    after: list[str]  # right after ``launchKernel(...)`` returns


def resource_code(plan: SyncPlan, site: LaunchSite = LaunchSite()) -> ResourceCode:
    """What one launch needs, by place (nothing for SIMT-only kernels). ``before`` may throw on the calling
    thread, naming the kernel; ``in_lambda`` returns a failed fill's ACL code before anything is launched."""
    if site.simt(plan):
        return ResourceCode([], [], [])
    if not plan.needs_resources:
        return ResourceCode([], [f"// {MARKER}: this kernel needs no workspace and no sync locks.",
                                 "void* sync_block_lock = nullptr;", "void* workspace_addr = nullptr;"], [])
    p = site.prefix
    g0, g1, g2 = site.grid
    before = _comment(plan, site)
    before.append(f"uint32_t {p}block_num = {g0} * {g1} * {g2};")
    if site.block_clamp is not None:
        before.append(f"{p}block_num = std::min({p}block_num, static_cast<uint32_t>({int(site.block_clamp)}));")
    before.append(f"{HELPER_NAMESPACE}::LockLayout {p}locks;")
    if plan.lock_layout == LAYOUT_LEGACY:
        before.append(f"{p}locks.legacy_slots = UINT64_C({plan.legacy_slots});")
    elif plan.lock_layout == LAYOUT_PACKED:
        if plan.ordered_locks:
            before.append(f"{p}locks.ordered = {plan.ordered_locks}u;")
        if plan.unordered_locks:
            before.append(f"{p}locks.unordered = {plan.unordered_locks}u;")
        if plan.participant_factor != 1:
            before.append(f"{p}locks.participant_factor = {plan.participant_factor}u;")
    if plan.needs_locks and plan.lock_init_value != 0:  # the helper decides where it applies
        before.append(f"{p}locks.init_value = {int64_literal(plan.lock_init_value)};")
    workspace = plan.workspace_per_block if plan.needs_workspace else 0
    kernel = c_string(plan.kernel)
    before += [f"{HELPER_NAMESPACE}::LaunchMemory {p}memory({kernel}, {site.stream},",
               f"    {g0}, {g1}, {g2}, {p}block_num, UINT64_C({workspace}), {p}locks);",
               f"const {HELPER_NAMESPACE}::LaunchRegions {p}regions = {p}memory.regions();  // what the lambda copies"]
    in_lambda = []
    if plan.needs_locks:
        in_lambda += [f"aclError {p}status = {p}regions.write_locks({kernel}, {site.stream});",
                      f"if ({p}status != ACL_SUCCESS) return {p}status;  // logged by the helper"]
    in_lambda += [f"void* sync_block_lock = {p}regions.locks;", f"void* workspace_addr = {p}regions.workspace;"]
    after = [f"{p}memory.handed();  // queued: the block is the thread's again, for its next launch on the stream"]
    return ResourceCode(before, in_lambda, after)


def helper_sources(directory: Path = HELPER_DIR) -> list[Path]:
    """The runtime helper's header files: the main one, then its parts."""
    return [directory / HELPER_HEADER, *sorted((directory / HELPER_PARTS).glob("*.h"))]


def helper_digest(directory: Path = HELPER_DIR) -> str:
    """SHA-256 over the helper's headers (names and contents)."""
    h = hashlib.sha256()
    for path in helper_sources(directory):
        h.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def helper_abi(directory: Path = HELPER_DIR) -> str:
    """The helper's inline-namespace name: differs whenever any of its headers does."""
    return "v_" + helper_digest(directory)[:16]


def helper_include_lines(absolute: bool = True) -> list[str]:
    """What a wrapper writes to use the helper: the versioned namespace, then the include.

    The digest in the source also makes Inductor's compile cache (keyed on the
    generated source) rebuild wrappers when the helper changes.
    """
    header = (HELPER_DIR / HELPER_HEADER).as_posix() if absolute else HELPER_HEADER
    return [
        f"// npu_launch_resources helper, sha256 {helper_digest()}",
        f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI {helper_abi()}",
        f'#include "{header}"',
    ]


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*(?://[^\n]*)?$', re.M)  # a comment may follow
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*\n?", re.M)
#: Around the inlined helper in an AOT wrapper, so that tools can find (and swap) it.
INLINE_BEGIN = f"// >>> {HELPER_HEADER}, inlined"
INLINE_END = f"// <<< {HELPER_HEADER}, inlined"


def helper_inlined_text(directory: Path = HELPER_DIR) -> str:
    """The helper as one text: each quoted include of one of its own files replaced by that file
    (once, ``#pragma once`` dropped); angle includes (ACL, torch_npu, std) stay as they are.

    An AOTInductor package is compiled on another machine, where no path of this one exists.
    """
    root = directory.resolve()
    seen: set[Path] = set()

    def expand(path: Path) -> str:
        seen.add(path)
        text = _PRAGMA_ONCE.sub("", path.read_text())

        def part(m: re.Match) -> str:
            target = (path.parent / m.group(1)).resolve()
            if root not in target.parents or not target.is_file():
                raise FileNotFoundError(f"{HELPER_HEADER}: {path.relative_to(root)} includes {m.group(1)!r}, "
                                        f"which is not a file of the helper under {root}")
            rel = target.relative_to(root).as_posix()
            return f"// ({rel}: already inlined above)" if target in seen else f"// ---- {rel} ----\n{expand(target)}"

        return _QUOTED_INCLUDE.sub(part, text)

    return expand(root / HELPER_HEADER)


def helper_inline_lines(directory: Path = HELPER_DIR) -> list[str]:
    """What an AOT wrapper writes to use the helper: the versioned namespace, then the helper's
    text itself (:func:`helper_inlined_text`), so the generated source names no path of this
    machine and a ``package_cpp_only`` package builds from its own contents anywhere."""
    return [
        f"// npu_launch_resources helper, sha256 {helper_digest(directory)} (inlined)",
        f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI {helper_abi(directory)}",
        "#ifndef TORCH_NPU_LAUNCH_RESOURCES_INLINED",
        "#define TORCH_NPU_LAUNCH_RESOURCES_INLINED",
        INLINE_BEGIN,
        *helper_inlined_text(directory).splitlines(),
        INLINE_END,
        "#endif",
    ]
