"""One variable, TORCH_NPU_PATCHSET_CACHE, moves every cache the project writes (issue 52): the wheels, the builds,
the harness renders and the end-to-end tier's folders, as .ci/env.sh moves the torch environments."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json
from torch_npu._inductor.patchset.tooling.releases import real_artifacts, wheels
from torch_npu._inductor.patchset.tooling.sim import build
from torch_npu._inductor.patchset.tooling.e2e import stand_ins
print(json.dumps({"wheels": str(wheels.cache_dir()), "build": str(build.build_dir()),
                  "artifacts": str(real_artifacts.artifacts_cache()), "release builds": str(real_artifacts.build_cache()),
                  "e2e": str(stand_ins._cache()), "root": str(wheels.CACHE_ROOT)}))
"""


def _places(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NPU_PATCHSET_")}
    env.update(TORCH_NPU_PATCHSET_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"), **extra)
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_every_cache_folder_is_under_the_one_variable(tmp_path):
    places = _places(tmp_path)
    outside = {k: v for k, v in places.items() if not Path(v).is_relative_to(tmp_path / "cache")}
    assert not outside, outside
    assert not (tmp_path / "home").exists()  # nothing fell back to ~/.cache


def test_the_narrower_variables_still_override_their_part(tmp_path):
    places = _places(tmp_path, TORCH_NPU_PATCHSET_WHEEL_CACHE=str(tmp_path / "w"),
                     TORCH_NPU_PATCHSET_BUILD_CACHE=str(tmp_path / "b"))
    assert places["wheels"] == str(tmp_path / "w") and places["build"] == str(tmp_path / "b")
    assert Path(places["e2e"]).is_relative_to(tmp_path / "cache")
