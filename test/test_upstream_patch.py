"""The fix as torch_npu pull requests: one patch per protected branch, proved on that branch.

Test data: the bundle of torch_npu's eleven protected branch heads
(``../shared/upstream/torch_npu-branches.bundle`` beside the repository, or
``$TORCH_NPU_UPSTREAM_BUNDLE``). Fast tests (every branch): the patch is made,
``git am`` applies it (subject and the maintainer's identity intact), the patched
Python compiles and adds no lint finding, its helper and generator are this
package's own text (a one-line edit is caught), the generated C++ is
``launch_codegen``'s, bad input is refused with nothing written, naming the path
given. The README's maintainers' block runs as written inside a clone. Slow tests (the
branches of this interpreter's torch line: v2.7.1 and v2.7.1-26.1.0 on torch 2.7,
master on torch 2.14): :func:`upstream_patch_verify.verify` renders, compiles,
links, simulates and reads the status after.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import release_wheels

from torch_npu._inductor.patchset import cli, launch_codegen
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata
from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES
from torch_npu._inductor.patchset.tooling.upstream import edits
from torch_npu._inductor.patchset.tooling.upstream import module as upm
from torch_npu._inductor.patchset.tooling.upstream import patch as up

REPO = Path(__file__).resolve().parents[1]
BRANCHES = ("master", "v2.7.1", "v2.7.1-26.1.0", "v2.9.0", "v2.9.0-26.1.0", "v2.10.0", "v2.10.0-26.1.0",
            "v2.11.0", "v2.11.0-26.1.0", "v2.12.0", "v2.12.0-26.1.0")
LEGACY = {"v2.10.0-26.1.0", "v2.11.0", "v2.11.0-26.1.0", "v2.12.0", "v2.12.0-26.1.0"}
#: Branches whose Flex Attention lowering gets a SymbolicGridFn (torch's template on v2.7.1, its own on -26.1.0).
FLEX_GRID = {"v2.7.1", "v2.7.1-26.1.0"}
#: torch_npu's own Flex backward template lays kT / vT / qT out [N, D] (its "# pta" lines) and loads them with
#: torch's [D, N] argument order on these heads (v2.7.1, v2.10.0 and master replaced the template), and in the
#: released 2.7.1.post10 and post6; the patch gives the loads the [N, D] order.
FLEX_LOADS = {"v2.7.1-26.1.0", "v2.9.0", "v2.9.0-26.1.0"}
FLEX_LOADS_RELEASES = {"2.7.1.post10", "2.7.1.post6"}
#: The backward's index lines bounded only at the boundary block on those heads (the patch bounds them when not
#: IS_DIVISIBLE, as their sibling lines are).
UNBOUNDED = ("n = get_bounded_indices(offs_n2[None, :], KV_LEN if CHECK_BLOCK_BOUNDARY else None)",
             "m = get_bounded_indices(offs_m1[None, :], Q_LEN if CHECK_BLOCK_BOUNDARY else None)")
#: The forward's K block load and the backward's three loads as those heads have them, and as the patch leaves them.
MASKED_AS_DN = (
    "k = load_checked_block(K_block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)",
    "kT = load_checked_2d(kT_ptrs, offs_k, offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, KV_LEN)",
    "vT = load_checked_2d(vT_ptrs, offs_v, offs_n2, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, V_HEAD_DIM, KV_LEN)",
    "qT = load_checked_2d(qT_ptrs, offs_k, offs_m1, None, None, SAFE_HEAD_DIM, IS_DIVISIBLE, QK_HEAD_DIM, Q_LEN)",
)
MASKED_AS_ND = (
    "k = load_checked_block(K_block_ptr, SAFE_HEAD_DIM, IS_DIVISIBLE)",
    "kT = load_checked_2d(kT_ptrs, offs_n2, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, QK_HEAD_DIM)",
    "vT = load_checked_2d(vT_ptrs, offs_n2, offs_v, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, KV_LEN, V_HEAD_DIM)",
    "qT = load_checked_2d(qT_ptrs, offs_m1, offs_k, None, None, IS_DIVISIBLE, SAFE_HEAD_DIM, Q_LEN, QK_HEAD_DIM)",
)
#: Patches the upstream patch does not carry (torch_npu's codegen with symbolic sizes, torch's lazy backward): after
#: git am their rows read as on the unpatched head.
NOT_CARRIED = {"npu-codegen-symbolic-modulus", "cpp-wrapper-numel-sizes", "cpp-wrapper-lazy-backward-config",
               "npu-empty-cache-launch-memory", "npu-dual-reduction-accumulator"}
#: The maintainer whose clone the patches are made in (its git config; a patch carries it).
MAINTAINER = ("Ada Maintainer", "ada@example.org")


def _bundle() -> Path | None:
    """``$TORCH_NPU_UPSTREAM_BUNDLE``, else ``shared/upstream/`` beside this checkout, else beside the
    checkout it was cloned from (a fresh clone made in a temporary folder finds it too)."""
    env = os.environ.get("TORCH_NPU_UPSTREAM_BUNDLE")
    if env:
        return Path(env) if Path(env).is_file() else None
    origin = subprocess.run(["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True).stdout.strip()
    for root in (REPO, *([Path(origin).resolve()] if origin and Path(origin).is_dir() else [])):
        path = root.parent / "shared" / "upstream" / "torch_npu-branches.bundle"
        if path.is_file():
            return path
    return None


# .ci/test lists this file as a guard that must run on the 2.7.1 leg: a missing bundle fails CI there.
pytestmark = pytest.mark.skipif(_bundle() is None, reason="the torch_npu branch bundle is absent (set "
                                "TORCH_NPU_UPSTREAM_BUNDLE or put shared/upstream/ beside the repository)")


def _git(*args, cwd=None, check=True):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def _clone_bundle(dest: Path) -> Path:
    """A maintainer's clone: the bundle's branches, their git identity in its config."""
    _git("clone", "-q", str(_bundle()), str(dest))
    _git("config", "user.name", MAINTAINER[0], cwd=dest)
    _git("config", "user.email", MAINTAINER[1], cwd=dest)
    return dest


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return _clone_bundle(tmp_path_factory.mktemp("branches") / "torch_npu")


@pytest.fixture
def no_global_identity(monkeypatch, tmp_path):
    """git reads no user-wide or system config (this machine's identity stays out of the test)."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture(scope="module")
def patches(repo, tmp_path_factory) -> tuple[list, Path]:
    out = tmp_path_factory.mktemp("patches")
    return up.for_branches(repo, list(BRANCHES), out), out


def _clone_at(repo: Path, branch: str, dest: Path) -> Path:
    sha = _git("rev-parse", f"origin/{branch}", cwd=repo).stdout.strip()
    _git("clone", "-q", "--shared", str(repo), str(dest))
    _git("checkout", "-q", sha, cwd=dest)
    return dest


def _applied(repo: Path, branch: str, patch: Path, dest: Path) -> Path:
    _clone_at(repo, branch, dest)
    proc = _git("-c", "user.name=t", "-c", "user.email=t@t", "am", str(patch), cwd=dest, check=False)
    assert proc.returncode == 0, proc.stderr
    return dest


# ---- every branch ---------------------------------------------------------------------------------------
def test_every_branch_gets_a_patch(patches):
    rows, out = patches
    assert [r["branch"] for r in rows] == list(BRANCHES)
    assert all(r["result"] == "applies" for r in rows), up.table(rows)
    for r in rows:
        assert r["layout"] == ("cpp_wrapper" if r["branch"] in LEGACY else "cpp_wrapper_npu"), r
        assert (out / f"{r['branch']}.patch").is_file()


def test_every_branch_stays_within_850_added_lines(patches):
    rows, _ = patches
    added = {r["branch"]: int(re.search(r"\+(\d+) ", r["detail"]).group(1)) for r in rows}
    assert max(added.values()) <= 850, added


def _lint(path: Path, text: str) -> list[str]:
    """pyflakes and bugbear findings (rule and message, no line numbers) of ``text`` as ``path``."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E7,E9,B",
                           "--output-format", "concise", "--stdin-filename", str(path), "-"],
                          input=text, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return sorted(re.sub(r"^.*?:\d+:\d+: ", "", ln) for ln in proc.stdout.splitlines() if re.match(r".*:\d+:\d+: ", ln))


@pytest.mark.parametrize("branch", BRANCHES)
def test_git_am_applies_and_python_compiles(repo, patches, branch, tmp_path):
    _, out = patches
    text = (out / f"{branch}.patch").read_text()
    headers = text.split("\n\n", 1)[0].replace("\n ", " ")  # mail headers, folded lines joined
    assert text.startswith("From ") and f"\nSubject: [PATCH] {up.SUBJECT}\n" in headers + "\n"
    assert f"\nFrom: {MAINTAINER[0]} <{MAINTAINER[1]}>\n" in text  # the clone's git identity
    assert f"Fixes {up.ISSUE}" in text and "Verified without an NPU" in text
    root = _applied(repo, branch, out / f"{branch}.patch", tmp_path / "co")
    # git am keeps the subject whole (it strips a leading "[...]") and the author.
    assert _git("log", "-1", "--format=%s|%an <%ae>", cwd=root).stdout.strip() == (
        f"{up.SUBJECT}|{MAINTAINER[0]} <{MAINTAINER[1]}>")
    changed = _git("diff", "--name-only", "HEAD~1..HEAD", cwd=root).stdout.split()
    py = [root / p for p in changed if p.endswith(".py")]
    proc = subprocess.run([sys.executable, "-m", "py_compile", *map(str, py)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for path in changed:  # upstream's own lint rules find nothing new in what the patch adds or edits
        if path.endswith(".py"):
            before = _git("show", f"HEAD~1:{path}", cwd=root, check=False).stdout
            new = [f for f in _lint(root / path, (root / path).read_text()) if f not in _lint(root / path, before)]
            assert not new, (path, new)
    assert up.drift(root) == []
    wrapper = (root / edits.WRAPPER["cpp_wrapper" if branch in LEGACY else "cpp_wrapper_npu"]).read_text()
    assert "void* workspace_addr = NULL;" not in wrapper and "void* sync_block_lock = NULL;" not in wrapper
    for path in changed:  # no absolute path, no reference to this project's package or settings
        content = (root / path).read_text()
        assert "patchset" not in content and "TORCH_NPU_PATCHSET" not in content, path
        assert str(REPO) not in content, path
    assert (branch in FLEX_GRID or branch in FLEX_LOADS) == (edits.FLEX in changed)


def test_master_keeps_aot_launches_on_the_lambda_read_as_upstream_form(repo, patches, tmp_path):
    """The same change as aot-npu-launch-lambda (issue 23), in master's own generate; the runtime probe reads
    the patched code as the upstream form of that fix, and the unpatched code as needing it."""
    import ast

    from torch_npu._inductor.patchset.fixes import aot_npu_launch_lambda as aot_fix

    def generate_src(text: str) -> str:
        cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == aot_fix.CLASS)
        return ast.get_source_segment(text, next(f for f in cls.body if getattr(f, "name", "") == "generate"))

    root = _applied(repo, "master", patches[1] / "master.patch", tmp_path / "co")
    after = (root / edits.NPU_WRAPPER).read_text()
    before = _git("show", f"HEAD~1:{edits.NPU_WRAPPER}", cwd=root).stdout
    torch_214_lazy = ("    def generate(self, wrapper):\n        if config.triton.autotune_at_compile_time is False:\n"
                      "            return self.generate_lazy(wrapper)\n")  # torch 2.14's guard (no aot_mode)
    assert aot_fix.classify(torch_214_lazy, generate_src(before))[0] == "lazy-in-aot"
    assert aot_fix.classify(torch_214_lazy, generate_src(after))[0] == "no-lazy-in-aot"
    for branch in set(BRANCHES) - {"master"}:  # no other protected head turns it off
        assert '"triton.autotune_at_compile_time", not V.graph.aot_mode' not in _git("show", f"origin/{branch}:{edits.NPU_WRAPPER}", cwd=repo,
                                                  check=False).stdout, branch


# ---- the Flex backward template's masked loads ----------------------------------------------------------
def _flex_text(repo: Path, ref: str) -> str:
    return _git("show", f"{ref}:{edits.FLEX}", cwd=repo, check=False).stdout


def test_flex_loads_edit_on_exactly_the_branches_that_carry_the_lines(repo, patches, tmp_path):
    """Every branch whose templates have the [D, N]-ordered loads of their [N, D] blocks (and the forward's K block
    checked as [sequence, head]) gets them reordered, and only those four lines change there; no other branch's
    flex_attention.py gets a load edit."""
    carrying = {b for b in BRANCHES if all(ln in _flex_text(repo, f"origin/{b}") for ln in MASKED_AS_DN)}
    assert carrying == FLEX_LOADS
    for branch in BRANCHES:
        root = _applied(repo, branch, patches[1] / f"{branch}.patch", tmp_path / branch)
        after = (root / edits.FLEX).read_text() if (root / edits.FLEX).is_file() else ""
        assert not [ln for ln in MASKED_AS_DN if ln in after], branch
        assert all(after.count(f"    {ln}\n") == 1 for ln in MASKED_AS_ND) == (branch in FLEX_LOADS), branch
        removed = [ln[1:].strip() for ln in _git("diff", "-U0", "HEAD~1", "--", edits.FLEX, cwd=root).stdout.splitlines()
                   if ln.startswith("-") and not ln.startswith("---")]
        loads = [ln for ln in removed if "load_checked_" in ln]
        assert loads == (list(MASKED_AS_DN) if branch in FLEX_LOADS else []), (branch, loads)
        if branch in FLEX_LOADS - FLEX_GRID:  # nothing else of the file changes there
            assert sorted(removed) == sorted(MASKED_AS_DN + UNBOUNDED), (branch, removed)
        message = (patches[1] / f"{branch}.patch").read_text().split("\n---\n", 1)[0]
        assert (edits.LOADS_CHANGE in message) == (branch in FLEX_LOADS), branch


def test_flex_loads_left_alone_where_they_match_their_blocks(repo):
    """torch's own layout ([D, N] blocks, the lines the "# pta" ones replaced) with torch's argument order is right:
    no edit, and the interpreter's check passes it; the file with no such template has no pointer loads."""
    from torch_npu._inductor.patchset.tooling.upstream import flex_loads

    text = _flex_text(repo, "origin/v2.9.0")
    for name in ("kT", "vT", "qT"):  # the commented torch line replaces the [N, D] one right below it
        torch_line = re.search(rf"^( +)# ({name}_ptrs = .*)$", text, re.M)
        text = re.sub(rf"^ +{name}_ptrs = .*$", torch_line.group(1) + torch_line.group(2), text, count=1, flags=re.M)
    fwd = MASKED_AS_DN[0]  # the forward's K block load, put right too: the text then has nothing to edit
    text = text.replace(fwd, MASKED_AS_ND[0])
    assert text.count(MASKED_AS_ND[0]) == 1
    src = edits.Source(edits.FLEX, text)
    assert edits.edit_flex_loads(src) is False and src.text == text
    assert [(p.ptrs, p.matches) for p in flex_loads.pointer_loads(text)] == [
        ("kT_ptrs", True), ("vT_ptrs", True), ("qT_ptrs", True), ("do_ptrs", True)]
    found = flex_loads.check(text)
    assert found["ok"], found
    for branch in sorted(set(BRANCHES) - FLEX_LOADS):
        assert flex_loads.pointer_loads(_flex_text(repo, f"origin/{branch}")) == [], branch


def test_flex_loads_check_fails_the_unpatched_template_and_passes_the_patched(repo):
    """Triton's interpreter runs each load as the file writes it: the head's kT / vT / qT loads are refused where the
    block's sides differ ("Cannot broadcast") and mask the wrong axis where they are equal; the patched loads, and
    the head's own do load, come back masked along their blocks' axes in every case."""
    from torch_npu._inductor.patchset.tooling.upstream import flex_loads

    text = _flex_text(repo, "origin/v2.9.0")
    before = flex_loads.check(text)
    assert not before["ok"] and set(before["loads"]) == {"kT_ptrs", "vT_ptrs", "qT_ptrs", "do_ptrs"}, before
    n = len(flex_loads.CASES)
    assert flex_loads.summary(before) == f"kT 0/{n}, vT 0/{n}, qT 0/{n}, do {n}/{n}"
    for ptrs in ("kT_ptrs", "vT_ptrs", "qT_ptrs"):
        got = list(before["loads"][ptrs].values())
        # the interpreter's refusal: "Cannot broadcast" (triton 3.3, triton-ascend 3.2), "Cannot make_shape_compatible"
        # (triton 3.8, the 2.14.1 leg's)
        assert got[0].startswith("ValueError: Cannot ") and all(" elements wrong" in r for r in got[1:]), (ptrs, got)
    src = edits.Source(edits.FLEX, text)
    assert edits.edit_flex_loads(src) is True
    after = flex_loads.check(src.text)
    assert after["ok"] and flex_loads.summary(after) == ", ".join(f"{x} {n}/{n}" for x in ("kT", "vT", "qT", "do"))


@pytest.mark.parametrize("change, words", [  # what the runtime patch's reading (masked_loads.read) refuses
    (lambda t: t.replace(MASKED_AS_DN[1], MASKED_AS_DN[1].replace("offs_k, offs_n2", "offs_k, offs_k")),
     "kT's offsets, flags and bounds do not pair up as one head and one sequence axis"),
    (lambda t: t.replace(MASKED_AS_DN[0], MASKED_AS_DN[0].replace("SAFE_HEAD_DIM", "IS_DIVISIBLE")),
     "k's flags are not IS_DIVISIBLE and SAFE_HEAD_DIM"),
    (lambda t: t.replace(MASKED_AS_DN[3], MASKED_AS_DN[3].replace("(qT_ptrs,", "(qT_ptrs + 0,")),
     "the layout of qT_ptrs + 0, which qT loads, is not assigned once"),
])
def test_flex_loads_of_an_unknown_shape_fail_naming_branch_and_pointers(repo, tmp_path, change, words):
    co = _clone_at(repo, "v2.9.0", tmp_path / "co")
    path = co / edits.FLEX
    text = path.read_text()
    path.write_text(change(text))
    assert path.read_text() != text
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "an unknown template", cwd=co)
    with pytest.raises(up.UpstreamPatchError) as info:
        up.make_patch(co, author="T <t@t>")
    assert str(info.value).startswith(f"{co}: {edits.FLEX}: ") and words in str(info.value), info.value


