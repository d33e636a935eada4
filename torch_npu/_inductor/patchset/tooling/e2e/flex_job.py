"""The user's job, one case of the matrix (run as a script by tier.py, over the host ACL library): Flex Attention
compiled with ``dynamic=True`` and ``cpp_wrapper=True`` on ``npu`` tensors, forward and backward.

argv[1]: a JSON spec {"out", "case", "tolerance", "batch", "heads", "dim", "one_pass", "stand_ins", "upstream_test",
"executor", "manifest"}; "case" is one of matrix.CASES with matrix.DEFAULTS filled in. Its mode says what runs:
"steps", the upstream patch's test function ``flex_attention_steps(**case)`` (each length's forward and backward);
"graph", that job captured into a torch.npu.NPUGraph and replayed (run_graph); "train", a tiny attention model
trained a few optimizer steps (run_training). With "executor" (executor.py) the compiled kernels run and each
result (output, dq, dk, dv; a training step's loss) is compared with eager in float64 on the CPU, within
spec["tolerance"]. Writes the verdict to spec["out"] as it goes: the stand-ins installed, each length's forward and
backward ("ok" or the error's one line) and errors, the template choices whose compile failed (with the compiler's
error lines), the frames Dynamo compiled, and the host ACL library's report.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import sys
import traceback

SPEC = json.loads(open(sys.argv[1]).read())
RESULT: dict = {"runs": [], "done": False}


def save() -> None:
    with open(SPEC["out"] + ".tmp", "w") as f:
        json.dump(RESULT, f)
    os.replace(SPEC["out"] + ".tmp", SPEC["out"])


def one_line(exc: BaseException) -> str:
    """The line that says what went wrong: an assertion's own text where the chain has one."""
    text = "".join(traceback.format_exception_only(type(exc), exc))
    for line in text.splitlines():
        if "AssertionError" in line or "Error:" in line:
            return line.strip()[:600]
    return text.strip().splitlines()[0][:600]


def record_choice_failures() -> None:
    """Observation only: a template choice whose compile fails is recorded (its name, the error's one line,
    each ``error:`` line of the compiler's message with the source line after it), then raised as before.
    Inductor logs these only at debug level; they say why a lowering found no compilable choice."""
    from torch._inductor import select_algorithm

    original = select_algorithm.TritonTemplateCaller.precompile

    def precompile(self):
        try:
            return original(self)
        except Exception as exc:
            lines = str(exc).splitlines()
            errors = dict.fromkeys(re.sub(r"/\S*/", "", " | ".join(x.strip() for x in lines[i:i + 2]))
                                   for i, x in enumerate(lines) if " error: " in x)  # once each, file names only
            RESULT.setdefault("choice_errors", []).append(
                {"choice": str(getattr(self, "name", self)), "error": one_line(exc), "compiler_errors": [*errors][:3]})
            raise

    select_algorithm.TritonTemplateCaller.precompile = precompile


NAMES = ("out", "dq", "dk", "dv")


def compare(compiled: list, eager: list, names=NAMES, tolerance: float | None = None, floor: float = 1.0) -> dict:
    """Each result's largest absolute error against eager (float64, on the CPU), its largest relative error where the
    reference is at least 1e-3 (0 where it never is), and whether the largest error is within the case's tolerance
    (spec["tolerance"] unless given) of its scale: the reference's largest magnitude, at least ``floor``."""
    import torch

    tolerance = SPEC["tolerance"] if tolerance is None else tolerance
    out = {}
    for name, got, want in zip(names, compiled, eager):
        got, want = got.detach().cpu().double(), want.detach().cpu().double()
        diff = (got - want).abs()
        near = want.abs() >= 1e-3  # relative error where the reference is not next to zero
        largest, finite = want.abs().max().item(), bool(torch.isfinite(got).all())
        scale = max(floor, largest)
        out[name] = {"max_abs": diff.max().item(), "max_ref": largest, "scale": scale, "finite": finite,
                     "max_rel": (diff[near] / want.abs()[near]).max().item() if near.any() else 0.0,
                     "close": finite and diff.max().item() <= tolerance * scale}
    return out


