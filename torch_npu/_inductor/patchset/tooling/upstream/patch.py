"""The fix as a pull request to torch_npu: one git-format patch per checkout / branch.

    python -m torch_npu._inductor.patchset upstream-patch --checkout DIR [--out FILE]
    python -m torch_npu._inductor.patchset upstream-patch --checkout DIR --branches b1,b2 --out-dir DIR2

DIR is a torch_npu source checkout (a git work tree, clean). The patch is made
in a temporary clone of it (DIR is only read) and written as ``git
format-patch`` output that ``git am`` applies to DIR's HEAD (or to the branch's
head). It changes, in upstream's own files (:mod:`.upstream_patch_edits`):

* the autotuner's ``save_npu_kernel`` records the kernel's sync fields;
* the C++ wrapper's launch code takes each launch's workspace and locks before
  the launch lambda, on the thread that runs the graph, marks them done and
  declares ``sync_block_lock`` / ``workspace_addr`` first in the lambda, and
  hands them back right after ``launchKernel(...)``, kept for the thread's next
  launch on the stream (the three parts of ``launch_codegen.resource_code``), and its header includes
  ``<torch_npu/csrc/inductor/npu_launch_resources.h>``;
* ``torch_npu/_inductor/codegen/npu_launch_resources.py`` (generated from
  ``launch_plan`` / ``launch_codegen``: :mod:`.upstream_patch_module`);
* the helper's headers, byte for byte this package's ``csrc/`` (read now);
* where the branch compiles a Flex Attention backward template with a plain
  grid, a ``SymbolicGridFn``;
* where torch_npu's own Flex templates load a block with the bounds checks of
  its transpose (backward kT / vT / qT, forward K), those loads in the blocks'
  order (the runtime patch's rule, ``masked_loads.corrected``);
* ``test/_inductor/test_npu_launch_resources.py``.

The commit's author is the checkout's git identity (``git config user.name`` /
``user.email`` there) unless one is given.

Bad input (not a checkout, a dirty tree, an unknown layout, no git identity)
raises :class:`UpstreamPatchError` naming what is missing and the checkout as
the caller named it, and nothing is written; a checkout that already carries
the fix raises :class:`AlreadyFixed` saying where.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ... import launch_codegen
from . import edits, test_text
from . import module as upm

ISSUE = "Ascend/pytorch#4431"
HEADER_DEST = "torch_npu/csrc/inductor"
#: The subject line: no leading "[...]", which ``git am`` strips; the prefix is upstream's own
#: ("fix(inductor): ..." in its log).
SUBJECT = "fix(inductor): cpp_wrapper launches get a workspace and sync-block locks"
#: setup.py globs that install the helper (main header: csrc/*/*.h; its parts: csrc/*/*/*.h).
SETUP_GLOBS = ('"torch_npu/csrc/*/*.h"', '"torch_npu/csrc/*/*/*.h"')


class UpstreamPatchError(ValueError):
    """DIR cannot be patched; the message names what is missing or unknown."""


class AlreadyFixed(UpstreamPatchError):
    """The checkout already carries a fix; ``where`` says in which file(s)."""

    def __init__(self, where: str):
        super().__init__(f"already fixed upstream: {where}")
        self.where = where


def _git(repo: Path, *args: str, check: bool = True, env: dict | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise UpstreamPatchError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def checkout_root(directory: str | os.PathLike) -> Path:
    """The work tree's root, checked to be a git work tree of torch_npu (errors name ``directory``
    as given)."""
    d = Path(directory)
    if not d.is_dir():
        raise UpstreamPatchError(f"{d}: no such directory")
    proc = subprocess.run(["git", "-C", str(d), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UpstreamPatchError(f"{d} is not a git work tree (git rev-parse: {proc.stderr.strip()})")
    root = Path(proc.stdout.strip())
    missing = [p for p in ("setup.py", "torch_npu/_inductor") if not (root / p).exists()]
    if missing:
        where = "" if root == d.resolve() else f" (its work tree {root})"
        raise UpstreamPatchError(f"{d}{where} is not a torch_npu checkout: it has no {', '.join(missing)}")
    return root


def check_clean(root: Path, shown: str) -> None:
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no").strip()
    if dirty:
        raise UpstreamPatchError(f"{shown}: the work tree has uncommitted changes ({dirty.splitlines()[0]} ...); "
                                 "commit or stash them first")


def git_identity(root: Path, shown: str) -> str:
    """``Name <email>`` from the checkout's git config (what its own commits would carry)."""
    name, email = (_git(root, "config", key, check=False).strip() for key in ("user.name", "user.email"))
    if not (name and email):
        raise UpstreamPatchError(f"{shown}: no git identity for the commit (git config user.name / user.email "
                                 "are not set there); set them, or pass --author 'Name <email>'")
    return f"{name} <{email}>"