def test_patched_branch_is_already_fixed(repo, patches, tmp_path):
    root = _applied(repo, "v2.7.1", patches[1] / "v2.7.1.patch", tmp_path / "co")
    with pytest.raises(up.AlreadyFixed, match="npu_launch_resources.h exists"):
        up.make_patch(root)


# ---- one source of truth ---------------------------------------------------------------------------------
def test_one_line_edit_of_the_patch_helper_is_caught(repo, patches, tmp_path):
    root = _applied(repo, "master", patches[1] / "master.patch", tmp_path / "co")
    abi = root / up.HEADER_DEST / launch_codegen.HELPER_PARTS / "sizes.h"
    lines = abi.read_text().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if "unversioned" in ln)
    lines[i] = lines[i].replace("unversioned", "unversioned_edited")
    abi.write_text("".join(lines))
    found = up.drift(root)
    assert len(found) == 1 and "sizes.h: line" in found[0] and "unversioned_edited" in found[0], found
    module = root / upm.MODULE_PATH
    module.write_text(module.read_text().replace("SLOTS_PER_CACHE_LINE = 8", "SLOTS_PER_CACHE_LINE = 16"))
    assert any(upm.MODULE_PATH in d for d in up.drift(root))


def _load_generated(tmp_path: Path) -> dict:
    """The generated module, imported from a file as upstream would (dataclasses need it in sys.modules)."""
    import importlib.util

    path = tmp_path / "npu_launch_resources.py"
    path.write_text(upm.module_text())
    name = f"npu_launch_resources_generated_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return vars(module)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.key)
