"""Drive a released torch_npu wheel's REAL Inductor code, before and after the patch set.

Run in a fresh interpreter per version (the stand-ins replace ``torch_npu``):

    python -m torch_npu._inductor.patchset.tooling.releases.wheel_harness 2.7.1.post10 OUT.json

It loads the wheel's ``torch_npu/_inductor`` Python files
(``torch_npu._inductor.patchset.tooling.releases.wheels``), then for every sample
kernel (``sim.samples.SAMPLES``, or the list ``$TORCH_NPU_PATCHSET_HARNESS_SAMPLES``
names):

1. builds an ``NPUCachingAutotuner`` (its real class, attributes set as its
   constructor would for one config) and a fake launcher whose
   ``bin.metadata`` is a namedtuple carrying exactly the fields triton-ascend
   reports for that kernel, and calls the real ``save_gpu_kernel``;
2. renders the kernel's launcher with the real ``DeferredNpuTritonCallWrapper``
   and ``CppWrapperNpu`` code (a ``CppWrapperNpu`` object with the attributes
   that code reads; torch_npu's real NPU device-op overrides);

once with the wheel as shipped, then again after ``patchset.apply()``. The
JSON written to OUT has the status rows, the saved params' plan and both
renderings.

Releases of the older layout (``layout`` = ``"legacy"``: C++ wrapper in
``codegen/cpp_wrapper.py``, autotuner in ``npu_triton_heuristics.py``) are
rendered the same way through THEIR real classes and written in the same
shape; there ``generate_args_decl`` returns the launch lambda, which calls
``rtKernelLaunch`` (``result["launch_api"]`` says which API the launchers
call), and ``["include"]`` is the header ``CppWrapperNpu.write_header`` wrote.

``result["flex"]`` says which Flex Attention backward template the NPU
compiles on this release (torch_npu's own, where it registers one, else
torch's), whether its grid was already a ``SymbolicGridFn`` as shipped, and
whether it is this patch set's grid after ``apply()``.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

VERSION = sys.argv[1]
OUT = sys.argv[2]
#: ``--aot``: render as for AOTInductor (``V.graph.aot_mode``): kernels reached through ``kernels_.<name>``,
#: the AOT header (``["include"]`` is then what ``write_header`` wrote, every layout).
AOT = "--aot" in sys.argv[3:]
#: ``--source DIR``: load that torch_npu source checkout's Inductor code instead of the wheel's
#: (VERSION then only names it). ``--patchset-off``: render upstream's code as it stands and stop
#: (no ``patchset.apply()``; ``["upstream"]`` only, plus the kernel driver code for a build).
SOURCE = sys.argv[sys.argv.index("--source") + 1] if "--source" in sys.argv[3:-1] else None
PATCHSET_OFF = "--patchset-off" in sys.argv[3:]
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:  # a cache of its own, gone when the harness ends
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="upstream-harness-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)

from torch_npu._inductor.patchset.tooling.releases import wheels as uw  # noqa: E402

result: dict = {"version": VERSION, "aot_mode": AOT}


def snapshot(modules) -> dict:
    """Identity of every class attribute and module global, to prove nothing changed."""
    snap = {}
    for mod in modules:
        for name, value in list(vars(mod).items()):
            snap[f"{mod.__name__}.{name}"] = id(value)
            if isinstance(value, type) and value.__module__ == mod.__name__:
                for attr, v in list(vars(value).items()):
                    snap[f"{mod.__name__}.{name}.{attr}"] = id(v)
    return snap


def finish(code: int = 0) -> None:
    with open(OUT, "w") as f:
        json.dump(result, f, indent=1, default=str)
    sys.exit(code)


try:
    loaded = uw.load(VERSION, source=SOURCE)
except uw.WheelUnavailable as exc:
    result.update(loaded=False, error=str(exc), index_unreachable=exc.index_unreachable)
    finish()
result.update(loaded=True, layout=loaded["layout"], import_errors=loaded["import_errors"])
if AOT:  # the older layout's AOT write_header reads the wheel's codegen/aoti_runtime/interface.cpp
    import zipfile

    with zipfile.ZipFile(uw.wheel_path(VERSION)) as zf:
        for name in zf.namelist():
            if name.startswith("torch_npu/_inductor/") and "/aoti_runtime/" in name and name.endswith(".cpp") \
                    and not Path(loaded["tree"], name).exists():
                zf.extract(name, loaded["tree"])

import importlib  # noqa: E402

import torch  # noqa: E402

import torch_npu._inductor.patchset as patchset  # noqa: E402
from torch_npu._inductor.patchset.tooling.sim.samples import rendered_samples  # noqa: E402

OLDER = loaded["layout"] != "cpp_wrapper_npu"  # codegen/cpp_wrapper.py, rtKernelLaunch
result["launch_api"] = "rtKernelLaunch" if OLDER else "aclrtLaunchKernelWithHostArgs"
heur_name, cw_name = uw.OLDER_TARGETS if OLDER else uw.TARGETS
heur, cw = loaded["modules"][heur_name], loaded["modules"][cw_name]
if heur is None or cw is None:
    result["error"] = f"target modules did not import: {loaded['import_errors']}"
    finish()
if OLDER:
    # What the wheel's _inductor/__init__ does (not run here): register its device-op overrides.
    from torch._inductor.codegen.common import register_device_op_overrides  # noqa: E402

    register_device_op_overrides("npu", importlib.import_module("torch_npu._inductor.npu_device").NewNPUDeviceOpOverrides())
else:
    importlib.import_module("torch_npu._inductor.codegen.npu.device_op_overrides")  # registers the real "npu" overrides


# ---- Flex Attention backward: which template the NPU compiles, and its grid ------------------------
def flex_template():
    """(template, "module.attr") the NPU lowers Flex Attention backward with on this release."""
    from torch_npu._inductor.patchset.fixes import flex_attention_backward_symbolic_grid as flex_fix

    tree = Path(loaded["tree"], "torch_npu", "_inductor", "kernel")
    for module, attr in flex_fix.NPU_TEMPLATE_LOCATIONS:  # torch_npu's own lowering, where it has one
        if (tree / (module.rsplit(".", 1)[1] + ".py")).exists():
            mod = importlib.import_module(module)
            if hasattr(mod, attr):
                return getattr(mod, attr), f"{module}.{attr}"
    importlib.import_module("torch._inductor.select_algorithm")  # torch 2.7.1: import order
    for module in flex_fix.TEMPLATE_MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(mod, flex_fix.flex_grid.TEMPLATE):
            return getattr(mod, flex_fix.flex_grid.TEMPLATE), f"{module}.{flex_fix.flex_grid.TEMPLATE}"
    raise LookupError("no Flex Attention backward template found")


def flex_report(stage: str) -> None:
    from torch._inductor.select_algorithm import SymbolicGridFn

    from torch_npu._inductor.patchset.fixes import flex_attention_backward_symbolic_grid as flex_fix

    flex = result.setdefault("flex", {})
    try:
        template, where = flex_template()
    except Exception as exc:  # recorded, never hidden
        flex[f"error_{stage}"] = f"{type(exc).__name__}: {exc}"
        return
    grid = template.grid
    fn = getattr(grid, "fn", grid)
    owner = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    if stage == "upstream":
        flex.update(template=where, own_template=where.startswith("torch_npu."), grid_is_symbolic=isinstance(grid, SymbolicGridFn),
                    grid_upstream=owner)
    else:
        flex.update(patched=flex_fix.is_ours(grid), grid_is_symbolic_after=isinstance(grid, SymbolicGridFn),
                    grid_after=owner)


flex_report("upstream")


def aot_lazy_compile() -> str | None:
    """Why this release, as shipped, writes torch's lazy-compile launch instead of torch_npu's launch
    lambda in aot_mode (None when it writes the lambda): the aot-npu-launch-lambda patch's own reading
    of torch's and torch_npu's ``generate`` (one source for both), taken before the patch set applies."""
    from torch_npu._inductor.patchset.fixes import aot_npu_launch_lambda as aot_fix

    found, detail = aot_fix.shape({cw.__name__: cw})
    return detail if found == "lazy-in-aot" else None


if AOT:
    result["aot_lazy_compile"] = aot_lazy_compile()

from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.codecache import CudaKernelParamCache  # noqa: E402
from torch._inductor.codegen.common import get_device_op_overrides  # noqa: E402
from torch._inductor.utils import IndentedBuffer  # noqa: E402
from torch._inductor.virtualized import V  # noqa: E402

SIGNATURE = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}
if OLDER:  # its NPU kernels' grid is GridNpu: numel args named *_numel, split axes/blocks in the config
    SIGNATURE = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "x0_numel": "i32"}
ARG_TYPES = [torch.float32, torch.float32, int]
XBLOCK = 64
CONFIG_KWARGS = {"XBLOCK": XBLOCK, "split_axis": [0], "split_blocks": [XBLOCK]} if OLDER else {"XBLOCK": XBLOCK}


# Newer triton-ascend (read by torch_npu 2.13) names the SIMT-only flag is_pure_simt.
HEUR_SOURCE = Path(heur.__file__).read_text()
SIMT_FIELD = "is_pure_simt" if "metadata.is_pure_simt" in HEUR_SOURCE else "force_simt_only"
# Fields some releases' save_npu_kernel reads as attributes of the metadata, with triton-ascend's
# values for a vector kernel; only added where that release reads them and the sample has none.
READ_AS_ATTRIBUTES = {"name": None, "mix_mode": "aiv", "parallel_mode": "simd", "force_simt_only": False}


def metadata_for(sample) -> object:
    """A namedtuple like triton-ascend's CompiledKernel.metadata, with only the fields it has."""
    fields = dict(sample.metadata)
    if SIMT_FIELD != "force_simt_only" and "force_simt_only" in fields:
        fields[SIMT_FIELD] = fields.pop("force_simt_only")
    fields.setdefault("shared", 1)
    fields.setdefault("num_warps", 1)
    if OLDER:
        for field, value in READ_AS_ATTRIBUTES.items():
            if f"metadata.{field}" in HEUR_SOURCE:
                fields.setdefault(field, f"{sample.kernel}_mangled" if field == "name" else value)
    Meta = collections.namedtuple("KernelMetadata", sorted(fields))
    return Meta(**{k: fields[k] for k in sorted(fields)})