def layout_of(root: Path, shown: str | None = None) -> str:
    """``cpp_wrapper_npu`` or ``cpp_wrapper``, from the files present; raises naming what is missing."""
    shown = shown or str(root)
    for layout in ("cpp_wrapper_npu", "cpp_wrapper"):
        if (root / edits.WRAPPER[layout]).is_file():
            if not (root / edits.HEURISTICS[layout]).is_file():
                raise UpstreamPatchError(f"{shown}: unknown layout: {edits.WRAPPER[layout]} without "
                                         f"{edits.HEURISTICS[layout]}")
            return layout
    raise UpstreamPatchError(f"{shown}: unknown layout: neither {edits.NPU_WRAPPER} nor {edits.RT_WRAPPER}")


def fixed_where(root: Path, layout: str) -> str | None:
    """Where the checkout already carries a fix of the NULL sync pointers, or None."""
    found = []
    header = root / HEADER_DEST / launch_codegen.HELPER_HEADER
    if header.exists():
        found.append(f"{header.relative_to(root)} exists")
    if (root / upm.MODULE_PATH).exists():
        found.append(f"{upm.MODULE_PATH} exists")
    wrapper = (root / edits.WRAPPER[layout]).read_text()
    if "allocate_workspace" in wrapper and not edits.has_own_allocation(wrapper):
        found.append(f"{edits.WRAPPER[layout]} allocates the workspace in a way this patch does not know "
                     "(allocate_workspace)")
    return "; ".join(found) or None


@dataclasses.dataclass
class Patch:
    text: str  # mbox
    layout: str
    base: str  # the commit it applies to
    files: list  # [(path, added, removed)]
    changes: list  # what each edit did

    @property
    def lines(self) -> tuple[int, int]:
        return sum(a for _, a, _ in self.files), sum(r for *_, r in self.files)


def _helper_files() -> dict[str, bytes]:
    """The helper's headers as they are now in this package's csrc/, at their upstream paths."""
    src = launch_codegen.HELPER_DIR
    return {f"{HEADER_DEST}/{p.relative_to(src).as_posix()}": p.read_bytes()
            for p in launch_codegen.helper_sources(src)}


def _check_setup(root: Path, shown: str) -> None:
    setup = (root / "setup.py").read_text()
    missing = [g for g in SETUP_GLOBS if g not in setup]
    if missing:
        raise UpstreamPatchError(f"{shown}: setup.py does not install {', '.join(missing)}: the helper's headers "
                                 "would not reach the wheel's include directory")


def edited_files(root: Path, shown: str | None = None) -> tuple[str, dict[str, bytes], list[str]]:
    """(layout, {path: new content}, what changed) for the checkout at ``root`` (nothing written);
    errors name it ``shown``."""
    shown = shown or str(root)
    layout = layout_of(root, shown)
    where = fixed_where(root, layout)
    if where:
        raise AlreadyFixed(where)
    _check_setup(root, shown)
    out: dict[str, bytes] = {}
    changes: list[str] = []
    wrapper_edit = edits.edit_rt_wrapper
    if layout == "cpp_wrapper_npu":
        own = edits.has_own_allocation((root / edits.NPU_WRAPPER).read_text())
        wrapper_edit = edits.edit_npu_wrapper_replacing if own else edits.edit_npu_wrapper
    for path, edit in ((edits.WRAPPER[layout], wrapper_edit),
                       (edits.HEURISTICS[layout], lambda s: edits.edit_heuristics(s, layout))):
        src = edits.Source(path, (root / path).read_text())
        try:
            edit(src)
        except edits.CannotApply as exc:
            raise UpstreamPatchError(f"{shown}: {exc}") from None
        out[path] = src.text.encode()
        changes += [f"{path}: {c}" for c in src.changes]
    if (root / edits.FLEX).is_file():
        src = edits.Source(edits.FLEX, (root / edits.FLEX).read_text())
        try:
            edited = [edits.edit_flex(src), edits.edit_flex_loads(src)]  # the grid; the masked loads
        except edits.CannotApply as exc:
            raise UpstreamPatchError(f"{shown}: {exc}") from None
        if any(edited):
            out[edits.FLEX] = src.text.encode()
            changes += [f"{edits.FLEX}: {c}" for c in src.changes]
    out[upm.MODULE_PATH] = upm.module_text().encode()
    out.update(_helper_files())
    out[test_text.PATH] = test_text.text(
        edits.WRAPPER[layout], edits.HEURISTICS[layout]).encode()
    return layout, out, changes