def test_generated_module_writes_launch_codegen_lines(sample, tmp_path):
    m = _load_generated(tmp_path)
    # Only what kernel_sync_params records: some branches' params carry nothing else (v2.12.0-26.1.0
    # records no mix_mode, on which the unordered locks' participant count depends).
    params = m["kernel_sync_params"](sample.metadata, sample.kernel)
    clamp = sample.block_clamp
    plan = plan_from_metadata(sample.metadata, kernel=sample.kernel)
    for simt in (False, True):
        got = m["launch_resource_lines"](sample.kernel, params, clamp, simt)
        want = launch_codegen.resource_code(plan, launch_codegen.LaunchSite(block_clamp=clamp, simt_only=simt))
        assert (got.before, got.in_lambda, got.after) == (want.before, want.in_lambda, want.after)
    if plan.needs_resources:  # taken before the lambda, only its regions in it
        got = m["launch_resource_lines"](sample.kernel, params, clamp, False)
        assert sum("LaunchMemory npu_sync_memory(" in ln for ln in got.before) == 1
        assert not any("npu_sync_memory" in ln for ln in got.in_lambda)
        assert got.in_lambda[0].startswith(("aclError npu_sync_status = npu_sync_regions.write_locks(",
                                            "void* sync_block_lock = npu_sync_regions.locks;"))
        assert [ln.split("  //")[0] for ln in got.after] == ["npu_sync_memory.handed();"]