def failed_step(exc: BaseException, path: str) -> str:
    """Which step of the upstream test's function an exception came from: its innermost frame in that file is the
    backward's line (``torch.autograd.grad``) or an earlier one (the forward)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return "backward" if frames and "autograd.grad" in (frames[-1].line or "") else "forward"


def lengths(case: dict) -> list[tuple[int, int]]:
    return [tuple(x) for x in case["lengths"]]


def record_error(exc: BaseException, forward_ran: bool) -> None:
    done = len(RESULT["runs"])
    s, n = lengths(SPEC["case"])[min(done, len(lengths(SPEC["case"])) - 1)]
    run = {"seq_len": s, "kv_len": n, **({"forward": "ok"} if forward_ran else {}), "error": one_line(exc),
           "traceback_tail": traceback.format_exc()[-3000:]}
    RESULT["runs"].append(run)


def run_steps(upstream_test, executing: bool) -> None:
    """The upstream test's function: each length's forward and backward, and, where the kernels ran, the output and the
    gradients against eager."""
    case = SPEC["case"]
    args = {k: v for k, v in case.items() if k not in ("mode", "steps")}
    args["lengths"] = lengths(case)
    try:
        for (s, n), (_, npu, eager) in zip(lengths(case), upstream_test.flex_attention_steps(**args)):
            run = {"seq_len": s, "kv_len": n, "forward": "ok", "backward": "ok", "shapes": [list(t.shape) for t in npu]}
            if executing:  # copied back and compared only where the kernels ran
                run["errors"] = compare(npu, eager)
            RESULT["runs"].append(run)
            save()
    except Exception as exc:  # the verdict records it; the next length would say the same
        record_error(exc, failed_step(exc, SPEC["upstream_test"]) == "backward")


def _block_mask(torch, s: int):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q, kv: q >= kv, SPEC["batch"], SPEC["heads"], s, s, device="cpu").to("npu")


def run_graph(executing: bool) -> None:
    """The job's compiled forward and backward captured into one torch.npu.NPUGraph (after a warm-up call that
    compiles), then, twice: new inputs copied into the captured ones, eager work that takes and gives back device
    memory (torch.npu.empty_cache, new tensors filled), a replay, and its output and gradients against eager."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    case = SPEC["case"]
    s, dtype = case["lengths"][0][0], getattr(torch, case["dtype"])
    ref_mask = create_block_mask(lambda b, h, i, j: i >= j, SPEC["batch"], SPEC["heads"], s, s, device="cpu")
    shape = (SPEC["batch"], SPEC["heads"], s, SPEC["dim"])
    compiled = torch.compile(flex_attention, dynamic=True, options={"cpp_wrapper": True})
    mask = _block_mask(torch, s)
    q, k, v, grad = (torch.randn(shape).to(dtype).to("npu") for _ in range(4))

    def step():
        out = compiled(*(t.requires_grad_() for t in (q, k, v)), block_mask=mask)
        return [out, *torch.autograd.grad(out, (q, k, v), grad)]

    graph = {"phase": "warm-up"}
    RESULT["graph"] = graph
    try:
        step()
        torch.npu.synchronize()
        graph["phase"] = "capture"
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g):
            static = step()
        graph["captured_tasks"] = host_report()["counters"]["captured_tasks"]
        graph["pool"] = list(g.pool()) if isinstance(g.pool(), tuple) else g.pool()
        graph["replays"] = []
        for round_ in range(2):
            graph["phase"] = f"replay {round_ + 1}"
            fresh = [torch.randn(shape).to(dtype) for _ in range(4)]
            for dst, src in zip((q, k, v, grad), fresh):
                dst.detach().copy_(src)  # into the captured inputs
            torch.npu.empty_cache()  # the graph's memory stays its own; eager memory is taken and given back
            filler = [torch.full((1 << 18,), float(round_ + 7), device="npu") for _ in range(4)]
            del filler
            g.replay()
            torch.npu.synchronize()
            ref_q, ref_k, ref_v, ref_grad = (t.double().requires_grad_() for t in fresh)
            ref_out = flex_attention(ref_q, ref_k, ref_v, block_mask=ref_mask)
            eager = [ref_out, *torch.autograd.grad(ref_out, (ref_q, ref_k, ref_v), ref_grad.detach())]
            graph["replays"].append({"errors": compare(static, eager) if executing else None})
            save()
        graph["phase"] = "done"
        RESULT["runs"].append({"seq_len": s, "kv_len": s, "forward": "ok", "backward": "ok",
                               "errors": graph["replays"][-1]["errors"]})
    except Exception as exc:
        graph["error"] = one_line(exc)
        record_error(exc, graph["phase"] != "warm-up")


