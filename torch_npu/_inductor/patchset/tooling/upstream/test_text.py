"""The test file the upstream patch adds: ``test/_inductor/test_npu_launch_resources.py``.

Upstream's style (unittest, as ``test/_inductor/test_flex_attention_dynamic_mask_out.py`` on
v2.7.1): without an NPU it checks the generated C++ (memory taken before the launch lambda, kept
for the thread's next launch on the stream), the sizes and bad metadata; on an NPU it compiles with
``cpp_wrapper`` a small kernel and the seed's reproduction, the dynamic Flex Attention backward
(``flex_attention_steps``: the end-to-end tier runs that same function without an NPU).
``@WRAPPER@`` and ``@HEURISTICS@`` are the branch's launcher and autotuner files.
"""

PATH = "test/_inductor/test_npu_launch_resources.py"


#: The cases users run, as ``flex_attention_steps(**case)`` (its defaults: bf16, Q = KV = 384, head size 64, a causal
#: mask, dynamic shapes), called as users call it (no kernel_options): the NPU test runs each; the end-to-end tier runs
#: each without an NPU (tooling/e2e/matrix.py adds its own modes). Lengths off the 128 grid and below it, a static
#: length, head sizes 16 (the backward's default 16-row blocks equal the head size), 80 (not a power of two), 128.
NPU_CASES: dict[str, dict] = {
    "float32": {"dtype": "float32", "lengths": ((300, 300), (257, 257), (384, 384))},
    "bfloat16": {"lengths": ((256, 256),)},
    "float16": {"dtype": "float16", "lengths": ((256, 256),)},
    "q-ne-kv": {"lengths": ((200, 330),)},
    "off-grid": {"lengths": ((257, 385),)},
    "short": {"lengths": ((100, 72),)},
    "static": {"lengths": ((257, 385),), "dynamic": False},
    "head-16": {"dim": 16, "lengths": ((200, 200),)},
    "head-80": {"dim": 80, "lengths": ((200, 200),)},
    "head-128": {"dim": 128, "lengths": ((200, 200),)},
    "sliding-window": {"mask": "sliding", "lengths": ((300, 300),)},
    "document": {"mask": "document", "lengths": ((300, 300),)},
    "relative-bias": {"score_mod": "relative", "lengths": ((200, 200),)},
    "gqa": {"kv_heads": 2, "lengths": ((200, 200),)},
}


def cases_literal() -> str:
    """NPU_CASES as the test's source says them: packed in lines of at most 120 characters."""
    def literal(value) -> str:
        return repr(value).replace("'", '"')
    rows = [f'"{name}": {{{", ".join(f"{literal(k)}: {literal(v)}" for k, v in case.items())}}}'
            for name, case in NPU_CASES.items()]
    lines, line = [], "NPU_CASES = {"
    for row in rows:
        if len(line) + len(row) + 2 > 120:
            lines.append(line.rstrip())
            line = "    "
        line += row + ", "
    return "\n".join([*lines, line.rstrip(", ") + "}"])[len("NPU_CASES = "):]


def text(wrapper: str, heuristics: str) -> str:
    return TEMPLATE.replace("@WRAPPER@", wrapper).replace("@HEURISTICS@", heuristics).replace(
        "@NPU_CASES@", cases_literal())