def test_generated_module_leaves_out_only_uncalled_methods():
    text = upm.module_text()
    for kept in ("def needs_resources", "def lock_slots", "def init_value_fills", "def _bounded_fills",
                 "def resource_code", "class ResourceCode", "per launch, immutable;"):
        assert kept in text, kept
    # Display-only sizes and docstrings' later paragraphs (SyncPlan's names lock_bytes) stay in this project; so do
    # the plan's own field checks (upstream builds plans only from metadata: plan_from_metadata's are enough).
    for dropped in ("def describe", "def lock_fills", "def to_dict", "def from_dict", "def launcher_source",
                    "def args_decl_lines", "PARAMS_KEY", "lock_bytes", "workspace_bytes", "Unusable:",
                    "def __post_init__"):
        assert dropped not in text, dropped


def test_generated_module_refuses_bad_metadata_naming_kernel_and_field(tmp_path):
    m = _load_generated(tmp_path)
    with pytest.raises(ValueError, match=r"triton_bad.*lock_num"):
        m["kernel_sync_params"]({"lock_num": -3}, "triton_bad")
    assert "#include <torch_npu/csrc/inductor/npu_launch_resources.h>" in m["launch_resources_include"]()


def test_include_names_the_helpers_digest_where_it_is_installed(tmp_path):
    """In a checkout with the helper (as setup.py lays it out, or the source tree), the namespace the
    wrapper defines is the one the runtime patch set's include names: same headers, same digest."""
    pkg = tmp_path / "torch_npu"
    module = pkg / "_inductor" / "codegen" / "npu_launch_resources.py"
    module.parent.mkdir(parents=True)
    module.write_text(upm.module_text())
    for rel, content in up._helper_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    import importlib.util

    spec = importlib.util.spec_from_file_location("npu_launch_resources_in_checkout", module)
    m = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(m)
        assert m.launch_resources_include().splitlines() == [
            f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI {launch_codegen.helper_abi()}",
            "#include <torch_npu/csrc/inductor/npu_launch_resources.h>"]
    finally:
        del sys.modules[spec.name]


