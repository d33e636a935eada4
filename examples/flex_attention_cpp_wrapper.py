#!/usr/bin/env python
"""Flex Attention forward + backward under torch.compile(dynamic=True) with the
C++ wrapper, on NPU (torch_npu) or CUDA, against the Python wrapper and eager.

    python examples/flex_attention_cpp_wrapper.py [--quick] [--force-patch] [--json PATH]

Without a patch, torch 2.7.1 stops in the backward with ``AssertionError:
cpp_wrapper requires SymbolicGridFn``. This script makes sure the backward
template has a SymbolicGridFn grid:

* default: runs the patch set (``flex-attention-backward-symbolic-grid``),
  which installs ours on torch 2.7.1 and leaves a newer torch's own grid alone;
* ``--force-patch``: installs our grid even where torch already ships one (to
  check it on newer torch). It picks the grid layout the installed template's
  kernel expects (torch 2.7.1: ``(x, 1, batch*kv_heads)``; newer:
  ``(x, batch, kv_heads)``) by comparing with torch's own grid on sample sizes,
  and refuses if neither matches. It counts how often Inductor called it.

It then compiles a causal, GQA Flex Attention over several sequence lengths,
compares gradients with eager, and prints recompiles and step times for
cpp_wrapper=True and cpp_wrapper=False. On a machine with neither NPU nor CUDA
it explains that and exits 0.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATCH_ID = "flex-attention-backward-symbolic-grid"
TEMPLATE = "flex_attention_backward_template"


def log(msg: str = "") -> None:
    print(msg, flush=True)


def pick_device():
    import torch

    try:
        import torch_npu  # noqa: F401  (this project alone also provides a torch_npu namespace)

        npu = getattr(torch, "npu", None)  # set only by the real torch_npu
        if npu is not None and npu.is_available():
            return "npu"
    except Exception:
        pass
    if torch.cuda.is_available():
        return "cuda"
    return None


def load_patchset():
    """(flex_grid module, patchset package or None). Falls back to the repo."""
    try:
        from torch_npu._inductor import patchset
        from torch_npu._inductor.patchset import flex_grid

        return flex_grid, patchset
    except ImportError:
        pass
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        from torch_npu._inductor import patchset
        from torch_npu._inductor.patchset import flex_grid

        return flex_grid, patchset
    except ImportError:
        # A real torch_npu package hides the repo's namespace portion: load
        # the pure grid module by path (it imports nothing of ours).
        path = REPO / "torch_npu" / "_inductor" / "patchset" / "flex_grid.py"
        spec = importlib.util.spec_from_file_location("_flex_grid_example", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, None


def resolve_template(flex_grid):
    importlib.import_module("torch._inductor.select_algorithm")  # 2.7.1 needs it first
    tried = []
    for name in flex_grid.TEMPLATE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            tried.append(f"{name} ({exc.__class__.__name__})")
            continue
        if hasattr(module, TEMPLATE):
            return name, getattr(module, TEMPLATE)
        tried.append(f"{name} (no {TEMPLATE})")
    raise SystemExit(f"error: cannot find {TEMPLATE} in this torch; tried: {'; '.join(tried)}")


def install_grid(args, flex_grid, patchset):
    """Returns (info dict, restore callable, counter dict or None)."""
    import torch

    sa = importlib.import_module("torch._inductor.select_algorithm")
    where, template = resolve_template(flex_grid)
    before = template.grid
    info = {"template_module": where, "torch_grid": f"{type(before).__name__} {getattr(getattr(before, 'fn', before), '__qualname__', '?')}"}
    if not args.force_patch:
        if patchset is not None:
            rows = {r.id: r for r in patchset.apply([PATCH_ID])}
            row = rows[PATCH_ID]
            info["patch"] = f"{row.state}: {row.reason}"
        elif not isinstance(before, sa.SymbolicGridFn):
            raise SystemExit("error: torch's grid is not a SymbolicGridFn and the patch set cannot be imported here")
        else:
            info["patch"] = "torch already has a SymbolicGridFn (patch set not importable; nothing to do)"
        if not isinstance(template.grid, sa.SymbolicGridFn):
            raise SystemExit(f"error: {TEMPLATE}.grid is still not a SymbolicGridFn ({info['patch']})")
        return info, (lambda: None), None

    try:
        layout = flex_grid.matching_layout(before)
    except Exception as exc:
        raise SystemExit(f"error: could not evaluate torch's own grid on sample sizes ({type(exc).__name__}: {exc})") from exc
    if layout is None:
        raise SystemExit("error: torch's backward grid matches none of our layouts; refusing to force a grid on it")
    # Compiled-graph caches would skip codegen (and our grid) on a warm machine.
    torch._inductor.config.force_disable_caches = True
    counts = {"sympy_call": 0, "int_call": 0}

    class CountingGrid(sa.SymbolicGridFn):
        def __call__(self, *a, **k):
            counts["int_call"] += 1
            return super().__call__(*a, **k)

        def sympy_call(self, *a, **k):
            counts["sympy_call"] += 1
            return super().sympy_call(*a, **k)

    ours = CountingGrid(flex_grid.GRIDS[layout])
    template.grid = ours
    info["patch"] = f"forced: installed {flex_grid.__name__}.{flex_grid.GRIDS[layout].__name__} (layout {layout!r}) over {info['torch_grid']}"

    def restore():
        template.grid = before

    return info, restore, counts


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _bind_context_hook(device):
    """Grad hook, run on the autograd engine's device thread: a runtime-API call
    there makes the device's primary context current on that thread.

    Seen on an H200 with torch 2.11: the compiled backward's C++ wrapper
    (cpp_wrapper=True) loads/launches kernels through the driver API on the
    autograd device thread, which has no current context, and fails with
    "CUDA driver error: invalid device context" -- with torch's own grid as
    well as ours; the Python wrapper (Triton's launcher) is unaffected.
    """
    import torch

    def hook(grad):
        getattr(torch, device).synchronize()
        return grad

    return hook


def run_mode(cpp_wrapper: bool, lengths, device, steps: int, dims, show_traceback=False, bind_context=True):
    import torch
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    batch, q_heads, kv_heads, head_dim = dims
    torch._dynamo.reset()
    counters.clear()

    def fn(q, k, v, block_mask):
        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)

    compiled = torch.compile(fn, dynamic=True, options={"cpp_wrapper": cpp_wrapper})
    rows = []
    for L in lengths:
        gen = torch.Generator(device="cpu").manual_seed(L)
        shapes = [(batch, q_heads, L, head_dim), (batch, kv_heads, L, head_dim), (batch, kv_heads, L, head_dim)]
        base = [torch.randn(s, generator=gen, dtype=torch.float32).to(device) for s in shapes]
        grad_out = torch.randn(shapes[0], generator=gen, dtype=torch.float32).to(device)
        mask = create_block_mask(causal, None, None, L, L, device=device)

        def step(f):  # called within this iteration only: the loop variables are current
            leaves = [t.detach().clone().requires_grad_(True) for t in base]  # noqa: B023
            out = f(*leaves, mask)  # noqa: B023
            if bind_context and device == "cuda":
                out.register_hook(_bind_context_hook(device))
            out.backward(grad_out)  # noqa: B023
            return out, [t.grad for t in leaves]

        row = {"seq_len": L}
        try:
            sync = getattr(torch, device).synchronize
            t0 = time.perf_counter()
            out, grads = step(compiled)
            sync()
            row["first_call_s"] = round(time.perf_counter() - t0, 3)
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                step(compiled)
                sync()
                times.append(time.perf_counter() - t0)
            row["step_ms"] = round(1000 * statistics.median(times), 3)
            ref_out, ref_grads = step(fn)  # eager reference
            row["max_abs_err_out"] = float((out.detach() - ref_out.detach()).abs().max())
            row["max_abs_err_grad"] = max(float((g - r).abs().max()) for g, r in zip(grads, ref_grads))
            row["ok"] = True
        except Exception as exc:  # report and keep going
            if show_traceback:
                import traceback

                traceback.print_exc()
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
        rows.append(row)
        log(f"  cpp_wrapper={cpp_wrapper!s:<5} L={L:<5} " + ", ".join(f"{k}={v}" for k, v in row.items() if k != "seq_len"))
    frames = dict(counters["frames"])
    stats = dict(counters["stats"])
    summary = {
        "cpp_wrapper": cpp_wrapper,
        "rows": rows,
        "dynamo_frames_ok": frames.get("ok", 0),
        "dynamo_frames_total": frames.get("total", 0),
        "unique_graphs": stats.get("unique_graphs", 0),
        "recompiles": max(0, frames.get("ok", 0) - 1),
    }
    log(f"  cpp_wrapper={cpp_wrapper}: dynamo compiles={summary['dynamo_frames_ok']} (recompiles={summary['recompiles']}), unique graphs={summary['unique_graphs']}")
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sequence lengths and steps")
    parser.add_argument("--force-patch", action="store_true", help="install our grid even if torch already has a SymbolicGridFn")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], help="comma-separated sequence lengths")
    parser.add_argument("--traceback", action="store_true", help="print the full traceback of a failing step")
    parser.add_argument(
        "--no-context-workaround",
        action="store_true",
        help="do not make the CUDA context current on the autograd thread (shows torch's cpp_wrapper backward failure)",
    )
    parser.add_argument("--tol", type=float, default=2e-2, help="max abs gradient error accepted (float32; TF32 may be used)")
    args = parser.parse_args(argv)

    import torch

    result = {"torch": torch.__version__, "args": vars(args)}
    device = pick_device()
    if device is None:
        log(
            "no CUDA or NPU device found: this example compiles Flex Attention's Triton kernels with the "
            "C++ wrapper, which needs an NPU (torch_npu + triton-ascend) or a CUDA GPU. Nothing to do on "
            "CPU; the CPU-side checks of the grid are in test/test_flex_attention_grid.py."
        )
        result["status"] = "skipped: no CUDA or NPU device"
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0
    result["device"] = f"{device}: " + (torch.cuda.get_device_name() if device == "cuda" else str(torch.npu.get_device_name()))
    flex_grid, patchset = load_patchset()
    info, restore, counts = install_grid(args, flex_grid, patchset)
    result.update(info)
    log(f"torch {torch.__version__} on {result['device']}")
    for k, v in info.items():
        log(f"  {k}: {v}")

    lengths = args.lengths or ([128, 256, 384, 512] if args.quick else [128, 256, 384, 512, 768, 1024, 2048])
    steps = 3 if args.quick else 10
    dims = (2, 8, 2, 64)  # batch, q_heads, kv_heads (GQA ratio 4), head_dim
    result["dims"] = dict(zip(("batch", "q_heads", "kv_heads", "head_dim"), dims))
    modes = []
    try:
        for cpp_wrapper in (True, False):
            log(f"mode cpp_wrapper={cpp_wrapper}")
            modes.append(run_mode(cpp_wrapper, lengths, device, steps, dims, args.traceback, not args.no_context_workaround))
    finally:
        if counts is not None:
            result["forced_grid_calls"] = dict(counts)
        restore()
    result["modes"] = modes

    ok = all(r["ok"] and r["max_abs_err_grad"] <= args.tol for m in modes for r in m["rows"])
    if counts is not None and counts["sympy_call"] + counts["int_call"] == 0:
        ok = False
        log("error: the forced grid was never called")
    cpp, py = modes[0], modes[1]
    log("")
    log(f"{'L':>6} {'cpp step ms':>12} {'py step ms':>11} {'cpp grad err':>13} {'py grad err':>12}")
    for a, b in zip(cpp["rows"], py["rows"]):
        log(
            f"{a['seq_len']:>6} {a.get('step_ms', 'FAIL')!s:>12} {b.get('step_ms', 'FAIL')!s:>11} "
            f"{a.get('max_abs_err_grad', float('nan')):>13.3g} {b.get('max_abs_err_grad', float('nan')):>12.3g}"
        )
    log(f"recompiles: cpp_wrapper={cpp['recompiles']} python={py['recompiles']}")
    if counts is not None:
        log(f"forced grid calls: {counts}")
    result["status"] = "ok" if ok else "failed"
    log(f"status: {result['status']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