def _message(layout: str, changes: list[str], base: str) -> str:
    launcher = ("codegen/cpp_wrapper_npu.py (aclrtLaunchKernelWithHostArgs)" if layout == "cpp_wrapper_npu"
                else "codegen/cpp_wrapper.py (rtKernelLaunch)")
    replaced = any("allocate_workspace" in c for c in changes)
    loads = any(edits.LOADS_CHANGE in c for c in changes)
    body = [
        SUBJECT,
        "",
        f"Fixes {ISSUE}",
        "",
        "What: the C++ wrapper's launcher passed NULL for a Triton-Ascend kernel's",
        "workspace_addr and sync_block_lock, so kernels that need a workspace (any",
        "mixed cube + vector kernel) or sync-block locks (software atomics, ordered",
        "stores) read and wrote through NULL under torch.compile(cpp_wrapper=True).",
        *([] if not replaced else [
            "This code already allocates them, inside the launch lambda (on the task",
            "queue's thread), with two allocate_workspace requests per launch, which",
            "alias (the stream's workspace block is returned for every request that",
            "fits) or leave the first pointer dangling (a larger request replaces the",
            "block), and a blocking aclrtMemcpy of the locks: replaced.",
        ]),
        "",
        "How (as op-plugin takes an operator's workspace, and Inductor a WorkspaceArg):",
        "- the autotuner records workspace_size, lock_num, lock_init_val and",
        "  sync_block_lock_layout of each compiled kernel in its saved params,",
        "  validated (bad metadata fails naming the kernel and the field);",
        f"- the launch code of {launcher}, before the",
        "  launch lambda, on the thread that runs the graph: sizes the launch",
        "  (overflow-checked) and takes ONE block from the caching allocator for the",
        "  launch's stream (torch_npu::inductor::LaunchMemory), carved into disjoint",
        "  512-byte-aligned lock and workspace regions; an out-of-memory error is the",
        "  allocator's own, naming the kernel, and nothing is queued;",
        "- the lambda copies only the raw pointers, writes the lock content with",
        "  byte fills on the stream (aclrtMemsetAsync: stream-ordered, legal while",
        "  capturing; a failure is returned as its ACL code with one log line) and",
        "  launches; it allocates, frees and waits for nothing;",
        "- the block is kept per (calling thread, stream) and reused by that",
        "  thread's next launch there with no allocator call and no event: its",
        "  lambdas run in order on the task queue, its kernels in order on the",
        "  stream. So launch memory is bounded by the streams and threads that",
        "  launch, not by the launches in flight. A kept block is allocated, never",
        "  free in the caching allocator: emptyCache and the out-of-memory retry,",
        "  which free cached blocks with aclrtFree (no wait for the device) after",
        "  draining the task queue with the mutex released, cannot free it under a",
        "  queued lambda or a pending kernel. It goes back with its stream",
        "  recorded as a use (recordStream): the allocator's event is queued behind",
        "  the lambdas that used it, and the block is free once that event completed",
        "  (or after emptyCache and the out-of-memory retry drained the queue and",
        "  synchronised it). That happens for an idle block, or one a larger",
        "  launch replaced or whose thread ended, at every cache miss (a",
        "  free-memory callback, FreeNPUMemoryCallbacksRegistry, registered as the",
        "  wrapper loads): when the allocator needs memory it gets all of it, so a",
        "  job that fits without the fix fits with it. Launches must be on the",
        "  thread's current stream, as torch_npu's own are. While the launch's",
        "  stream is captured the block comes from the graph's pool and goes back",
        "  once queued; no block goes back while a capture is underway;",
        "- the helper is header-only, torch_npu/csrc/inductor/npu_launch_resources.h",
        "  and npu_launch_resources/*.h (installed by setup.py's csrc globs);",
        "- a SymbolicGridFn for the Flex Attention backward template where it was",
        "  built with a plain grid (dynamic shapes under cpp_wrapper).",
        *([] if not loads else [
            "- where torch_npu's Flex Attention templates load a block with the bounds",
            "  checks of its transpose, the loads check the block's own axes: the",
            "  backward lays kT, vT and qT out [N, D] but loaded them with torch's [D, N]",
            "  arguments (with IS_DIVISIBLE or SAFE_HEAD_DIM false, every dynamic shape,",
            "  triton rejected the mask, or masked the wrong axis where BLOCK_N equals the",
            "  rounded head size); the forward checked its [head, sequence] K block as",
            "  [sequence, head] (the last key block read past K's end).",
        ]),
        "",
        "Changes:",
        *[f"- {c}" for c in changes],
        "",
        "Verified without an NPU (torch-npu-inductor-patches, tooling/upstream/verify.py):",
        f"git am onto {base[:12]}; py_compile of the changed files; every sample kernel's",
        "launcher rendered through the patched CppWrapperNpu equals, line for line, what",
        "the runtime patch set renders on the unpatched code (include and versioning",
        "lines aside); compiled against the torch_npu wheel's headers of this line with",
        "the new header where setup.py installs it, linked -Wl,--no-undefined against",
        "its libtorch_npu.so, and run on that libtorch_npu.so (its task queue, caching",
        "allocator and OpCommand) over a host test double of ACL, with TASK_QUEUE_ENABLE",
        "1, 0 and 2 (in a host simulation of ACL where the line's torch cannot be",
        "installed without an NPU). test/_inductor/test_npu_launch_resources.py runs on",
        "an NPU too: the dynamic Flex Attention job in each case of its NPU_CASES (bf16,",
        "fp16, float32; Q != KV; lengths off the 128 grid; causal, sliding-window and",
        "document masks; a relative-bias score_mod; GQA), out and gradients against eager.",
        *([] if not loads else [
            "The Flex backward template's loads ran, as written, in Triton's interpreter",
            "through their own pointer blocks (IS_DIVISIBLE / SAFE_HEAD_DIM false, block",
            "sides equal and not): masked along the blocks' axes after the change; before",
            "it, triton refused them or they masked the wrong axis.",
        ]),
    ]
    return "\n".join(body) + "\n"