def test_upstream_flex_grid_matches_ours_and_prints_integer_cpp():
    pytest.importorskip("torch")
    import sympy
    from torch._inductor.codegen.cpp_utils import cexpr
    from torch._inductor.select_algorithm import SymbolicGridFn
    from torch.utils._sympy.functions import FloorDiv

    from torch_npu._inductor.patchset import flex_grid

    ns = {"SymbolicGridFn": SymbolicGridFn, "FloorDiv": FloorDiv}
    exec(edits._GRID, ns)
    grid = ns["_npu_flex_attention_backward_grid"]
    for args in flex_grid.SAMPLE_CALLS:
        assert tuple(grid(*args[:-1], dict(args[-1]))) == flex_grid.backward_grid(
            *args[:-1], dict(args[-1]), cdiv=flex_grid.int_cdiv)
    b, hq, lq, hkv, lkv = sympy.symbols("s0 s1 s2 s3 s4", positive=True, integer=True)
    x, _, _ = grid.sympy_call(b, hq, lq, 64, hkv, lkv, {"BLOCK_M2": 64, "BLOCK_N1": 32})
    assert "std::floor" not in cexpr(x) and "1.0" not in cexpr(x)


# ---- bad input: clear errors, nothing written ------------------------------------------------------------
def _cli(*args) -> int:
    parsed = cli.build_parser().parse_args(["upstream-patch", *args])
    return parsed.func(parsed)


def test_not_a_checkout_is_refused(tmp_path, capsys):
    out = tmp_path / "p.patch"
    assert _cli("--checkout", str(tmp_path), "--out", str(out)) == 2
    assert "not a git work tree" in capsys.readouterr().err and not out.exists()
    _git("init", "-q", str(tmp_path / "other"))
    assert _cli("--checkout", str(tmp_path / "other"), "--out", str(out)) == 2
    assert "not a torch_npu checkout: it has no setup.py, torch_npu/_inductor" in capsys.readouterr().err
    assert not out.exists()


