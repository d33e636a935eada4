"""The test file the upstream patch adds: ``test/_inductor/test_npu_launch_resources.py``.

Upstream's style (unittest, as ``test/_inductor/test_flex_attention_dynamic_mask_out.py`` on
v2.7.1): it checks the generated C++, the sizes and the lock content without an NPU, and runs a
``cpp_wrapper`` compile on one when present. ``@WRAPPER@`` and ``@HEURISTICS@`` are the branch's
launcher and autotuner files.
"""

PATH = "test/_inductor/test_npu_launch_resources.py"


def text(wrapper: str, heuristics: str) -> str:
    return TEMPLATE.replace("@WRAPPER@", wrapper).replace("@HEURISTICS@", heuristics)


TEMPLATE = r'''import importlib.util
import unittest
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = REPO_ROOT / "torch_npu/_inductor/codegen/npu_launch_resources.py"
WRAPPER_PATH = REPO_ROOT / "@WRAPPER@"
HEURISTICS_PATH = REPO_ROOT / "@HEURISTICS@"
HEADER_DIR = REPO_ROOT / "torch_npu/csrc/inductor"


def _load_module():
    # The module imports only the standard library: load it by path, without torch_npu.
    spec = importlib.util.spec_from_file_location("npu_launch_resources_under_test", MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    import torch
    import torch_npu

    HAS_NPU = hasattr(torch, "npu") and torch.npu.is_available()
except (ImportError, RuntimeError):
    HAS_NPU = False


def _meta(**fields):
    base = {"name": "triton_k", "mix_mode": "aiv", "parallel_mode": "simd", "force_simt_only": False}
    base.update(fields)
    return base


class TestNpuLaunchResourceLines(unittest.TestCase):
    """The C++ each kind of kernel gets, and the sizes and lock content it asks for."""

    def setUp(self):
        self.m = _load_module()

    def _lines(self, clamp=None, **fields):
        params = _meta(**fields)
        params.update(self.m.kernel_sync_params(params, "triton_k"))
        return "\n".join(self.m.launch_resource_lines("triton_k", params, clamp))

    def test_kernel_without_sync_fields_gets_null_pointers_and_no_request(self):
        text = self._lines()
        self.assertNotIn("acquire_launch_resources", text)
        self.assertIn("void* sync_block_lock = nullptr;", text)
        self.assertIn("void* workspace_addr = nullptr;", text)

    def test_workspace_and_legacy_locks_make_one_request(self):
        text = self._lines(workspace_size=256, lock_num=16, lock_init_val=7)
        self.assertEqual(text.count("acquire_launch_resources("), 1)
        self.assertNotIn("allocate_workspace", text)
        self.assertNotIn("aclrtMemcpy(", text)
        self.assertIn("locks.legacy_slots = UINT64_C(16);", text)
        self.assertIn("locks.init_value = INT64_C(7);", text)
        self.assertIn('"triton_k", stream_, grid_0, grid_1, grid_2,', text)
        self.assertIn("UINT64_C(256)", text)
        self.assertIn("return npu_sync_status;", text)

    def test_packed_layout_and_block_clamp(self):
        text = self._lines(clamp=48, mix_mode="mix", sync_block_lock_layout=(1 << 32) | 2,
                           auto_tile_and_bind_subblock=True)
        self.assertIn("locks.ordered = 2u;", text)
        self.assertIn("locks.unordered = 1u;", text)
        self.assertIn("locks.participant_factor = 2u;", text)
        self.assertIn("std::min(npu_sync_block_num, static_cast<uint32_t>(48))", text)

    def test_lock_num_of_2_pow_32_is_the_packed_encoding_not_32_gib(self):
        plan = self.m.plan_from_metadata(_meta(lock_num=1 << 32), "triton_k")
        self.assertEqual((plan.ordered_locks, plan.unordered_locks), (0, 1))
        self.assertEqual(plan.lock_bytes(4), (1 + 2 * 4) * 8 * 8)

    def test_sizes_and_lock_content(self):
        plan = self.m.plan_from_metadata(_meta(workspace_size=256, lock_num=16, lock_init_val=7), "triton_k")
        self.assertEqual(plan.workspace_bytes((8, 2, 1)), 256 * 16)
        self.assertEqual(plan.lock_content(16), [7] * 16)
        packed = self.m.plan_from_metadata(_meta(sync_block_lock_layout=(1 << 32) | 1, lock_init_val=5), "k")
        content = packed.lock_content(3)
        self.assertEqual(len(content), 8 + (1 + 2 * 3) * 8)
        self.assertEqual(content[8], 3)  # slot 0 of the unordered lock holds the participant count
        self.assertEqual(sum(1 for v in content if v), 1)

    def test_bad_metadata_names_the_kernel_and_the_field(self):
        for fields in ({"workspace_size": -1}, {"lock_num": 2.5}, {"lock_num": True},
                       {"lock_init_val": 1, "lock_init_value": 2}):
            with self.assertRaisesRegex(ValueError, r"triton_bad.*(workspace_size|lock_num|lock_init_val)"):
                self.m.kernel_sync_params(_meta(**fields), "triton_bad")


class TestNpuLaunchResourceSources(unittest.TestCase):
    """The launcher code and the autotuner use the generator; the helper is installed."""

    def test_launcher_declares_resources_instead_of_null(self):
        text = WRAPPER_PATH.read_text(encoding="utf-8")
        self.assertIn("launch_resource_lines(", text)
        self.assertIn("launch_resources_include(", text)
        self.assertNotIn("void* workspace_addr = NULL;", text)
        self.assertNotIn("void* sync_block_lock = NULL;", text)

    def test_autotuner_records_sync_fields(self):
        self.assertIn("kernel_sync_params(input_launcher.bin.metadata, key)", HEURISTICS_PATH.read_text(encoding="utf-8"))

    def test_helper_headers_are_installed(self):
        self.assertTrue((HEADER_DIR / "npu_launch_resources.h").is_file())
        self.assertTrue(list((HEADER_DIR / "npu_launch_resources").glob("*.h")))
        setup = (REPO_ROOT / "setup.py").read_text(encoding="utf-8")
        self.assertIn('"torch_npu/csrc/*/*.h"', setup)
        self.assertIn('"torch_npu/csrc/*/*/*.h"', setup)

    def test_include_names_no_absolute_path(self):
        text = _load_module().launch_resources_include()
        self.assertIn("#include <torch_npu/csrc/inductor/npu_launch_resources.h>", text)
        self.assertNotIn('"/', text)


@unittest.skipIf(not HAS_NPU, "needs an Ascend NPU")
class TestNpuLaunchResourcesOnDevice(unittest.TestCase):
    def test_cpp_wrapper_kernel_with_locks_and_workspace(self):
        import torch._inductor.config as inductor_config

        def fn(x, y):
            return torch.mm(x, y).relu().sum(dim=0)

        x = torch.randn(256, 128, device="npu")
        y = torch.randn(128, 64, device="npu")
        with inductor_config.patch(cpp_wrapper=True):
            compiled = torch.compile(fn, dynamic=True)
            torch.testing.assert_close(compiled(x, y), fn(x, y), rtol=1e-3, atol=1e-3)
        torch.npu.synchronize()


if __name__ == "__main__":
    unittest.main()
'''
