"""CI's must-run guard (test/conftest.py, armed by ``.ci/test`` on the 2.7.1 leg): a named test file
none of whose tests passed fails the run, saying why its tests skipped; unarmed, nothing changes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GUARDED = """
import pytest

def test_needs_wheels():
    if {skip}:
        pytest.skip("torch_npu wheels not cached")
"""


def run_suite(tmp_path: Path, skip: bool, must_run: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test").mkdir()
    shutil.copy(HERE / "conftest.py", tmp_path / "test" / "conftest.py")
    (tmp_path / "test" / "test_guarded.py").write_text(GUARDED.format(skip=skip))
    (tmp_path / "test" / "test_other.py").write_text("def test_fine():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NPU_PATCHSET_MUST_RUN"}
    if must_run is not None:
        env["TORCH_NPU_PATCHSET_MUST_RUN"] = must_run
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_guard_whose_tests_all_skipped_fails_the_run_saying_why(tmp_path):
    proc = run_suite(tmp_path, skip=True, must_run="test/test_guarded.py")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert "test/test_guarded.py: no test passed: " in proc.stdout
    assert "torch_npu wheels not cached" in proc.stdout


def test_a_guard_never_collected_fails_the_run(tmp_path):
    proc = run_suite(tmp_path, skip=False, must_run="test/test_guarded.py test/test_missing.py")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert "test/test_missing.py: no test passed: no test of it ran" in proc.stdout
    assert "test/test_guarded.py" not in proc.stdout.split("did not run")[-1]


@pytest.mark.parametrize("skip,must_run", [(False, "test/test_guarded.py"), (True, None)])
def test_a_guard_that_ran_or_an_unarmed_run_passes(tmp_path, skip, must_run):
    proc = run_suite(tmp_path, skip=skip, must_run=must_run)
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout
    assert "did not run" not in proc.stdout


# ---- the same tests on a fresh machine and a warm one ------------------------------------------------
FAKE_RELEASE = "2.7.1.post99"  # on no list of the suite's: a cache-driven parametrisation would collect it


def collected(env: dict) -> list[str]:
    env = {k: v for k, v in env.items() if k != "TORCH_NPU_PATCHSET_MUST_RUN"}  # collection alone passes none
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "test"],
                          cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(ln for ln in proc.stdout.splitlines() if "::" in ln)


def test_a_fresh_machine_collects_what_a_warm_one_does(tmp_path):
    """Parametrisations come from declared lists and wheels download inside the tests: the suite collected
    with empty caches and with this machine's wheel cache plus wheels of releases no list names
    (zero-byte: collection must not read them) gives the same node ids (pytest-xdist's workers need it too)."""
    from torch_npu._inductor.patchset.tooling.releases import wheels

    empty = {name: str(tmp_path / "empty" / name) for name in ("cache", "wheels", "build")}
    fresh = collected(dict(os.environ, TORCH_NPU_PATCHSET_CACHE=empty["cache"],
                           TORCH_NPU_PATCHSET_WHEEL_CACHE=empty["wheels"], TORCH_NPU_PATCHSET_BUILD_CACHE=empty["build"]))
    warm = tmp_path / "warm"
    warm.mkdir()
    fakes = [f"torch_npu-{version}-cp311-cp311-manylinux_2_28_x86_64.whl" for version in (FAKE_RELEASE, "2.13.0")]
    if wheels.cache_dir().is_dir():
        for entry in wheels.cache_dir().iterdir():
            if entry.name not in fakes:  # a link to a real wheel: writing through it would empty that wheel
                (warm / entry.name).symlink_to(entry)
    for name in fakes:
        (warm / name).write_bytes(b"")
    assert collected(dict(os.environ, TORCH_NPU_PATCHSET_WHEEL_CACHE=str(warm))) == fresh
    assert len(fresh) > 400 and not any(FAKE_RELEASE in t for t in fresh)
