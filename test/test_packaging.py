"""Packaging: the wheel adds files beside a real torch_npu and replaces none;
``pip install .`` into a fresh environment that has torch but no torch_npu
gives a working patch set."""
from __future__ import annotations

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
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)],
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


def test_real_artifact_check_runs_from_the_installed_package(installed):
    """The tooling needs nothing from the checkout: the harness, the declarations, the simulation's and
    the helper's headers all come from site-packages (run from outside the checkout)."""
    import torch

    from torch_npu._inductor.patchset.tooling.releases import real_artifacts as ra

    version = {"2.7": "2.7.1.post10", "2.14": "2.14.0"}.get(ra.line_of(torch.__version__))
    if version is None:
        pytest.skip(f"no torch_npu wheel of torch {torch.__version__}'s line is checked here")
    py, site, env, tmp_path = installed
    where = subprocess.run([py, "-c", "import torch_npu._inductor.patchset.tooling.releases.real_artifacts as m; "
                            "print(m.__file__, m.HARNESS, m.DEFAULT_HELPER)"],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    paths = where.stdout.split()
    assert all(p.startswith(str(site)) and Path(p).is_file() for p in paths), paths
    proc = subprocess.run([py, "-m", "torch_npu._inductor.patchset.tooling.releases.real_artifacts", "check", version],
                          capture_output=True, text=True, timeout=1500, cwd=tmp_path,
                          env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"torch_npu {version}: compiled" in proc.stdout and "linked with --no-undefined" in proc.stdout, proc.stdout[:2000]
    assert str(ROOT) not in proc.stdout + proc.stderr  # nothing read from the checkout
