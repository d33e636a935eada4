"""What the patch set's ``torch.backends`` entry point adds to ``import torch``.

Two measurements, each the median over N fresh interpreter processes:

1. ``import torch`` wall time with the entry point armed, against
   ``TORCH_NPU_PATCHSET_DISABLE=1`` (the entry point returns at once) -- the
   end-to-end view, noisy at the millisecond level because torch's own import
   takes a second or more;
2. the entry point itself, timed inside the process: torch imported with
   autoloading off, then ``import torch_npu_patchset_autoload; autoload()``
   under ``perf_counter`` -- the precise number.

    python benchmarks/import_overhead.py [--runs 20] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

IMPORT_TORCH = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
ENTRY_POINT = (
    "import torch, time; t = time.perf_counter(); "
    "import torch_npu_patchset_autoload as a; a.autoload(); "
    "print(time.perf_counter() - t); assert a.ACTIVE and not a.FAILURES, a.FAILURES"
)


def _seconds(code: str, **env_extra) -> float:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NPU_PATCHSET_DISABLE"}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(runs: int) -> dict:
    # Interleaved, so page-cache warm-up and machine drift hit every variant alike.
    armed, disabled, entry = [], [], []
    for _ in range(runs):
        armed.append(_seconds(IMPORT_TORCH))
        disabled.append(_seconds(IMPORT_TORCH, TORCH_NPU_PATCHSET_DISABLE="1"))
        entry.append(_seconds(ENTRY_POINT, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    med = statistics.median
    return {
        "runs": runs,
        "import_torch_ms_armed": med(armed) * 1e3,
        "import_torch_ms_disabled": med(disabled) * 1e3,
        "import_torch_delta_ms": (med(armed) - med(disabled)) * 1e3,
        "entry_point_ms": med(entry) * 1e3,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    result = measure(args.runs)
    print(f"import torch, entry point armed            : {result['import_torch_ms_armed']:8.1f} ms (median of {args.runs})")
    print(f"import torch, TORCH_NPU_PATCHSET_DISABLE=1: {result['import_torch_ms_disabled']:8.1f} ms")
    print(f"difference                                : {result['import_torch_delta_ms']:8.1f} ms")
    print(f"entry point alone (in-process)             : {result['entry_point_ms']:8.2f} ms  (target < 50 ms)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
