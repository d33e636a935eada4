"""The child of test_npu_dual_reduction_accumulator.py: torch_npu 2.7.1.post10 imported over the host ACL library in
the end-to-end tier's environment (tooling/e2e/stand_ins.child_env), the patch set armed by its autoload (or off,
as the parent's environment says).

argv[1]: JSON {"stand_ins", "exact", "out", "shape", "dynamic"}. Compiles ``x.sum(dim=(0, 2))`` with post10's own Inductor
(a reduction over two tiled axes), calls it once (its launches go to the host ACL library; nothing of them is
judged here), then runs each two-axis reduction kernel the compile produced with EVERY config post10's autotuner
was given, in Triton's interpreter on CPU copies of the launch's own arguments, and compares each output with
torch's sum. The values are small integers, so every order of addition gives the same float32 sum: a config is
right or wrong, with no tolerance. Writes one JSON object to spec["out"].
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

SPEC = json.loads(sys.argv[1])
OUT: dict = {"kernels": {}}


def save() -> None:
    with open(SPEC["out"], "w") as f:
        json.dump(OUT, f, default=str)


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def interpreted(source: str):
    """The kernel function of a module torch_npu generated, under Triton's interpreter: its imports, then its
    ``@triton.jit`` function (without the autotuning decorator)."""
    head, _, rest = source.partition("\n@triton_heuristics.")
    jit = rest[rest.index("@triton.jit"):]
    scope: dict = {}
    exec(compile(head + "\n" + jit, "<kernel>", "exec"), scope)
    name = jit.split("def ", 1)[1].split("(", 1)[0]
    return scope[name]


def main() -> None:
    import torch

    import torch_npu  # noqa: F401

    stand_ins = load(SPEC["stand_ins"], "e2e_runtime_stand_ins")
    OUT["stand_ins"] = stand_ins.install(False)
    from torch_npu._inductor.runtime import triton_heuristics

    from torch_npu._inductor import patchset

    launches = []  # (autotuner, the launch's arguments on the CPU)
    run = triton_heuristics.NPUCachingAutotuner.run

    def record(self, *args, **kwargs):
        if self.inductor_meta.get("dual_reduction"):
            launches.append((self, [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]))
        return run(self, *args, **kwargs)

    triton_heuristics.NPUCachingAutotuner.run = record
    shape = SPEC["shape"]
    x = torch.randint(0, 8, shape, dtype=torch.float32)
    compiled = torch.compile(lambda t: t.sum(dim=(0, 2)), dynamic=SPEC["dynamic"])
    compiled(x.to("npu"))
    OUT["status"] = {r.id: [r.state, r.reason] for r in patchset.status()}
    work = Path(SPEC["out"]).parent
    for k, (tuner, args) in enumerate(launches):
        saved = work / f"launch{k}.pt"
        torch.save({"args": args, "expected": x.sum(dim=(0, 2)), "source": Path(tuner.filename).read_text(),
                    "configs": [dict(c.kwargs) for c in tuner.configs]}, saved)
        OUT["kernels"][tuner.inductor_meta["kernel_name"]] = {"source": Path(tuner.filename).read_text(),
                                                              "saved": str(saved)}
    save()
    # Triton's interpreter takes over triton.jit only in a process that starts with TRITON_INTERPRET=1 (the
    # helpers the kernels call were decorated at import): the runs are a process of their own.
    for kernel in OUT["kernels"].values():
        proc = subprocess.run([sys.executable, __file__, sys.argv[1], "interpret", kernel["saved"]],
                              env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True)
        try:
            kernel.update(json.loads(proc.stdout.splitlines()[-1]))
        except (IndexError, ValueError):
            kernel["error"] = proc.stderr[-3000:]


def interpret(saved: str) -> None:
    """Every config of one recorded launch, in Triton's interpreter: prints {"numels", "results"}."""
    import torch
    from triton.runtime import interpreter

    load(SPEC["stand_ins"], "e2e_runtime_stand_ins").install_version_shims()  # names post10's kernels import
    exact = load(SPEC["exact"], "e2e_exact")
    exact.install(interpreter)
    exact.guard(interpreter.interpreter_builder)
    patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor):  # NumPy 2 and one-element arrays, as the executor does
        patch(tensor)
        tensor.__index__ = lambda t: int(t.handle.data.reshape(-1)[0])

    interpreter._patch_lang_tensor = patch_lang_tensor
    def run(fn, args: dict, programs: int) -> None:  # as the executor runs a launch: every program in turn
        constexpr = {k for k, v in fn.fn.__annotations__.items() if "constexpr" in str(v)}
        args = {k: v if k in constexpr else interpreter._implicit_cvt(v) for k, v in args.items()}
        interpreter._patch_lang(fn.fn)
        body = fn.rewrite()
        interpreter.interpreter_builder.set_grid_dim(programs, 1, 1)
        for x in range(programs):
            interpreter.interpreter_builder.set_grid_idx(x, 0, 0)
            body(**args)

    launch = torch.load(saved)
    args, expected = launch["args"], launch["expected"].reshape(-1)
    fn = interpreted(launch["source"])
    names = fn.arg_names
    numel = dict(zip(names, args))
    results = []
    for config in launch["configs"]:
        call = [a.clone().zero_() if n.startswith("out_ptr") else (a.clone() if isinstance(a, torch.Tensor) else a)
                for n, a in zip(names, args)]
        kw = {k: v for k, v in config.items() if k in names}
        run(fn, {**dict(zip(names, call)), **kw}, math.ceil(numel["x0_numel"] / kw["X0BLOCK"]))
        out = call[names.index("out_ptr0")].reshape(-1)
        results.append({"config": kw, "wrong": int((out != expected).sum()),
                        "largest_error": float((out - expected).abs().max())})
    print(json.dumps({"numels": {n: v for n, v in numel.items() if n.endswith("_numel")}, "results": results}))


if __name__ == "__main__":
    if sys.argv[2:3] == ["interpret"]:
        interpret(sys.argv[3])
        os._exit(0)
    try:
        main()
    except Exception as exc:  # noqa: BLE001  (the parent reports it)
        import traceback

        OUT["error"] = f"{type(exc).__name__}: {exc}"
        OUT["traceback"] = traceback.format_exc()[-3000:]
    save()
    os._exit(0)  # the result is written; torch_npu's own shutdown is not what this judges
