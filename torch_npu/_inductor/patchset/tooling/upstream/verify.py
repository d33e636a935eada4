"""Prove an upstream patch on the code it is for, without an NPU.

For one torch_npu checkout (a branch head, or a release's source) and its patch:

1. ``git am`` applies it (in a temporary clone; the checkout is only read);
2. the patched Python compiles (``py_compile``, in the python of the branch's torch line);
3. **renders**: ``wheel_harness.py --source <patched> --patchset-off`` renders every sample
   kernel's launcher through the patched code, and ``wheel_harness.py --source <unpatched>``
   renders it with the runtime patch set; the two agree line for line (blank lines, the
   include and the versioning lines aside; kernel names normalised);
4. **compiles** those patched-code launchers against the headers of the torch_npu wheel of that
   line, with the patch's ``torch_npu/csrc/inductor/`` headers in an include directory laid
   out as ``setup.py`` installs them (so the generated ``#include <torch_npu/csrc/...>`` finds
   them), and **links** with ``-Wl,--no-undefined`` against that wheel's ``libtorch_npu.so``
   (:mod:`.real_artifacts`' compile / link / accounting);
5. **runs** them, with the helper the patch installs, on the line wheel's own runtime (its
   ``libtorch_npu.so``: task queue, caching allocator, ``OpCommand``) over the host ACL library, with
   ``TASK_QUEUE_ENABLE`` 1, 0 and 2 (:func:`on_runtime`, ``releases/real_runtime.py``); where that
   wheel cannot run here (no build of its torch that torch_npu imports on), in the host ACL
   simulation instead (:func:`simulate`), and the row says why;
6. ``status --against-source`` on the patched code: the launch fixes read ``upstream-has-fix``;
7. **Flex loads**: where ``kernel/flex_attention.py`` loads pointer blocks it builds (the backward template's
   kT / vT / qT / do), each load as the file writes it, through Triton's interpreter (:mod:`.flex_loads`),
   patched and unpatched: every case must come back masked along the block's own axes once patched.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ... import launch_codegen
from ..releases import launchers, rendered
from ..releases import real_artifacts as ra
from . import edits, flex_loads
from . import patch as up

HARNESS = ra.HARNESS
#: Lines of a rendered launcher that may differ between the upstream code and the runtime patch set.
_IGNORED = re.compile(r"^\s*(#\s*include\b|#\s*define\s+TORCH_NPU_LAUNCH_RESOURCES_ABI\b|// npu_launch_resources helper)")

#: The torch_npu wheel whose headers and libtorch_npu.so a branch's line is checked against.
LINE_WHEELS = {"2.7": "2.7.1.post10", "2.8": "2.8.0.post5", "2.9": "2.9.0.post9", "2.10": "2.10.0.post7",
               "2.11": "2.11.0.post3", "2.12": "2.12.0.post3", "2.13": "2.13.0", "2.14": "2.14.0",
               "2.15": "2.14.0"}
#: Branches built against their own release rather than their line's newest: v2.10.0-26.1.0 keeps the
#: codegen/cpp_wrapper.py layout, whose header includes aoti_runtime/utils.h, which 2.10.0.post7 no
#: longer ships; 2.10.0.post6 (its version.txt) does.
BRANCH_WHEELS = {"v2.10.0-26.1.0": "2.10.0.post6"}
#: A branch's torch line, where its version.txt does not say it (master builds for the newest torch).
BRANCH_LINES = {"master": "2.14"}
#: The author of the patches proved here (a maintainer's own git identity goes into theirs).
VERIFY_AUTHOR = "upstream-patch verification <verify@localhost>"


def torch_line(root: Path, branch: str | None = None) -> str:
    if branch in BRANCH_LINES:
        return BRANCH_LINES[branch]
    version = (root / "version.txt").read_text().strip() if (root / "version.txt").exists() else ""
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise up.UpstreamPatchError(f"{root}: no version.txt to tell its torch line; name the branch")
    return f"{m.group(1)}.{m.group(2)}"


def declared_torch_lines(root: Path) -> list[str]:
    """The torch lines a source tree says it builds for: the releases its version.txt lists (one on a
    release branch, several on master), else its requirements.txt's torch pin; [] where neither says."""
    for name, pattern in (("version.txt", r"^(\d+)\.(\d+)\.\d+"), ("requirements.txt", r"^torch\s*==\s*(\d+)\.(\d+)")):
        path = Path(root) / name
        if path.is_file():
            found = {(int(a), int(b)) for a, b in re.findall(pattern, path.read_text(), re.M)}
            if found:
                return [f"{a}.{b}" for a, b in sorted(found)]
    return []