def test_errors_name_the_checkout_as_given(repo, tmp_path, capsys, monkeypatch):
    co = _clone_at(repo, "v2.7.1", tmp_path / "co")
    monkeypatch.chdir(tmp_path)
    (co / "setup.py").write_text((co / "setup.py").read_text() + "\n# local edit\n")
    out = tmp_path / "p.patch"
    assert _cli("--checkout", "co", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream-patch: co: the work tree has uncommitted changes") and not out.exists(), err
    _git("checkout", "-q", "--", "setup.py", cwd=co)
    _git("rm", "-q", edits.NPU_WRAPPER, cwd=co)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x", cwd=co)
    assert _cli("--checkout", "co", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream-patch: co: unknown layout: neither torch_npu/_inductor/codegen/cpp_wrapper_npu.py"), err
    assert "upstream-patch-" not in err and not out.exists()  # no temporary folder named
    # An edit whose anchor is missing names the checkout too, not the temporary clone.
    _git("checkout", "-q", "HEAD~1", cwd=co)
    (co / edits.NPU_WRAPPER).write_text((co / edits.NPU_WRAPPER).read_text().replace("force_simt_only=False,", ""))
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "y", cwd=co)
    assert _cli("--checkout", "co", "--out", str(out), "--author", "T <t@t>") == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream-patch: co: torch_npu/_inductor/codegen/cpp_wrapper_npu.py: "), err
    assert "upstream-patch-" not in err and not out.exists()


def test_missing_out_folder_writes_nothing(repo, tmp_path, capsys):
    assert _cli("--checkout", str(repo), "--out", str(tmp_path / "no" / "p.patch")) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_branches_with_a_dirty_tree_write_nothing(repo, tmp_path, capsys):
    co = _clone_at(repo, "v2.7.1", tmp_path / "co")
    (co / "setup.py").write_text((co / "setup.py").read_text() + "\n# local edit\n")
    out = tmp_path / "o"
    assert _cli("--checkout", str(co), "--branches", "v2.7.1,master", "--out-dir", str(out),
                "--author", "T <t@t>") == 2
    assert "uncommitted changes" in capsys.readouterr().err and not out.exists()


def test_author_is_the_checkouts_git_identity(repo, tmp_path, capsys, no_global_identity):
    co = _clone_at(repo, "v2.9.0", tmp_path / "co")  # a clone: the repository's local config is not copied
    out = tmp_path / "p.patch"
    assert _cli("--checkout", str(co), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "no git identity" in err and "--author" in err and str(co) in err and not out.exists()
    assert _cli("--checkout", str(co), "--branches", "v2.9.0", "--out-dir", str(tmp_path / "o")) == 2
    assert "no git identity" in capsys.readouterr().err and not (tmp_path / "o").exists()
    _git("config", "user.name", "Bo Reviewer", cwd=co)
    _git("config", "user.email", "bo@example.org", cwd=co)
    assert _cli("--checkout", str(co), "--out", str(out)) == 0
    assert "\nFrom: Bo Reviewer <bo@example.org>\n" in out.read_text()
    assert _cli("--checkout", str(co), "--out", str(out), "--author", "Cy Other <cy@example.org>") == 0
    assert "\nFrom: Cy Other <cy@example.org>\n" in out.read_text()
    assert _cli("--checkout", str(co), "--out", str(tmp_path / "q.patch"), "--author", "nobody") == 2
    assert "is not 'Name <email>'" in capsys.readouterr().err and not (tmp_path / "q.patch").exists()


def test_unknown_branch_writes_nothing(repo, tmp_path, capsys):
    assert _cli("--checkout", str(repo), "--branches", "v2.7.1,no-such", "--out-dir", str(tmp_path / "o")) == 2
    assert "no branch 'no-such'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_anchor_missing_names_file_and_anchor(repo, tmp_path):
    co = _clone_at(repo, "v2.9.0", tmp_path / "co")
    src = edits.Source(edits.NPU_WRAPPER, (co / edits.NPU_WRAPPER).read_text().replace("force_simt_only=False,", ""))
    with pytest.raises(edits.CannotApply, match=r"cpp_wrapper_npu.py: .*force_simt_only=False"):
        edits.edit_npu_wrapper(src)


def test_report_names_no_path_of_this_machine(tmp_path):
    from torch_npu._inductor.patchset.tooling.upstream import matrix as mx

    local = (str(tmp_path), str(REPO), str(Path.home()))
    row = {"name": "v2.7.1", "layout": "cpp_wrapper_npu", "files": 9, "added": 800, "removed": 3, "applies": True,
           "torch_line": "2.7", "wheel": "2.7.1.post10", "rendered": 10, "samples": 10, "renders_same": True,
           "build": {"ok": False, "stage": "compile", "message": " ".join(f"{p}/x.h: error" for p in local)},
           "simulation": "0/10 launchers ok", "simulation_problems": [f"none: {tmp_path}/a.cpp:1:2: error: x"],
           "status_after": {"error": f"{REPO}/status failed"}}
    text = mx.render_markdown([row], "bash .ci/upstream-patches")
    assert not [p for p in local if p in text] and "<repo>/x.h" in text and "~/x.h" in text, text
    committed = (REPO / "docs" / "upstream-patches.md").read_text()
    assert not [p for p in (str(REPO), str(Path.home()), "/tmp/", "/work/") if p in committed]


def test_report_states_each_rows_flex_loads():
    from torch_npu._inductor.patchset.tooling.upstream import matrix as mx

    ok = {"kT_ptrs": {"a": "ok", "b": "ok"}}
    row = {"name": "v2.9.0", "layout": "cpp_wrapper_npu", "files": 8, "added": 837, "removed": 6, "applies": True,
           "torch_line": "2.9", "wheel": "2.9.0.post9", "rendered": 10, "samples": 10, "renders_same": True,
           "build": {"ok": True}, "simulation": "10/10 launchers ok", "status_after": {},
           "flex_loads": {"patched": {"loads": ok, "ok": True},
                          "unpatched": {"loads": {"kT_ptrs": {"a": "ValueError: Cannot broadcast", "b": "ok"}},
                                        "ok": False}}}
    none = dict(row, name="master", flex_loads=None)
    lines = mx.render_markdown([row, none], "x").splitlines()
    assert lines[next(i for i, ln in enumerate(lines) if ln.startswith("| branch"))].endswith("| Flex loads |")
    assert next(ln for ln in lines if ln.startswith("| `v2.9.0`")).endswith(
        "| patched: kT 2/2<br>unpatched: kT 1/2 |")
    assert next(ln for ln in lines if ln.startswith("| `master`")).endswith("| no such loads |")
    assert mx.flex_loads_ok(row) and mx.flex_loads_ok(none)
    assert not mx.flex_loads_ok(dict(row, flex_loads={"patched": {"error": "no helper", "ok": False}}))


# ---- the whole proof, on this interpreter's torch line ---------------------------------------------------
def _torch_line() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


VERIFIED = {"2.7": ("v2.7.1", "v2.7.1-26.1.0"), "2.14": ("master",)}


def assert_proved(row: dict) -> None:
    """Every stage of an upstream patch's proof passed: it applies, its Python compiles, it renders every
    sample launcher line for line as the runtime patch set does, they compile and link against the line's
    wheel and run clean on that wheel's own runtime (in the simulation where it cannot run here), and the
    runtime patch set then reads the fix as upstream's."""
    assert row["applies"] and row["compiles_python"], row
    assert row["rendered"] == len(SAMPLES) and row["renders_same"], row
    assert row["build"]["ok"], row["build"]
    runtime = row["runtime"]
    if row["wheel"] in release_wheels.RUNS_HERE:  # else in the simulation: its torch cannot run here
        assert runtime.get("clean"), runtime
        assert runtime["summary"] == f"patched: {len(SAMPLES)}/{len(SAMPLES)} samples clean (TASK_QUEUE_ENABLE 1, 0, 2)"
        assert "simulation" not in row
    else:
        assert "cannot_run" in runtime and row["wheel"] in runtime["cannot_run"], runtime
        assert row["simulation"] == f"{len(SAMPLES)}/{len(SAMPLES)} launchers ok", row.get("simulation_problems")
    loads = row["flex_loads"]  # the Flex template's loads through Triton's interpreter: wrong before, right after
    if row["name"] in FLEX_LOADS | FLEX_LOADS_RELEASES:
        assert loads["patched"]["ok"] and not loads["unpatched"]["ok"], loads
    else:
        assert loads is None, loads
    after = row["status_after"]
    assert after["kernel-sync-metadata"] == after["cpp-wrapper-sync-resources"] == "upstream-has-fix", after
    assert after["npu-flex-attention-backward-grid"] == "upstream-has-fix", after
    assert after.get("aot-npu-launch-lambda") in ("upstream-has-fix", None), after


@pytest.mark.parametrize("branch", [b for bs in VERIFIED.values() for b in bs])
def test_verified_on_branch(repo, branch):
    from torch_npu._inductor.patchset.tooling.upstream import verify as v

    line = next(k for k, bs in VERIFIED.items() if branch in bs)
    if _torch_line() != line:
        pytest.skip(f"{branch} renders with torch {line}; this is torch {_torch_line()}")
    row = v.verify(repo, f"origin/{branch}", sys.executable, name=branch)
    assert_proved(row)
    assert "failed" not in row["status_after"].values(), row["status_after"]
    assert row["status_before"] and "failed" not in row["status_before"].values(), row["status_before"]


# ---- released sources as targets -------------------------------------------------------------------------
def _release(repo: Path, version: str, dest: Path) -> Path:
    from torch_npu._inductor.patchset.tooling.releases import wheels as uw
    from torch_npu._inductor.patchset.tooling.upstream import verify as v

    try:
        return v.release_checkout(version, repo, dest)
    except uw.WheelUnavailable as exc:
        if exc.index_unreachable:
            pytest.skip(f"torch_npu {version}: the package index is unreachable: {exc}")
        raise


@pytest.mark.parametrize("version", ["2.7.1.post11", "2.14.0"])
def test_release_with_upstreams_own_allocation_gets_it_replaced(repo, version, tmp_path):
    co = _release(repo, version, tmp_path / "co")
    patch = up.make_patch(co, author="T <t@t>")
    assert any("drops upstream's two allocate_workspace requests" in c for c in patch.changes), patch.changes
    assert patch.lines[0] <= 850, patch.lines
    root = tmp_path / "patched"
    _git("clone", "-q", "--shared", str(co), str(root))
    (tmp_path / "p.patch").write_text(patch.text)
    proc = _git("-c", "user.name=t", "-c", "user.email=t@t", "am", str(tmp_path / "p.patch"), cwd=root, check=False)
    assert proc.returncode == 0, proc.stderr
    wrapper = (root / edits.NPU_WRAPPER).read_text()
    assert "allocate_workspace(" not in wrapper and "aclrtMemcpy(" not in wrapper and "kernel_params" not in wrapper
    assert f"{upm.LINES_FN}(" in wrapper and up.drift(root) == []
    for part in ("before", "after"):
        assert wrapper.count(f"prefix.writelines(launch_resources.{part})") == 1
    with pytest.raises(up.AlreadyFixed, match="npu_launch_resources.h exists"):
        up.make_patch(root)


RELEASES = {"2.7": ("2.7.1.post10", "2.7.1.post6", "2.7.1.post11"), "2.14": ("2.14.0",)}


@pytest.mark.parametrize("version", [r for rs in RELEASES.values() for r in rs])
def test_verified_on_release_source(repo, version, tmp_path):
    from torch_npu._inductor.patchset.tooling.upstream import verify as v

    line = next(k for k, rs in RELEASES.items() if version in rs)
    if _torch_line() != line:
        pytest.skip(f"torch_npu {version} renders with torch {line}; this is torch {_torch_line()}")
    co = _release(repo, version, tmp_path / "co")
    row = v.verify(co, None, sys.executable, name=version, line=line, wheel=version)
    assert row["layout"] == ("cpp_wrapper" if version == "2.7.1.post6" else "cpp_wrapper_npu")
    assert_proved(row)


def _console_script() -> Path:
    """The ``torch-npu-patchset`` command this package installs, beside this interpreter."""
    script = Path(sys.executable).parent / "torch-npu-patchset"
    assert script.is_file(), f"{script}: the package's console script is not installed beside {sys.executable}"
    return script


def _states(out: str) -> dict:
    """patch id -> state, from a status table."""
    from torch_npu._inductor.patchset import _declarations

    ids = {d.id for d in _declarations.load()}
    return {m.group(1): m.group(2) for m in re.finditer(r"^([a-z0-9-]+) +(\S+)$", out, re.M) if m.group(1) in ids}


def test_status_against_source(repo, patches, tmp_path, capsys):
    """A patched branch of this torch's line (v2.7.1 on torch 2.7, master on 2.14) reads upstream-has-fix."""
    assert cli.main(["status", "--against-source", str(tmp_path / "nothing")]) == 1
    assert "is not a torch_npu source checkout: it has no torch_npu/_inductor/" in capsys.readouterr().err
    branch, schemas = ("v2.7.1", "operator schemas of 2.7.1.post10") if _torch_line() == "2.7" else (
        "master", "no operator schemas")
    root = _applied(repo, branch, patches[1] / f"{branch}.patch", tmp_path / "co")
    assert cli.main(["status", "--against-source", str(root)]) == 0
    table = capsys.readouterr().out
    assert f"{root} (source checkout, {schemas}, layout cpp_wrapper_npu, NPU stand-ins)" in table
    for pid in ("kernel-sync-metadata", "cpp-wrapper-sync-resources", "npu-flex-attention-backward-grid"):
        assert any(ln.startswith(pid) and ln.endswith("upstream-has-fix") for ln in table.splitlines()), table
    assert "failed" not in table


def test_status_against_a_source_of_another_line_says_which_torch_it_needs(repo, tmp_path):
    """As ``--against-wheel`` does for a release of another line: one line, exit 2, nothing loaded (a v2.12.0
    checkout on torch 2.7 read ``failed: ... ModuleNotFoundError`` for every patch)."""
    import importlib.metadata

    branch, needs = ("v2.12.0", "2.12") if _torch_line() == "2.7" else ("v2.7.1", "2.7")
    root = _clone_at(repo, branch, tmp_path / "co")
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--against-source",
                           str(root)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f"status: --against-source {root}: this torch_npu source needs torch {needs} (its torch line); this "
        f"environment has torch {importlib.metadata.version('torch')}: run it where torch {needs} is installed, or "
        f"name a checkout of the {_torch_line()} line")


def test_each_branch_declares_the_torch_line_its_name_says(repo, tmp_path):
    """What the line check reads (version.txt, else requirements.txt's torch pin) on every branch; master's
    version.txt lists the lines it builds for, its pin the one it is tested on."""
    from torch_npu._inductor.patchset.tooling.upstream import verify as v

    for branch in BRANCHES:
        root = tmp_path / branch
        root.mkdir()
        for name in ("version.txt", "requirements.txt"):
            (root / name).write_text(_git("show", f"origin/{branch}:{name}", cwd=repo).stdout)
        named = v.BRANCH_LINES.get(branch) or ".".join(branch[1:].split(".")[:2])
        lines = v.declared_torch_lines(root)
        assert lines == (["2.13", "2.14", "2.15"] if branch == "master" else [named]), (branch, lines)
        (root / "version.txt").unlink()
        assert v.declared_torch_lines(root) == [named], branch


def test_commands_work_from_inside_a_checkout(repo, tmp_path):
    """``--checkout .`` and ``--against-source .`` run inside a torch_npu checkout, whose own torch_npu
    package must not shadow this one (``python -m`` would put it first on sys.path)."""
    if _torch_line() != "2.7":
        pytest.skip("v2.7.1 loads with torch 2.7")
    root = _clone_at(repo, "v2.7.1", tmp_path / "co")
    for key, value in zip(("user.name", "user.email"), MAINTAINER):
        _git("config", key, value, cwd=root)
    script = _console_script()
    proc = subprocess.run([script, "upstream-patch", "--checkout", ".", "--out", "../p.patch"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and (tmp_path / "p.patch").is_file(), proc.stderr
    proc = subprocess.run(["git", "am", "../p.patch"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([script, "status", "--against-source", "."], cwd=root, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    states = _states(proc.stdout)
    assert states["kernel-sync-metadata"] == states["cpp-wrapper-sync-resources"] == "upstream-has-fix", proc.stdout
    assert states["npu-flex-attention-backward-grid"] == "upstream-has-fix", proc.stdout


def _maintainers_block() -> str:
    """The README's maintainers' commands: the first ```bash block of its "For torch_npu maintainers"
    section, as written there."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## For torch_npu maintainers.*?(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md has no '## For torch_npu maintainers' section"
    block = re.search(r"^```bash\n(.*?)^```", section.group(0), re.S | re.M)
    assert block, "the README's maintainers' section has no ```bash block"
    return block.group(1)


def test_readme_maintainers_block_runs_as_written(tmp_path):
    """Every command of the block, verbatim, in a fresh clone of the branches (the maintainer's git
    identity set there): the pull request against v2.7.1 is applied, status then reads as the
    README's comment says, and every other branch gets its own pull request branch."""
    if _torch_line() != "2.7":
        pytest.skip("the block's status step loads v2.7.1, which needs torch 2.7")
    block = _maintainers_block()
    clone = _clone_bundle(tmp_path / "pytorch")
    env = dict(os.environ, PATH=f"{_console_script().parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    status_line = next(ln for ln in block.splitlines() if "status --against-source" in ln)
    said = re.search(r"#.*?\b(upstream-has-fix|applied)\b", status_line)
    assert said, f"the README does not say what status reads after git am: {status_line!r}"
    states = _states(proc.stdout)
    carried = {k: v for k, v in states.items() if k not in NOT_CARRIED}
    assert carried and set(carried.values()) == {said.group(1)}, (status_line, states)
    # One commit per pull request, each the maintainer's, subject whole, on its branch's head.
    branches = ["v2.7.1"] + re.search(r"--branches\s+(\S+)", block).group(1).split(",")
    heads = {_git("rev-parse", f"origin/{b}", cwd=clone).stdout.strip(): b for b in branches}
    made = _git("for-each-ref", "--format=%(objectname)", "refs/heads", cwd=clone).stdout.split()
    fixes = {}
    for sha in made:
        subject, author, parent = _git("log", "-1", "--format=%s%n%an <%ae>%n%P", sha, cwd=clone).stdout.splitlines()
        if subject == up.SUBJECT:
            assert author == f"{MAINTAINER[0]} <{MAINTAINER[1]}>"
            fixes[heads[parent]] = sha
    assert sorted(fixes) == sorted(branches), (sorted(fixes), branches)