def run_training(executing: bool) -> None:
    """A tiny attention model as users write one (nn.Linear projections of q, k, v and the output, without bias,
    around Flex Attention) trained case["steps"] SGD steps on the NPU, its forward and backward and its optimizer step
    each compiled once (dynamic, cpp_wrapper), against the same model trained eagerly in float64 on the CPU: each
    step's loss (the mean squared error to a target), compiled with the model as users write it."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    case = SPEC["case"]
    s, dtype = case["lengths"][0][0], getattr(torch, case["dtype"])
    B, H, D = SPEC["batch"], SPEC["heads"], SPEC["dim"]

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.q, self.k, self.v, self.o = (torch.nn.Linear(D, D, bias=False) for _ in range(4))

        def forward(self, x, block_mask):
            return self.o(flex_attention(self.q(x), self.k(x), self.v(x), block_mask=block_mask))

    def mean_loss(model, x, target, block_mask):
        return ((model(x, block_mask).to(target.dtype) - target) ** 2).mean()

    x, target = torch.randn(B, H, s, D).to(dtype), torch.randn(B, H, s, D)
    models = {"npu": Tiny().to(dtype).to("npu"), "cpu": Tiny().to(dtype).double()}  # the same 16-bit weights
    opts = {d: torch.optim.SGD(m.parameters(), lr=0.5, foreach=False) for d, m in models.items()}
    forward_npu = torch.compile(mean_loss, dynamic=True, options={"cpp_wrapper": True})
    step_npu = torch.compile(opts["npu"].step, dynamic=True, options={"cpp_wrapper": True})
    mask = {"npu": _block_mask(torch, s), "cpu": create_block_mask(lambda b, h, i, j: i >= j, B, H, s, s, device="cpu")}
    xs = {"npu": x.to("npu"), "cpu": x.double()}
    ts = {"npu": target.to("npu"), "cpu": target.double()}
    train = {"steps": []}
    RESULT["training"] = train
    phase = "forward"
    try:
        for i in range(case["steps"]):
            phase = "forward"
            out = forward_npu(models["npu"], xs["npu"], ts["npu"], mask["npu"])
            phase = "backward"
            out.backward()
            loss = out.detach().cpu().double()
            step_npu()
            opts["npu"].zero_grad(set_to_none=True)
            ref = mean_loss(models["cpu"], xs["cpu"], ts["cpu"], mask["cpu"])
            ref.backward()
            opts["cpu"].step()
            opts["cpu"].zero_grad(set_to_none=True)
            train["steps"].append({"step": i + 1, "loss": loss.item(), "eager": ref.item(),
                                   "errors": compare([loss], [ref], ("loss",)) if executing else None})
            save()
        RESULT["runs"].append({"seq_len": s, "kv_len": s, "forward": "ok", "backward": "ok",
                               "errors": {f"loss {x['step']}": x["errors"]["loss"] for x in train["steps"]}
                               if executing else None})
    except Exception as exc:
        train["error"] = one_line(exc)
        record_error(exc, phase == "backward")


def run_upstream(executing: bool) -> None:
    """torch_npu's own test of the dynamic Flex Attention backward (test/_inductor/test_flex_attention_dynamic_mask_out.py,
    ``test_backward_recompiles_for_shape_specific_block_mask_metadata``, branch v2.7.1), its job as written there:
    ``flex_attention(q, k, v, block_mask=...).float().square().mean()`` compiled with ``dynamic=True`` and
    ``fullgraph=True`` (and ``cpp_wrapper``), called with bf16 inputs of batch 5, two heads, head size 64, Q 257 and
    KV 385, then batch 6, Q 129 and KV 257, a causal block mask made for each call; the loss and the gradients of q, k
    and v. Against eager in float64 on the CPU (that test's reference is a dense softmax on the NPU), within its
    tolerances: 2e-2 on the loss, 8e-2 on the gradients (spec["tolerance"]). The block mask is made on the CPU and
    moved (``create_block_mask`` on ``npu`` runs eager operators the host ACL library does not implement)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def loss_of(q, k, v, block_mask):
        return flex_attention(q, k, v, block_mask=block_mask).float().square().mean()

    compiled = torch.compile(loss_of, dynamic=True, fullgraph=True, options={"cpp_wrapper": True})
    phase = "forward"
    try:
        for batch, q_len, kv_len in ((5, 257, 385), (6, 129, 257)):
            phase = "forward"
            inputs = [torch.randn(batch, 2, n, 64).to(torch.bfloat16) for n in (q_len, kv_len, kv_len)]
            mask = create_block_mask(lambda b, h, q, kv: q >= kv, B=batch, H=2, Q_LEN=q_len, KV_LEN=kv_len,
                                     device="cpu")
            npu = [t.to("npu").requires_grad_() for t in inputs]
            loss = compiled(*npu, mask.to("npu"))
            phase = "backward"
            grads = torch.autograd.grad(loss, npu)
            ref = [t.double().requires_grad_() for t in inputs]
            ref_loss = flex_attention(*ref, block_mask=mask).square().mean()  # float64 throughout
            ref_grads = torch.autograd.grad(ref_loss, ref)
            run = {"seq_len": q_len, "kv_len": kv_len, "batch": batch, "forward": "ok", "backward": "ok",
                   "shapes": [list(t.shape) for t in grads]}
            if executing:  # relative to the reference's own magnitude: the mean makes the gradients ~1e-5, where an
                # absolute 8e-2 (that test's atol) would hold of any result
                run["errors"] = {**compare([loss], [ref_loss], ("loss",), tolerance=2e-2, floor=0.0),
                                 **compare(grads, ref_grads, ("dq", "dk", "dv"), floor=0.0)}
            RESULT["runs"].append(run)
            save()
    except Exception as exc:
        done = len(RESULT["runs"])
        batch, q_len, kv_len = ((5, 257, 385), (6, 129, 257))[min(done, 1)]
        RESULT["runs"].append({"seq_len": q_len, "kv_len": kv_len, "batch": batch,
                               **({"forward": "ok"} if phase == "backward" else {}), "error": one_line(exc),
                               "traceback_tail": traceback.format_exc()[-3000:]})


def host_report() -> dict:
    lib = ctypes.CDLL(os.environ["ACL_HOST_LIBRARY"])
    lib.acl_host_report_json.restype = ctypes.c_char_p
    return json.loads(lib.acl_host_report_json().decode())


def main() -> None:
    import torch

    import torch_npu

    spec = importlib.util.spec_from_file_location("e2e_runtime_stand_ins", SPEC["stand_ins"])
    stand_ins = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stand_ins)
    executing = bool(SPEC.get("executor"))
    RESULT.update(torch=torch.__version__, torch_npu=torch_npu.__version__, stand_ins=stand_ins.install(executing),
                  patchset_applied=any(m.startswith("torch_npu._inductor.patchset") for m in sys.modules))
    import torch._inductor.config as inductor_config
    import triton
    from torch._dynamo.utils import counters

    RESULT["triton"] = triton.__version__
    record_choice_failures()
    if SPEC["one_pass"] is not None:  # None: torch's default (one pass where triton is there, as here)
        inductor_config.triton.autotune_at_compile_time = SPEC["one_pass"]
    # The upstream patch's own test body (test/_inductor/test_npu_launch_resources.py), rendered by tier.py.
    spec = importlib.util.spec_from_file_location("upstream_launch_resources_test", SPEC["upstream_test"])
    upstream_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(upstream_test)
    mode = SPEC["case"].get("mode", "steps")
    RESULT["job"] = f"{upstream_test.__name__}.flex_attention_steps" if mode == "steps" else f"flex_job.run_{mode}"
    lib = ctypes.CDLL(os.environ["ACL_HOST_LIBRARY"])
    if executing:  # the kernels run in a process of its own (executor.py says why)
        spec = importlib.util.spec_from_file_location("e2e_executor", SPEC["executor"])
        executor = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(executor)
        executor.attach(lib, SPEC["manifest"])
    save()
    torch.manual_seed(0)
    {"steps": lambda: run_steps(upstream_test, executing), "graph": lambda: run_graph(executing),
     "train": lambda: run_training(executing), "upstream": lambda: run_upstream(executing)}[mode]()
    save()
    RESULT["frames"] = dict(counters["frames"])
    RESULT["unique_graphs"] = counters["stats"]["unique_graphs"]
    # Inductor's compiles (through AOTAutograd): eager flex_attention, the reference, compiles with the eager backend
    RESULT["compiles"] = counters["aot_autograd"]["total"]
    # The last launches (the training step's update) may still be on the stream: a launch's probe record is done
    # when its last block has run, so the report waits for the device, as a user's job does before it reads.
    torch.npu.synchronize()
    RESULT["host"] = host_report()
    RESULT["done"] = True
    save()


if __name__ == "__main__":
    main()
    os._exit(0)  # the verdict is written; torch_npu's own shutdown is not what this job judges
