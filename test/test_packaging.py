"""Packaging: the wheel adds files beside a real torch_npu and replaces none;
``pip install .`` into a fresh environment that has torch but no torch_npu
gives a working patch set: the runtime, ``status`` and ``selftest``, without the
verification tooling, whose commands say in one line that they need a checkout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=600,
    )
    (whl,) = out.glob("torch_npu_inductor_patches-*.whl")
    return whl


def test_wheel_only_adds_files_under_our_subpackage(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    ours = [n for n in names if not n.startswith("torch_npu_inductor_patches-")]
    assert "torch_npu/__init__.py" not in names
    assert "torch_npu/_inductor/__init__.py" not in names
    outside = [n for n in ours if not n.startswith("torch_npu/_inductor/patchset/") and n != "torch_npu_patchset_autoload.py"]
    assert outside == []
    decls = sorted(n.rsplit("/", 1)[1] for n in ours if "/_declarations/" in n)
    assert decls == sorted(p.name for p in (ROOT / "patches").glob("*.toml"))
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[torch.backends]" in entry_points
    assert "torch_npu_patchset_autoload:autoload" in entry_points


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict, Path]:
    """``pip install .`` (not editable) into a fresh venv on top of the test environment's torch:
    (python, its site-packages, environment, a working directory outside the checkout)."""
    tmp_path = tmp_path_factory.mktemp("installed")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = Path(subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # torch from the test environment, without the editable install of this
    # project (a path listed in a .pth file is not itself scanned for .pth files).
    import torch

    torch_site = Path(torch.__file__).resolve().parents[1]
    assert not list(torch_site.glob("torch_npu_inductor_patches-*")), "the project is installed beside torch"
    (site / "with_torch.pth").write_text(f"{torch_site}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCH_NPU_PATCHSET_DECLARATIONS")}
    # With build isolation, as a user's `pip install .` runs: pip fetches the build-system's setuptools (the
    # fresh venv's own is too old for pyproject's SPDX `license`).
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
        check=True, capture_output=True, text=True, timeout=600, env=env,
        cwd=tmp_path,
    )
    return py, site, env, tmp_path


def test_pip_install_into_fresh_env_with_torch_but_no_torch_npu(installed):
    py, site, env, tmp_path = installed
    check = (
        "import sys, importlib.util\n"
        "import torch_npu\n"
        "assert not [m for m in sys.modules if 'patchset' in m], 'import torch_npu ran our code'\n"
        "assert getattr(torch_npu, '__file__', None) is None, 'torch_npu must stay a namespace here'\n"
        "import torch, torch_npu_patchset_autoload as a\n"
        "assert a.ACTIVE and not a.FAILURES, a.FAILURES\n"
        "import torch_npu._inductor.patchset as p\n"
        "print(p.__file__)\n"
        "print(a.declarations_dir())\n"
    )
    proc = subprocess.run([py, "-c", check], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pkg_file, decl_dir = proc.stdout.split()
    assert pkg_file.startswith(str(site)), pkg_file
    assert decl_dir == str(site / "torch_npu" / "_inductor" / "patchset" / "_declarations")
    status = subprocess.run([py, "-m", "torch_npu._inductor.patchset", "status", "--json"],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert '"kernel-sync-metadata"' in status.stdout


#: What a user's wheel carries under the package: the runtime (applier, declarations, plan, codegen, fixes, the
#: helper's headers), the CLI with ``status``, and ``selftest``.
USER_MODULES = {"__init__", "__main__", "_applier", "_check", "_declarations", "_environment", "_patching",
                "_read_back", "_tooling", "cli", "dual_reduction", "flex_grid", "index_split", "launch_codegen", "launch_plan",
                "launch_memory_back", "masked_loads", "selftest"}


def test_the_user_wheel_carries_the_runtime_status_and_selftest_only(wheel):
    names = [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("torch_npu/_inductor/patchset/")]
    rel = [n[len("torch_npu/_inductor/patchset/"):] for n in names]
    assert {n[:-3] for n in rel if "/" not in n and n.endswith(".py")} == USER_MODULES
    fixes = {n for n in rel if n.startswith("fixes/")}
    assert fixes == {f"fixes/{p.name}" for p in (ROOT / "torch_npu/_inductor/patchset/fixes").glob("*.py")}
    helper = {n for n in rel if n.startswith("csrc/")}
    assert helper == {p.relative_to(ROOT / "torch_npu/_inductor/patchset").as_posix()
                      for p in (ROOT / "torch_npu/_inductor/patchset/csrc").rglob("*.h")}
    assert not [n for n in rel if n.startswith("tooling/")], "the verification tooling is not a user's"
    assert not [n for n in rel if "acl_sim" in n or n.endswith((".cpp", ".so"))]
    assert len(rel) == len(USER_MODULES) + len(fixes) + len(helper) + len(list((ROOT / "patches").glob("*.toml")))


def _run(py, env, cwd, *args):
    return subprocess.run([py, "-m", "torch_npu._inductor.patchset", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


@pytest.mark.parametrize("command", [["launcher", "--samples"], ["upstream-patch", "--checkout", "x"], ["demo"],
                                     ["status", "--against-wheel", "2.7.1.post11"],
                                     ["status", "--against-source", "x"]])
def test_a_tooling_command_from_a_user_wheel_says_it_needs_a_checkout(installed, command):
    """One line on stderr, exit 2, no traceback; nothing of the tooling is there to import."""
    py, site, env, tmp_path = installed
    assert not (site / "torch_npu" / "_inductor" / "patchset" / "tooling").exists()
    proc = _run(py, env, tmp_path, *command)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "needs a repository checkout" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(" ".join(command[:2]) if command[0] == "status" else command[0])


def test_a_user_wheel_runs_status_verbose_and_the_selftest(installed):
    py, site, env, tmp_path = installed
    status = _run(py, env, tmp_path, "status", "--verbose", "--no-import")
    assert status.returncode == 0, status.stderr
    assert "remove when:" in status.stdout and "upstream:" in status.stdout
    helps = _run(py, env, tmp_path, "--help")
    assert helps.returncode == 0 and "selftest" in helps.stdout and "needs a repository checkout" in helps.stdout
    check = ("from torch_npu._inductor.patchset import selftest as st\n"
             "import json\n"
             "print(json.dumps(st.run_check('codegen', st.check_codegen).to_json()))\n")
    proc = subprocess.run([py, "-c", check], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    codegen = json.loads(proc.stdout)
    assert codegen["status"] == "skipped" and "needs a repository checkout" in codegen["detail"], codegen