def make_patch(directory: str | os.PathLike, ref: str | None = None, author: str | None = None,
               require_clean: bool = True) -> Patch:
    """The patch for ``directory``'s HEAD (or ``ref`` of its repository). Writes nothing there.
    ``author``: ``Name <email>``, by default the checkout's git identity."""
    root = checkout_root(directory)
    shown = str(directory) if ref is None else f"{directory} at {ref}"
    if require_clean and ref is None:
        check_clean(root, shown)
    base = _git(root, "rev-parse", "--verify", f"{ref or 'HEAD'}^{{commit}}").strip()
    tmp = Path(tempfile.mkdtemp(prefix="upstream-patch-"))
    try:
        work = tmp / "work"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(root), str(work)], check=True,
                       capture_output=True)
        _git(work, "checkout", "-q", base)
        if not (work / "torch_npu" / "_inductor").is_dir():
            raise UpstreamPatchError(f"{shown} is not a torch_npu checkout: no torch_npu/_inductor")
        layout, files, changes = edited_files(work, shown)
        # Read once the checkout is known to need the patch: an already fixed one says so first.
        author = author or git_identity(root, str(directory))
        m = re.match(r"\s*(.*?)\s*<([^>]+)>\s*$", author)
        if not m or not m.group(1):
            raise UpstreamPatchError(f"--author {author!r} is not 'Name <email>'")
        for path, content in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_bytes(content)
        _git(work, "add", "--", *files)
        who = {"GIT_AUTHOR_NAME": m.group(1), "GIT_AUTHOR_EMAIL": m.group(2),
               "GIT_COMMITTER_NAME": m.group(1), "GIT_COMMITTER_EMAIL": m.group(2)}
        msg = tmp / "message"
        msg.write_text(_message(layout, changes, base))
        _git(work, "commit", "-q", "--no-verify", "-F", str(msg), env=who)
        text = _git(work, "format-patch", "-1", "--stdout", "--no-signature", "HEAD")
        stat = _git(work, "diff", "--numstat", f"{base}..HEAD")
        numstat = [(p, int(a), int(r)) for a, r, p in (ln.split("\t") for ln in stat.splitlines())]
        return Patch(text, layout, base, numstat, changes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def branch_ref(root: Path, branch: str) -> str:
    """``branch`` or ``origin/branch``, whichever the repository has."""
    for ref in (branch, f"origin/{branch}", f"refs/remotes/origin/{branch}"):
        if subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"],
                          capture_output=True).returncode == 0:
            return ref
    raise UpstreamPatchError(f"{root}: no branch {branch!r} (nor origin/{branch})")