def kernel_name(sample, tag) -> str:
    return f"{sample.kernel}_{tag}"


def save(sample, tag) -> dict:
    name = kernel_name(sample, tag)
    tuner = heur.NPUCachingAutotuner.__new__(heur.NPUCachingAutotuner)
    tuner.inductor_meta = {"kernel_name": name, "grid_type": "GridNpu" if OLDER else "Grid1D"}
    tuner.triton_meta = {"signature": dict(SIGNATURE), "constants": {}, "device": 0}
    tuner.runtime_block_arg_names = ()
    tuner.best_runtime_blocks = ()
    tuner.cuda_kernel_saved = False
    tuner.compiled_candidate_entries = ()  # 2.10.0.post7: read by save_npu_kernel when no best blocks are set
    launcher = types.SimpleNamespace(
        bin=types.SimpleNamespace(metadata=metadata_for(sample), asm={"npubin": b"\x7fNPU-stand-in-binary"},
                                  num_warps=1, shared=1),
        config=heur.Config(CONFIG_KWARGS, num_warps=1, num_stages=1),
        def_args=list(SIGNATURE),
        call_args=list(SIGNATURE),
    )
    tuner.save_gpu_kernel(0, launcher)
    return CudaKernelParamCache.get(name)


class FakeGraph:
    aot_mode = AOT
    is_const_graph = False

    @property
    def is_dual_wrapper_mode(self):  # torch >= 2.13's rule, for a graph of Triton (NPU) kernels
        from torch._inductor import config

        return self.aot_mode and not config.triton.autotune_at_compile_time
    device_types = {"npu"}
    device_type = "npu"

    def __init__(self):
        self.wrapper_code = types.SimpleNamespace(additional_files=[])