TEMPLATE = r'''import importlib.util
import sys
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _module():  # standard library only: loaded by path, without torch_npu (dataclasses want sys.modules)
    path = REPO_ROOT / "torch_npu/_inductor/codegen/npu_launch_resources.py"
    spec = importlib.util.spec_from_file_location("npu_launch_resources_under_test", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NPU_CASES = @NPU_CASES@


def flex_attention_steps(lengths=((384, 384),), dtype="bfloat16", kv_heads=None, mask="causal", score_mod=None,
                         dim=64, dynamic=True):
    """Per (Q, KV) length: (Q, out, dq, dk, dv compiled once with cpp_wrapper, on the NPU; the same from eager)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    def mask_mod(device, n):  # causal; a sliding window of 128; three documents, causal within each
        doc = (torch.arange(n) * 3 // n).to(device)
        return {"causal": lambda b, h, q, kv: q >= kv, "sliding": lambda b, h, q, kv: (q >= kv) & (q - kv <= 128),
                "document": lambda b, h, q, kv: (q >= kv) & (doc[q] == doc[kv])}[mask]
    bias = {"relative": lambda score, b, h, q, kv: score + (kv - q) * 0.01}.get(score_mod)
    compiled = torch.compile(flex_attention, dynamic=dynamic, options={"cpp_wrapper": True})
    for s, n in lengths:  # Q, KV
        shapes = [(2, 4, s, dim), *[(2, kv_heads or 4, n, dim)] * 2, (2, 4, s, dim)]
        tensors, results = [torch.randn(shape).to(getattr(torch, dtype)) for shape in shapes], []
        for device, fn in (("npu", compiled), ("cpu", flex_attention)):
            q, k, v, grad = (t.to(device) if device == "npu" else t.double() for t in tensors)
            block_mask = create_block_mask(mask_mod("cpu", max(s, n)), 2, 4, s, n, device="cpu").to(device)
            block_mask.mask_mod = mask_mod(device, max(s, n))
            out = fn(*(t.requires_grad_() for t in (q, k, v)), bias, block_mask, enable_gqa=kv_heads is not None)
            results.append([out, *torch.autograd.grad(out, (q, k, v), grad)])
        yield s, *results


class TestNpuLaunchResources(unittest.TestCase):
    def _code(self, clamp=None, simt_only=False, **fields):
        m = _module()
        params = dict(fields, **m.kernel_sync_params({"mix_mode": "aiv", **fields}, "triton_k"))
        return ["\n".join(part) for part in m.launch_resource_lines("triton_k", params, clamp, simt_only).__dict__.values()]

    def test_memory_taken_before_the_lambda_and_kept_for_the_threads_next_launch(self):
        before, in_lambda, after = self._code(workspace_size=256, lock_num=16, lock_init_val=7)
        for line in ("npu_sync_locks.legacy_slots = UINT64_C(16);", "npu_sync_locks.init_value = INT64_C(7);",
                     "grid_0, grid_1, grid_2, npu_sync_block_num, UINT64_C(256), npu_sync_locks);"):
            self.assertIn(line, before)
        self.assertEqual(before.count("LaunchMemory npu_sync_memory("), 1)
        self.assertTrue(in_lambda.startswith("aclError npu_sync_status = npu_sync_regions.write_locks("))
        self.assertIn('npu_sync_regions.write_locks("triton_k", stream_);', in_lambda)
        self.assertIn("void* workspace_addr = npu_sync_regions.workspace;", in_lambda)
        self.assertNotIn("npu_sync_memory", in_lambda)  # the lambda copies raw pointers, never the owner
        self.assertTrue(after.startswith("npu_sync_memory.handed();"))  # kept for the next launch on the stream
        self.assertNotIn("allocate_workspace", before + in_lambda)

    def test_packed_locks_clamp_no_fields_simt_only_and_bad_metadata(self):
        before = self._code(48, mix_mode="mix", sync_block_lock_layout=(1 << 32) | 2, auto_tile_and_bind_subblock=True)[0]
        for line in ("npu_sync_locks.ordered = 2u;", "npu_sync_locks.unordered = 1u;",
                     "npu_sync_locks.participant_factor = 2u;", "static_cast<uint32_t>(48));"):
            self.assertIn(line, before)
        plan = _module().plan_from_metadata({"lock_num": 1 << 32}, "triton_k")
        self.assertEqual(plan.lock_slots(4), (1 + 2 * 4) * 8)  # the packed encoding, not 32 GiB
        before, in_lambda, after = self._code()
        self.assertEqual((before, after), ("", ""))
        self.assertIn("void* sync_block_lock = nullptr;", in_lambda)
        self.assertEqual(self._code(simt_only=True, workspace_size=64), ["", "", ""])
        for fields in ({"workspace_size": -1}, {"lock_num": 2.5}, {"lock_init_val": 1, "lock_init_value": 2}):
            with self.assertRaisesRegex(ValueError, r"triton_bad.*(workspace_size|lock_num|lock_init_val)"):
                _module().kernel_sync_params(fields, "triton_bad")

    def test_sources_use_it_and_install_the_helper(self):
        wrapper = (REPO_ROOT / "@WRAPPER@").read_text(encoding="utf-8")
        for text in ("launch_resource_lines(", "launch_resources.before", "launch_resources.after"):
            self.assertIn(text, wrapper)
        self.assertNotIn("void* workspace_addr = NULL;", wrapper)
        self.assertIn("kernel_sync_params(", (REPO_ROOT / "@HEURISTICS@").read_text(encoding="utf-8"))
        self.assertTrue((REPO_ROOT / "torch_npu/csrc/inductor/npu_launch_resources/kept.h").is_file())
        self.assertIn('"torch_npu/csrc/*/*/*.h"', (REPO_ROOT / "setup.py").read_text(encoding="utf-8"))

    def test_dynamic_flex_attention_backward_with_cpp_wrapper(self):
        try:
            import torch
            import torch_npu  # noqa: F401
        except ImportError:
            self.skipTest("needs torch_npu")
        if not torch.npu.is_available():
            self.skipTest("needs an Ascend NPU")
        from torch._dynamo.utils import counters

        for name, case in NPU_CASES.items():  # as the end-to-end tier runs them; one compile serves every length
            counters.clear()
            tol = 2e-2 if case.get("dtype") == "float32" else 5e-2
            with self.subTest(name):
                for _, npu, eager in flex_attention_steps(**case):
                    torch.testing.assert_close([t.cpu().double() for t in npu], eager, rtol=tol, atol=tol)
                self.assertEqual(counters["aot_autograd"]["total"], 1)  # eager flex_attention compiles too, no AOT


if __name__ == "__main__":
    unittest.main()
'''