def for_branches(directory: str | os.PathLike, branches: list[str], out_dir: str | os.PathLike,
                 author: str | None = None, require_clean: bool = True) -> list[dict]:
    """One ``<branch>.patch`` per branch that can take it; a row per branch (written only when
    every branch was looked at, so that a bad name writes nothing). A dirty work tree is refused
    as in the single form: a pull request is made from committed code."""
    root = checkout_root(directory)
    if require_clean:
        check_clean(root, str(directory))
    author = author or git_identity(root, str(directory))
    refs = {b: branch_ref(root, b) for b in branches}
    rows, patches = [], {}
    for b, ref in refs.items():
        try:
            p = make_patch(directory, ref=ref, author=author)
        except AlreadyFixed as exc:
            rows.append({"branch": b, "result": "already fixed upstream", "detail": exc.where})
        except UpstreamPatchError as exc:
            rows.append({"branch": b, "result": "cannot apply", "detail": str(exc)})
        else:
            patches[b] = p
            added, removed = p.lines
            rows.append({"branch": b, "result": "applies", "layout": p.layout, "base": p.base,
                         "detail": f"{len(p.files)} files, +{added} -{removed}", "patch": f"{b}.patch"})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for b, p in patches.items():
        (out / f"{b}.patch").write_text(p.text)
    return rows


def table(rows: list[dict]) -> str:
    w = max([len(r["branch"]) for r in rows] + [6])
    out = [f"{'branch':<{w}}  result                  detail"]
    for r in rows:
        out.append(f"{r['branch']:<{w}}  {r['result']:<22}  {r.get('detail', '')}")
    return "\n".join(out)


def drift(patched_root: str | os.PathLike) -> list[str]:
    """What differs between a patched checkout's copy of the fix and this package's sources now:
    the helper's headers (byte for byte against csrc/) and the generated module (against
    launch_plan / launch_codegen). Empty when they are one text."""
    root = Path(patched_root)
    out = []
    want = _helper_files()
    have = {p.relative_to(root).as_posix(): p.read_bytes() for p in (root / HEADER_DEST).rglob("*.h")
            if p.relative_to(root).as_posix().startswith(f"{HEADER_DEST}/{launch_codegen.HELPER_PARTS}")
            or p.name == launch_codegen.HELPER_HEADER}
    for path in sorted(set(want) | set(have)):
        if path not in have:
            out.append(f"{path}: in csrc/, missing from the patch")
        elif path not in want:
            out.append(f"{path}: in the patch, not in csrc/")
        elif have[path] != want[path]:
            a, b = have[path].decode(errors="replace").splitlines(), want[path].decode(errors="replace").splitlines()
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out.append(f"{path}: line {i + 1} differs from csrc/ ({a[i] if i < len(a) else '<end>'!r} vs "
                       f"{b[i] if i < len(b) else '<end>'!r})")
    module = root / upm.MODULE_PATH
    if not module.exists():
        out.append(f"{upm.MODULE_PATH}: missing")
    elif module.read_text() != upm.module_text():
        out.append(f"{upm.MODULE_PATH}: differs from what launch_plan.py / launch_codegen.py generate now")
    return out
