"""Helpers for test_flex_attention_grid.py: drive Inductor's template call path
in C++-wrapper mode on CPU, pick the grid C++ out of the emitted call, and
evaluate it with one compiled program.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

CALL_SIZE_NAMES = ("batch", "q_heads", "q_len", "qk_head_dim", "kv_heads", "kv_len")


def torch_release() -> tuple[int, ...]:
    import torch

    return tuple(int(p) for p in re.findall(r"\d+", torch.__version__.split("+")[0])[:3])


def reference_grid(batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, block_m2, block_n1):
    """torch 2.7.1's backward grid, spelled out independently (ceil = -(-a // b))."""
    return (-(-q_len // block_m2) * (q_heads // kv_heads) + -(-kv_len // block_n1), 1, batch * kv_heads)


def split_top_level(args: str) -> list[str]:
    """Split a C++ argument list on commas outside parentheses/brackets."""
    out, depth, cur = [], 0, []
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


class TemplateCallHarness:
    """A real GraphLowering in cpp_wrapper mode with torch's CppWrapperGpu, and
    symbolic call sizes (plus symbolic block sizes) from a real ShapeEnv.

    ``emit(grid_fn, meta)`` builds a ``TritonTemplateKernel`` exactly as
    ``TritonTemplate.generate`` does (``grid_fn=template.grid``, ``meta`` = the
    template kwargs, ``call_sizes`` = the six sizes) and runs its
    ``call_kernel``: the grid goes through ``SymbolicGridFn.sympy_call`` and
    ``CppWrapperGpu.generate_kernel_call`` -> ``prepare_triton_wrapper_args``
    (``cexpr(V.graph.sizevars.simplify(arg))``) into the emitted
    ``call_<kernel>(..., stream0);`` line, from which the three grid arguments
    are returned as C++ strings.
    """

    def __init__(self, hints=(2, 8, 1000, 64, 2, 777), block_hints=(64, 32)):
        import torch
        from torch._dynamo.source import ConstantSource
        from torch._inductor.graph import GraphLowering
        from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

        gm = torch.fx.GraphModule({}, torch.fx.Graph())
        gm.graph.output(())
        # duck_shape=False: equal hints still get distinct symbols.
        self.shape_env = ShapeEnv(duck_shape=False)

        def sym(name, hint):
            return self.shape_env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)

        self.sizes = [sym(n, h) for n, h in zip(CALL_SIZE_NAMES, hints)]
        self.blocks = [sym("BLOCK_M2", block_hints[0]), sym("BLOCK_N1", block_hints[1])]
        self.graph = GraphLowering(gm, shape_env=self.shape_env, cpp_wrapper=True)
        self.device = torch.device("cuda", 0)  # codegen only; nothing runs on it
        self._n = 0
        from torch._inductor.virtualized import V

        with V.set_graph_handler(self.graph):
            self.graph.device_types.add("cuda")
            self.graph.init_wrapper_code()

    @property
    def wrapper(self):
        return self.graph.wrapper_code

    def symbol_names(self) -> list[str]:
        return [str(s) for s in self.sizes + self.blocks]

    def make_kernel(self, grid_fn, meta, call_sizes=None):
        import torch
        from torch._inductor import ir
        from torch._inductor.select_algorithm import TritonTemplateKernel

        self._n += 1
        b, _, _, d, kvh, kvl = self.sizes
        out = ir.Buffer(name="buf_out", layout=ir.FixedLayout(self.device, torch.float32, [b, kvh, kvl, d]))
        kernel = TritonTemplateKernel(
            kernel_name=f"triton_tem_fused_{self._n}",
            input_nodes=[],
            output_node=out,
            defines="",
            num_stages=1,
            num_warps=4,
            grid_fn=grid_fn,
            meta=dict(meta),
            call_sizes=list(self.sizes if call_sizes is None else call_sizes),
        )
        return kernel, f"triton_tem_fused_{self._n}"

    def emit(self, grid_fn, meta, call_sizes=None) -> list[str]:
        """Run call_kernel; return the three grid C++ expressions it emitted."""
        from torch._inductor.virtualized import V

        with V.set_graph_handler(self.graph), self.graph.set_current_device(self.device):
            kernel, name = self.make_kernel(grid_fn, meta, call_sizes)
            before = len(self.wrapper.lines)
            kernel.call_kernel(name)
            lines = [str(line) for line in self.wrapper.lines[before:]]
        prefix = f"call_{name}("
        calls = [line for line in lines if line.startswith(prefix)]
        assert len(calls) == 1, lines
        args = split_top_level(calls[0][len(prefix) : calls[0].rindex(")")])
        assert args[-1] == "stream0", args  # no tensor args: 3 grid values, then the stream
        assert len(args) == 4, args
        return args[:3]

    def benchmark_grid(self, grid_fn, meta) -> list[str]:
        """The int path Inductor takes with size hints (kernel_benchmark_extra_args)."""
        from torch._inductor.virtualized import V

        with V.set_graph_handler(self.graph), self.graph.set_current_device(self.device):
            kernel, _ = self.make_kernel(grid_fn, meta)
            return kernel.kernel_benchmark_extra_args()


def torch_include() -> str:
    import torch

    return os.path.join(os.path.dirname(torch.__file__), "include")


def compile_evaluator(workdir: Path, variants: list[tuple[list[str], list[str]]]) -> Path:
    """One C++ program evaluating every variant.

    ``variants[i] = (parameter names, [g0, g1, g2] C++ expressions)``. The
    program reads lines ``i v1 v2 ...`` (values for variant i's parameters, in
    order) from stdin and prints ``g0 g1 g2`` per line. It includes torch's own
    ``c10/util/generic_math.h`` for ``c10::div_floor_integer``.
    """
    gxx = shutil.which("g++")
    if gxx is None:
        raise FileNotFoundError("g++ not found")
    src = [
        "#include <c10/util/generic_math.h>",
        "#include <cstdint>",
        "#include <iostream>",
        "#include <vector>",
        "",
    ]
    for i, (params, exprs) in enumerate(variants):
        sig = ", ".join(f"int64_t {p}" for p in params)
        src.append(f"static void variant_{i}({sig}, int64_t* g) {{")
        for j, e in enumerate(exprs):
            src.append(f"  g[{j}] = static_cast<int64_t>({e});")
        src.append("}")
    src += [
        "int main() {",
        "  std::ios::sync_with_stdio(false);",
        "  long long v;",
        "  while (std::cin >> v) {",
        "    int64_t g[3] = {0, 0, 0};",
        "    switch (v) {",
    ]
    for i, (params, _) in enumerate(variants):
        reads = " ".join(f"long long a{k}; std::cin >> a{k};" for k in range(len(params)))
        call_args = ", ".join(f"a{k}" for k in range(len(params)))
        src.append(f"      case {i}: {{ {reads} variant_{i}({call_args}, g); break; }}")
    src += [
        '      default: std::cout << "bad variant" << std::endl; return 2;',
        "    }",
        "    std::cout << g[0] << ' ' << g[1] << ' ' << g[2] << std::endl;",
        "  }",
        "  return 0;",
        "}",
    ]
    cpp = workdir / "grid_eval.cpp"
    exe = workdir / "grid_eval"
    cpp.write_text("\n".join(src) + "\n")
    subprocess.run(
        [gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-I", torch_include(), str(cpp), "-o", str(exe)],
        check=True,
        capture_output=True,
        text=True,
    )
    return exe


class Evaluator:
    """The compiled program kept running: one line in, one line out."""

    def __init__(self, exe: Path):
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def __call__(self, variant: int, values) -> tuple[int, int, int]:
        self.proc.stdin.write(" ".join(str(int(v)) for v in (variant, *values)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"evaluator exited with {self.proc.poll()}"
        return tuple(int(x) for x in line.split())

    def many(self, rows) -> list[tuple[int, int, int]]:
        return [self(v, vals) for v, vals in rows]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
