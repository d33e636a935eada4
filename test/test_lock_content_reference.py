"""Lock content: ours equals what torch_npu's own fix writes, for every lock layout, on torch_npu 2.14.0.

The reference is not a table typed in here: it is torch_npu's generated code
itself. The wheel harness renders each sample kernel's launcher through the
wheel's real classes, unpatched (upstream's fix: two allocate_workspace
requests and a host vector copied with aclrtMemcpy) and patched (our helper).
Samples cover every layout: lock_num slots, ordered only, unordered only,
ordered + unordered with a non-zero init value (where the ordered lines must
hold 0), and the mix-mode participant factor.

Where a release runs on its own runtime here (2.7.1.post11 on the first leg,
2.13.0 on the second), test_real_runtime.py makes this comparison on torch_npu's
own task queue and allocators. 2.14.0 cannot run here (the package index has no
CPU build of torch 2.14.0, and torch_npu's import aborts over the CUDA build:
docs/facts.md), so its launchers run in the host ACL simulation, with the probe
kernel reporting the lock slots each kernel found at start.
"""
from __future__ import annotations

import math

import pytest
from test_upstream_torch_npu import NEWEST, harness

from torch_npu._inductor.patchset.launch_plan import plan_from_metadata
from torch_npu._inductor.patchset.tooling.releases import rendered
from torch_npu._inductor.patchset.tooling.sim.harness import expected_lock_content
from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES

WITH_LOCKS = [s for s in SAMPLES if plan_from_metadata(s.metadata, kernel=s.kernel).needs_locks
              and s.metadata.get("lock_num", 0) < (1 << 32)]  # upstream asks for 32 GiB there


def lock_content_seen(version: str, s, data: dict, tag: str) -> list:
    """Run the launcher rendered as `tag` ("upstream" or "patched"); the probe's lock content, per launch."""
    judged = rendered.simulate_sample(version, data, s, tag=tag)
    launches = [la for la in judged["launches"] if la.get("phase", "launch") == "launch"]
    assert launches and all(la["acl_code"] == 0 for la in launches), judged
    return [la["lock_content"] for la in launches]


@pytest.mark.parametrize("version", [NEWEST])
@pytest.mark.parametrize("s", WITH_LOCKS, ids=[s.key for s in WITH_LOCKS])
def test_lock_content_equals_torch_npu_fix(version, s, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    upstream = lock_content_seen(version, s, data, "upstream")
    ours = lock_content_seen(version, s, data, "patched")
    assert ours == upstream, f"{s.key}: ours {ours} vs torch_npu {version}'s own fix {upstream}"
    plan = plan_from_metadata(s.metadata, kernel=s.kernel)
    block_num = min(math.prod(s.grid), s.block_clamp or math.prod(s.grid))
    expected = expected_lock_content(plan, block_num)  # the rule docs/design.md states
    runs = []
    for v in expected:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    assert ours[0] == runs
