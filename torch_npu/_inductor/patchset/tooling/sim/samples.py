"""A few representative kernels' metadata, as triton-ascend's compiler reports it.

Used by ``python -m torch_npu._inductor.patchset launcher --samples`` (the
README's first command), the golden tests and the upstream-wheel tests. The
metadata dicts carry the fields triton-ascend sets (``name`` is "<kernel>
<mix_mode>", ``mix_mode`` one of "aiv", "aic", "mix") and only the sync fields
a kernel of that kind would have. ``block_clamp`` is the vector-core count
when auto-blockify is on (48 on an Ascend 910B).
"""
from __future__ import annotations

import dataclasses
import json
import os

VECTOR_CORES = 48


@dataclasses.dataclass(frozen=True)
class Sample:
    key: str
    title: str
    metadata: dict
    signature: str
    grid: tuple[int, int, int]
    block_clamp: int | None = VECTOR_CORES
    has_ffts: bool = False

    @property
    def kernel(self) -> str:
        return self.metadata["name"].split()[0]


def _meta(kernel: str, mix_mode: str = "aiv", **fields) -> dict:
    base = {"name": f"{kernel} {mix_mode}", "mix_mode": mix_mode, "parallel_mode": "simd", "force_simt_only": False}
    base.update(fields)
    return base


SAMPLES: tuple[Sample, ...] = (
    Sample("none", "pointwise add: needs nothing",
           _meta("triton_poi_fused_add_0"), "*fp32,*fp32,*fp32,i32", (16, 1, 1)),
    Sample("workspace", "reduction with a per-block workspace",
           _meta("triton_red_fused_sum_1", workspace_size=256), "*fp32,*fp32,i32,i32", (8, 1, 1)),
    Sample("locks", "cross-block reduction with legacy locks (init 7)",
           _meta("triton_red_fused_max_2", lock_num=16, lock_init_val=7), "*fp32,*fp32,i32", (8, 1, 1)),
    Sample("both", "flex-attention backward: workspace + locks",
           _meta("triton_tem_fused_flex_bwd_3", "mix", workspace_size=1024, lock_num=4, lock_init_val=1),
           "*bf16,*bf16,*bf16,*fp32,i32,i32", (12, 1, 2)),
    Sample("packed-mix", "3.6 packed layout: 2 ordered + 1 unordered lock (init 5), mix x2",
           _meta("triton_mm_splitk_4", "mix", sync_block_lock_layout=(1 << 32) | 2, lock_init_val=5,
                 auto_tile_and_bind_subblock=True),
           "*fp16,*fp16,*fp32,i32", (64, 1, 1)),
    Sample("ordered-only", "3.6 packed layout: 3 ordered locks (init 5)",
           _meta("triton_red_ordered_8", sync_block_lock_layout=3, lock_init_val=5), "*fp32,*fp32,i32", (8, 1, 1)),
    Sample("unordered-only", "3.6 packed layout: 2 unordered locks",
           _meta("triton_red_unordered_9", sync_block_lock_layout=2 << 32), "*fp32,*fp32,i32", (5, 1, 1)),
    Sample("lock-num-2pow32", "lock_num = 2**32 (the 32 GiB trap): 1 unordered lock",
           _meta("triton_red_fused_argmax_5", lock_num=1 << 32), "*fp32,*i64,i32", (4, 1, 1)),
    Sample("simt-only", "SIMT-only gather (Ascend 950): no sync fields",
           _meta("triton_poi_gather_6", force_simt_only=True, parallel_mode="simt", shared_mem_dynamic_size=4096),
           "*fp32,*i32,*fp32,i32", (32, 1, 1),
           block_clamp=None),
    Sample("ffts", "mix kernel on an FFTS target: ffts_addr + workspace + locks",
           _meta("triton_tem_fused_mm_7", "mix", workspace_size=512, lock_num=2, lock_init_val=-1),
           "*fp16,*fp16,*fp32,i32,i32", (6, 2, 1), has_ffts=True),
)

BY_KEY = {s.key: s for s in SAMPLES}

#: Set to a JSON list of samples (:func:`to_json`): the wheel harness renders those instead of :data:`SAMPLES`
#: (the real-runtime tier's scenario kernels and ``launcher --metadata``).
SAMPLES_ENV = "TORCH_NPU_PATCHSET_HARNESS_SAMPLES"


def to_json(samples) -> str:
    return json.dumps([dataclasses.asdict(s) for s in samples], sort_keys=True)


def from_json(text: str) -> tuple[Sample, ...]:
    return tuple(Sample(**dict(d, grid=tuple(d["grid"]))) for d in json.loads(text))


def rendered_samples() -> tuple[Sample, ...]:
    """What the wheel harness renders: :data:`SAMPLES`, or the list :data:`SAMPLES_ENV` names."""
    text = os.environ.get(SAMPLES_ENV)
    return from_json(text) if text else SAMPLES