def line_wheel(root: Path) -> str | None:
    """The release whose operator schemas a checkout is loaded with (its line's, from its version.txt),
    or None where it has no version.txt: a plain checkout has no built C extension to name them."""
    try:
        return LINE_WHEELS.get(torch_line(Path(root)))
    except up.UpstreamPatchError:
        return None


def _run(cmd, timeout=1800, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _env() -> dict:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join([str(ra.REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def harness(python: str, name: str, source: Path, off: bool, cache: Path, timeout: float = 1500) -> dict:
    """``wheel_harness.py`` over a source checkout, in ``python`` (a fresh interpreter); ``cache``:
    Inductor's cache directory, which the launchers name (the same for renderings compared)."""
    with tempfile.TemporaryDirectory(prefix="upstream-verify-harness-") as d:
        out = Path(d) / "out.json"
        cmd = [python, HARNESS, name, out, "--source", source] + (["--patchset-off"] if off else [])
        env = dict(_env(), TORCHINDUCTOR_CACHE_DIR=str(cache))
        proc = _run(cmd, timeout=timeout, env=env, cwd=str(ra.REPO_ROOT))
        if not out.exists():
            raise RuntimeError(f"the harness crashed on {source} (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def status_after(python: str, name: str, source: Path, timeout: float = 900) -> dict:
    proc = _run([python, "-m", "torch_npu._inductor.patchset.tooling.releases.wheels", "status", name,
                 "--source", source], timeout=timeout, env=_env(), cwd=str(ra.REPO_ROOT))
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": f"status exited {proc.returncode}: {proc.stderr[-1500:]}"}


def launcher_lines(cpp: str, tag: str) -> list[str]:
    """The lines compared: kernel names normalised to ``_patched``, blank / include / versioning lines out."""
    text = cpp.replace(f"_{tag}", "_patched")
    return [ln.rstrip() for ln in text.splitlines() if ln.strip() and not _IGNORED.match(ln)]


def compare(patched_code: dict, runtime: dict) -> dict:
    """{sample: first difference} between the patched code's launchers (patch set off) and the
    runtime patch set's on the unpatched code; {} when they agree."""
    diffs = {}
    for key, theirs in runtime.get("patched", {}).items():
        ours = patched_code.get("upstream", {}).get(key, {})
        if "cpp" not in theirs or "cpp" not in ours:
            diffs[key] = f"not rendered: {ours.get('error') or theirs.get('error')}"
            continue
        a, b = launcher_lines(ours["cpp"], "upstream"), launcher_lines(theirs["cpp"], "patched")
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            diffs[key] = (f"line {i + 1}: patched code {a[i] if i < len(a) else '<end>'!r} vs runtime patch set "
                          f"{b[i] if i < len(b) else '<end>'!r}")
    return diffs


def _header_text(patched_code: dict) -> str:
    entry = next(e for e in patched_code["upstream"].values() if "include" in e)
    if patched_code.get("layout") == "legacy":  # the whole header write_header wrote
        return ra.cpp_part_of_header(entry["include"])
    # The harness's header stand-in keeps both of newer torch's splices (splice_jit and splice_aot); a JIT
    # wrapper, the one built here, gets only the former: drop the AOT device header.
    jit = "\n".join(ln for ln in entry["include"].splitlines() if "/aoti_include/" not in ln)
    return jit + "\n" + patched_code.get("kernel_driver", "")


def translation_unit(name: str, patched_code: dict) -> str:
    """The patched code's header, every launcher it rendered, an exported entry point for each."""
    head = _header_text(patched_code)
    if "#include <torch_npu/csrc/inductor/npu_launch_resources.h>" not in head:
        raise ra.TierError(f"{name}: the patched wrapper header does not include "
                           "<torch_npu/csrc/inductor/npu_launch_resources.h>")
    parts = [f"// Upstream patch check: {name}, every sample launcher rendered by the patched code.\n",
             "#include <ATen/ATen.h>\n", head]
    for key, entry in patched_code["upstream"].items():
        if "error" in entry:
            raise ra.TierError(f"{name}: the patched code could not render {key}: {entry['error']}")
        parts.append(f"\n// ---- sample {key} ----\n{entry['cpp']}\n")
    calls = list(launchers.CALL_FN.finditer("\n".join(parts)))
    parts.append("\n// ---- exported entry points ----\n")
    parts.extend(launchers.entry_point(fn, i) for i, fn in enumerate(calls))
    return "".join(parts)


def build(name: str, wheel: str, python: str, patched_root: Path, patched_code: dict) -> ra.TierResult:
    """Compile and link the patched code's launchers (stages as in real_artifacts.build)."""
    npu_root = ra.npu_artifacts(wheel)
    torch_art = ra.torch_artifacts(ra.required_torch(wheel), python)
    std = ra.cxx_standard(torch_art.root)
    stub, _ = ra.acl_stub(npu_root)
    tu = translation_unit(name, patched_code)
    tmp = Path(tempfile.mkdtemp(prefix="upstream-verify-build-"))
    try:
        # The patch's headers where setup.py installs torch_npu/csrc/**.h (include/torch_npu/csrc/...); only
        # those: the rest of the branch's csrc/ is the wheel's business (its own include/ is used).
        installed = tmp / "installed_include"
        dest = installed / up.HEADER_DEST
        dest.mkdir(parents=True)
        shutil.copy2(patched_root / up.HEADER_DEST / launch_codegen.HELPER_HEADER, dest)
        shutil.copytree(patched_root / up.HEADER_DEST / launch_codegen.HELPER_PARTS, dest / launch_codegen.HELPER_PARTS)
        inc_dirs = [installed, *ra.include_dirs_of(npu_root), *torch_art.include_dirs]
        stand_ins = ra._needed_stand_ins(tu, inc_dirs)
        abi = ra._cxx11_abi(torch_art.lib_dir)
        cflags = [f"-std={std}", "-O1", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DUSE_NPU",
                  "-DBUILD_LIBTORCH=ON", "-DTORCH_INDUCTOR_CPP_WRAPPER"]
        libs = {"libtorch_npu.so": npu_root / "torch_npu" / "lib" / "libtorch_npu.so",
                **{n: torch_art.lib_dir / n for n in ra.TORCH_LIBS if (torch_art.lib_dir / n).exists()},
                "libascendcl.so (stub)": stub}
        pylib = ra._python_library(python)
        if pylib is not None and re.search(r"#include\s*[<\"](pybind11/|Python\.h)", tu):
            libs[f"{pylib.name} (the loading interpreter's)"] = pylib
        if "runtime/runtime/rt.h" in stand_ins:
            libs["libruntime.so (stub)"] = ra.link_stub("runtime", ra.RUNTIME_STUB_FUNCTIONS,
                                                        "the stand-in runtime/runtime/rt.h")
        info = {"wheel": wheel, "std": std, "torch": torch_art.source, "stand_in_headers": sorted(stand_ins)}
        return ra._compile_and_link(name, tmp, tu, cflags, inc_dirs, ra._python_include(python), stand_ins,
                                    libs, info)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_HELPER_ANGLE_INCLUDE = re.compile(r"#include\s*<torch_npu/csrc/inductor/npu_launch_resources\.h>")


def on_runtime(name: str, wheel: str | None, patched_root: Path, patched_code: dict) -> dict:
    """The patched code's launchers, with the helper the patch installs, on ``wheel``'s own runtime
    (``real_runtime.run_tags``, every TASK_QUEUE_ENABLE value): {"release", "summary", "problems"}, or
    {"cannot_run": why, in one line} where the wheel cannot run here."""
    from ..releases import real_runtime as rr
    from ..releases import runtime_column

    if not wheel:
        return {"cannot_run": f"{name}: no torch_npu wheel of its line to run on"}
    entries = {k: dict(e, cpp=e["cpp"].replace("_upstream", "_patched"),
                       include=_HELPER_ANGLE_INCLUDE.sub('#include "npu_launch_resources.h"', e.get("include", "")))
               for k, e in patched_code["upstream"].items() if "cpp" in e}
    renderings = {"loaded": True, "layout": patched_code.get("layout"), "patched": entries,
                  "launch_api": "rtKernelLaunch" if patched_code.get("layout") == "legacy"
                  else "aclrtLaunchKernelWithHostArgs"}
    helper = patched_root / up.HEADER_DEST / launch_codegen.HELPER_HEADER
    try:
        built = rr.build(wheel, helper=helper, renderings=renderings)
        outs = rr.run_tags(wheel, {"patched": rr.QUEUE_MODES}, built=built)
    except rr.RealRuntimeError as exc:
        return {"cannot_run": rr.first_line(str(exc))}
    kept = runtime_column.compact(outs["patched"])
    problems = [f"{s['sample']}: {'; '.join(s['problems'])[:300]}" for s in kept["samples"] if not s["ok"]]
    return {"release": wheel, "summary": runtime_column.patched_summary(kept), "problems": problems,
            "clean": len(kept["samples"]) == len(entries) and not problems}


def simulate(name: str, patched_code: dict) -> tuple[str, list]:
    """The patched code's launchers in the host simulation (as the release matrix runs them); a
    launcher that does not build says the compiler's first error, not only that it failed."""
    entries = {k: dict(e, cpp=e["cpp"].replace("_upstream", "_patched")) for k, e in patched_code["upstream"].items()
               if "cpp" in e}
    launch_api = "rtKernelLaunch" if patched_code.get("layout") == "legacy" else "aclrtLaunchKernelWithHostArgs"
    harness_json = {"patched": entries, "launch_api": launch_api}

    def one(s):
        if s.key not in entries:
            raise LookupError("not rendered")
        return rendered.simulate_sample(f"upstream-{name}", harness_json, s)

    def first_error(exc: Exception) -> str:
        text = str(exc)
        first = next((ln.strip() for ln in text.splitlines() if " error: " in ln), text.strip().splitlines()[0])
        return _COMPILER_PATH.sub("", first)

    return rendered.each_sample(one, explain=first_error)


#: The build folder's path in a compiler message (``/.../prog-x/x.cpp:12:3: error: ...``).
_COMPILER_PATH = re.compile(r"^\S*/(?=[^/\s]+\.(?:cpp|h):\d+)")


def template_loads(unpatched: Path, patched: Path) -> dict | None:
    """{"patched": ..., "unpatched": ...} (:func:`.flex_loads.check`) for the Flex Attention file's pointer loads;
    None where the branch has no such loads (no torch_npu backward template of that shape)."""
    path = patched / edits.FLEX
    try:
        if not path.is_file() or not flex_loads.pointer_loads(path.read_text()):
            return None
    except edits.CannotApply as exc:
        return {"patched": {"error": str(exc), "ok": False}}
    return {"patched": flex_loads.check(path.read_text()),
            "unpatched": flex_loads.check((unpatched / edits.FLEX).read_text())}


def apply_patch(root: Path, base: str, patch_text: str, dest: Path) -> tuple[bool, str]:
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(root), str(dest)], check=True,
                   capture_output=True)
    up._git(dest, "checkout", "-q", base)
    (dest.parent / "the.patch").write_text(patch_text)
    proc = _run(["git", "-C", dest, "-c", "user.name=verify", "-c", "user.email=verify@localhost", "am", "-q",
                 dest.parent / "the.patch"])
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def verify(root: str | os.PathLike, ref: str | None, python: str, name: str | None = None,
           line: str | None = None, patch: up.Patch | None = None, simulation: bool = True,
           wheel: str | None = None) -> dict:
    """Every stage for ``ref`` (default HEAD) of the checkout ``root``; a row of results. ``wheel``: the
    torch_npu release whose headers and libtorch_npu.so it is built against (default: its line's)."""
    root = up.checkout_root(root)
    name = name or ref or "HEAD"
    patch = patch or up.make_patch(root, ref=ref, author=VERIFY_AUTHOR)
    row: dict = {"name": name, "layout": patch.layout, "base": patch.base,
                 "files": len(patch.files), "added": patch.lines[0], "removed": patch.lines[1]}
    tmp = Path(tempfile.mkdtemp(prefix="upstream-verify-"))
    try:
        unpatched, patched = tmp / "unpatched", tmp / "patched"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(root), str(unpatched)], check=True,
                       capture_output=True)
        up._git(unpatched, "checkout", "-q", patch.base)
        line = line or torch_line(unpatched, ref.split("/")[-1] if ref else None)
        row["torch_line"], row["wheel"] = line, wheel or LINE_WHEELS.get(line)
        ok, out = apply_patch(root, patch.base, patch.text, patched)
        row["applies"] = ok
        if not ok:
            row["applies_error"] = out[-1500:]
            return row
        py_files = [str(patched / p) for p, *_ in patch.files if p.endswith(".py")]
        proc = _run([python, "-m", "py_compile", *py_files])
        row["compiles_python"] = proc.returncode == 0
        if proc.returncode != 0:
            row["py_compile_error"] = proc.stderr[-1500:]
        row["flex_loads"] = template_loads(unpatched, patched)
        # Named after the line's wheel: the loader declares that release's torch.ops.npu schemas for the source.
        label = row["wheel"] or name
        patched_code = harness(python, label, patched, off=True, cache=tmp / "inductor-cache")
        runtime = harness(python, label, unpatched, off=False, cache=tmp / "inductor-cache")
        row["rendered"] = sum(1 for e in patched_code.get("upstream", {}).values() if "cpp" in e)
        row["samples"] = len(patched_code.get("upstream", {}))
        row["render_errors"] = {k: e["error"] for k, e in patched_code.get("upstream", {}).items() if "error" in e}
        row["render_diffs"] = compare(patched_code, runtime)
        row["status_before"] = {p["id"]: p["state"] for p in runtime.get("status", [])}
        row["renders_same"] = bool(row["rendered"]) and not row["render_diffs"] and not row["render_errors"]
        if row["wheel"]:
            try:
                r = build(name, row["wheel"], python, patched, patched_code)
                row["build"] = {"ok": r.ok, "stage": r.stage, "message": r.message}
            except ra.TierError as exc:
                row["build"] = {"ok": False, "stage": "setup", "message": str(exc)}
        if simulation:  # on the wheel's own runtime; in the simulation only where that cannot run here
            row["runtime"] = on_runtime(name, row["wheel"], patched, patched_code)
            if "cannot_run" in row["runtime"]:
                row["simulation"], row["simulation_problems"] = simulate(name, patched_code)
        st = status_after(python, label, patched)
        row["status_after"] = {p["id"]: p["state"] for p in st.get("patches", [])} or {"error": st.get("error")}
        return row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- a release's source as a target --------------------------------------------------------------------
#: The protected branch whose setup.py a release's source is checked with (wheels ship no setup.py).
RELEASE_BRANCHES = {"2.7": "v2.7.1", "2.14": "master"}


def release_checkout(version: str, repo: Path, dest: Path) -> Path:
    """A git work tree of torch_npu ``version``'s released Python source (the wheel's
    ``torch_npu/_inductor``, cached), with the setup.py of its line's branch from ``repo`` (a clone of
    the branch bundle) and a version.txt: what a patch for that release applies to."""
    from ..releases import wheels as uw

    line = ra.line_of(version)
    branch = RELEASE_BRANCHES.get(line)
    if branch is None:
        raise up.UpstreamPatchError(f"torch_npu {version}: no branch of its line ({line}) to take setup.py from")
    tree = uw.extracted_tree(version)
    shutil.copytree(tree / "torch_npu" / "_inductor", dest / "torch_npu" / "_inductor")
    ref = up.branch_ref(Path(repo), branch)
    (dest / "setup.py").write_text(up._git(Path(repo), "show", f"{ref}:setup.py"))
    (dest / "version.txt").write_text(version + "\n")
    who = {"GIT_AUTHOR_NAME": "release", "GIT_AUTHOR_EMAIL": "release@localhost",
           "GIT_COMMITTER_NAME": "release", "GIT_COMMITTER_EMAIL": "release@localhost"}
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    up._git(dest, "add", "-A")
    up._git(dest, "commit", "-q", "-m", f"torch_npu {version} (released Python source) + setup.py of {branch}",
            env=who)
    return dest