class FakeHeader:
    """Collects what CppWrapperNpu.add_device_include (newer torch) splices into the header."""

    def __init__(self):
        self.parts: list[str] = []

    def splice(self, text, *args, **kwargs):
        self.parts.append(str(text))

    splice_jit = splice_aot = splice


def deferred_wrapper(name):
    cls = cw.DeferredNpuTritonCallWrapper
    if OLDER:  # (wrapper_name, kernel_name, arg_types, kernel_id)
        return cls(f"call_{name}", name, list(ARG_TYPES), 0)
    fields = {f.name for f in dataclasses.fields(cls)}
    if "kernel_name_to_body" in fields:  # newer torch's dataclass (2.9.0.post9 adds kernel_id)
        extra = {"kernel_id": 0} if "kernel_id" in fields else {}
        if AOT and "triton_meta" in fields:  # what newer torch's generate_kernel_call passes (its lazy path reads them)
            params = CudaKernelParamCache.get(name)
            extra.update(triton_meta=params["triton_meta"], inductor_meta=params["inductor_meta"])
        return cls(wrapper_name=f"call_{name}", kernel_name=name, kernel_name_to_body={name: ""},
                   arg_types=list(ARG_TYPES), **extra)
    return cls(f"call_{name}", name, list(ARG_TYPES), 0)


def include_text(wrapper) -> str:
    if OLDER or AOT:  # the whole header write_header writes (upstream's includes and kernel driver, then ours)
        wrapper.included_devices = set()
        wrapper.header = IndentedBuffer()
        wrapper.write_header()
        return wrapper.header.getvalue()
    if "get_device_include_path" in vars(cw.CppWrapperNpu):  # torch_npu 2.7.1: a static method
        return cw.CppWrapperNpu.get_device_include_path("npu")
    wrapper.header, wrapper.included_devices = FakeHeader(), set()
    wrapper.add_device_include("npu")
    wrapper.add_device_include("npu")  # a second call adds nothing more
    return "\n".join(wrapper.header.parts)


def render(sample, tag) -> dict:
    name = kernel_name(sample, tag)
    uw.TRITON_ASCEND["ffts"] = sample.has_ffts
    uw.TRITON_ASCEND["auto_blockify"] = sample.block_clamp is not None
    wrapper = cw.CppWrapperNpu.__new__(cw.CppWrapperNpu)
    wrapper.device = "npu"
    wrapper.device_codegen = get_device_op_overrides("npu")
    wrapper.arg_var_id = __import__("itertools").count()
    # What newer torch's CppWrapperGpu.__init__ sets and its lazy-compile path (aot_mode on 2.14) uses.
    wrapper._lazy_kernel_names, wrapper.used_cached_dtypes, wrapper.used_cached_devices = [], set(), set()
    if OLDER:  # what the older CppWrapperNpu.__init__ sets and generate_args_decl reads
        wrapper.visited_raii_handle, wrapper.visited_handle_for_kernel_id = set(), {}
    deferred = deferred_wrapper(name)
    with V.set_graph_handler(FakeGraph()), inductor_config.patch(CPP_WRAPPER_CONFIG):
        wrapper.prefix = codegen_buffer()
        deferred.generate(wrapper)
        include = include_text(wrapper)
    prefix = getattr(wrapper.prefix, "aot", wrapper.prefix)  # torch's dual-wrapper buffer: the AOTI side
    return {"cpp": prefix.getvalue(), "include": include, "prefix_buffer": type(wrapper.prefix).__name__}


#: What torch's cpp_wrapper configuration sets for the graph (``get_cpp_wrapper_config``): an
#: AOTInductor compile autotunes at compile time by default (torch 2.7.1 .. 2.14; a JIT one leaves it).
CPP_WRAPPER_CONFIG = {"triton.autotune_at_compile_time": True} if AOT else {}


def codegen_buffer():
    """The launcher buffer torch makes for the graph's mode (torch >= 2.13: pure JIT, pure AOTI or
    dual-wrapper, ``make_codegen_buffer``), else an IndentedBuffer."""
    import torch._inductor.utils as inductor_utils

    make = getattr(inductor_utils, "make_codegen_buffer", None)
    return make() if make is not None else IndentedBuffer()


def run_all(tag) -> dict:
    out = {}
    for s in rendered_samples():
        entry = {}
        try:
            params = save(s, tag)
            entry["params_plan"] = params.get("npu_sync_plan")
            entry["params_raw"] = {k: params.get(k) for k in ("workspace_size", "lock_num", "lock_init_val",
                                                               "sync_block_lock_layout", "mix_mode",
                                                               "auto_tile_and_bind_subblock") if k in params}
            entry.update(render(s, tag))
        except Exception as exc:
            import traceback

            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-3000:]
        out[s.key] = entry
    return out


result["upstream"] = run_all("upstream")
if PATCHSET_OFF:
    result.update(patchset_off=True, kernel_driver=get_device_op_overrides("npu").kernel_driver(),
                  stand_ins=sorted(set(uw.STAND_INS)))
    finish()
rows = patchset.apply()
result["status"] = [r.to_json() for r in rows]
flex_report("patched")
result["patched"] = run_all("patched")
if AOT:  # the AOT header on its own: also where no launcher renders in aot_mode
    try:
        header_wrapper = cw.CppWrapperNpu.__new__(cw.CppWrapperNpu)
        header_wrapper.device, header_wrapper.device_codegen = "npu", get_device_op_overrides("npu")
        with V.set_graph_handler(FakeGraph()):
            result["aot_header"] = include_text(header_wrapper)
    except Exception as exc:  # recorded, never hidden
        result["aot_header_error"] = f"{type(exc).__name__}: {exc}"
# Idempotence: a second apply from a clean applier state changes nothing.
from torch_npu._inductor.patchset import _applier  # noqa: E402

before = snapshot([heur, cw])
_applier._reset_for_tests()
result["status_again"] = [r.to_json() for r in _applier.apply(import_targets=True)]
result["changed_by_second_apply"] = sorted(k for k, v in snapshot([heur, cw]).items() if before.get(k) != v)
result["stand_ins"] = sorted(set(uw.STAND_INS))
result["num_vector_core"] = getattr(cw.npu_config, "num_vector_core", None)
result["cpp_kernel_type"] = get_device_op_overrides("npu").cpp_kernel_type()  # an AOT model's kernel handles
finish()
