"""The edits the upstream patch makes to a torch_npu checkout's own files (pure text -> text).

Each edit finds an anchor that must occur exactly once and raises
:class:`CannotApply` naming the file and the anchor when it does not, so an
unknown layout is refused rather than guessed at. Two launcher layouts are
known (docs/facts.md):

* ``cpp_wrapper_npu``: ``codegen/cpp_wrapper_npu.py`` (``aclrtLaunchKernelWithHostArgs``)
  and ``runtime/triton_heuristics.py``;
* ``cpp_wrapper``: ``codegen/cpp_wrapper.py`` (``rtKernelLaunch``) and
  ``npu_triton_heuristics.py``.

What each edit writes is upstream Python in the style of the code around it;
the C++ it emits comes from the generated ``codegen/npu_launch_resources.py``
(:mod:`.upstream_patch_module`), i.e. from ``launch_codegen``.
"""
from __future__ import annotations

import dataclasses
import re

from ... import masked_loads
from . import module as upm

IND = "torch_npu/_inductor"
NPU_WRAPPER = f"{IND}/codegen/cpp_wrapper_npu.py"
RT_WRAPPER = f"{IND}/codegen/cpp_wrapper.py"
HEURISTICS = {"cpp_wrapper_npu": f"{IND}/runtime/triton_heuristics.py", "cpp_wrapper": f"{IND}/npu_triton_heuristics.py"}
WRAPPER = {"cpp_wrapper_npu": NPU_WRAPPER, "cpp_wrapper": RT_WRAPPER}
FLEX = f"{IND}/kernel/flex_attention.py"
_IMPORT = f"from .npu_launch_resources import {upm.LINES_FN}, {upm.INCLUDE_FN}"


class CannotApply(ValueError):
    """The checkout's code is not a shape the patch knows; says what is missing where."""


@dataclasses.dataclass
class Source:
    path: str
    text: str
    changes: list = dataclasses.field(default_factory=list)  # what was done, for the commit body

    def replace_once(self, old: str, new: str, what: str) -> None:
        n = self.text.count(old)
        if n != 1:
            found = "not found" if n == 0 else f"found {n} times"
            raise CannotApply(f"{self.path}: {what}: expected exactly one {old.strip().splitlines()[0]!r}, {found}")
        self.text = self.text.replace(old, new)
        self.changes.append(what)

    def section(self, start: str, what: str) -> tuple[int, int]:
        """[begin, end) of the function starting at the line ``start`` (up to the next def at its indent)."""
        n = self.text.count(start)
        if n != 1:
            raise CannotApply(f"{self.path}: {what}: expected exactly one {start.strip()!r}, found {n}")
        begin = self.text.index(start)
        indent = start[: len(start) - len(start.lstrip())]
        nxt = re.compile(rf"^{indent}(?:def |@|class )|^(?:class |def )", re.M).search(self.text, begin + len(start))
        return begin, nxt.start() if nxt else len(self.text)

    def replace_in(self, start: str, old: str, new: str, what: str) -> None:
        begin, end = self.section(start, what)
        part = self.text[begin:end]
        if part.count(old) != 1:
            raise CannotApply(f"{self.path}: {what}: expected exactly one {old.strip().splitlines()[0]!r} in "
                              f"{start.strip()}, found {part.count(old)}")
        self.text = self.text[:begin] + part.replace(old, new) + self.text[end:]
        self.changes.append(what)


def add_import(src: Source, line: str, what: str) -> None:
    """``line`` after the last single-line relative import at the top of the module."""
    head = re.split(r"^(?:class |def |@)", src.text, maxsplit=1, flags=re.M)[0]
    found = list(re.finditer(r"^from \.[\w.]* import [^(\n]*\n", head, re.M))
    if not found:
        raise CannotApply(f"{src.path}: {what}: no single-line relative import at the top of the module")
    at = found[-1].end()
    src.text = src.text[:at] + line + "\n" + src.text[at:]
    src.changes.append(what)


# ---- the C++ wrapper ---------------------------------------------------------------------------------
_ARGS_DECL_CALL = "{wrapper.generate_args_decl(prefix, call_args, arg_types, arg_signatures, True, force_simt_only)}"
_LAUNCH_KERNEL = """\
        prefix.writeline(
            r"launchKernel({}, {});".format("launch_call", f'"{kernel_var_name}"')
        )
"""
_AFTER = "        prefix.writelines(launch_resources.after)  # queued: the block is the thread's again\n"
_HANDED_OVER = "and hands them back once it is queued: kept for the thread's next launch on the stream"
_TAKE = """\
        # Workspace and sync-block locks (csrc/inductor/npu_launch_resources.h), taken on the graph's thread
        block_clamp = npu_config.num_vector_core if enable_auto_blockify else None
        launch_resources = {fn}(self.kernel_name, params, block_clamp, {simt})
"""
_SYNC_DECL = """\
        # sync_block_lock and workspace_addr as the launch's resource lines declare them (none for SIMT-only)
        if launch_resources is None:
            launch_resources = {fn}("", {{}}, simt_only={simt})
        sync_decl = "\\n{indent}".join(launch_resources.in_lambda)
"""


def _take(simt: str | None) -> str:
    if simt is None:  # the rtKernelLaunch layout: no auto-blockify, no SIMT-only launches
        comment = _TAKE.splitlines()[0] + "\n"
        return comment + f"        launch_resources = {upm.LINES_FN}(self.kernel_name, params)\n"
    return _TAKE.format(fn=upm.LINES_FN, simt=simt)


def _launch_function(src: Source, anchor: str) -> str:
    """The def line of the DeferredNpuTritonCallWrapper method that writes the launch lambda (its own
    generate_launch_kernel, or _generate_single_kernel_launch where grouped launches share it)."""
    for start in ("    def _generate_single_kernel_launch(\n",
                  "    def generate_launch_kernel(self, prefix, wrapper, kernel_var_name, params):\n"):
        if start in src.text:
            begin, end = src.section(start, "the launch code")
            if anchor in src.text[begin:end]:
                return start
    raise CannotApply(f"{src.path}: no generate_launch_kernel or _generate_single_kernel_launch writes "
                      f"{anchor.strip().splitlines()[0]!r}")


def _args_decl_null(src: Source, simt: str, extra: str = "") -> None:
    """generate_args_decl takes the launch's resource lines and declares the two pointers from them."""
    start = "    def generate_args_decl(\n"
    src.replace_in(start, '        args_str = f"""\n',
                   _SYNC_DECL.format(fn=upm.LINES_FN, simt=simt, indent=" " * 12) + '        args_str = f"""\n',
                   "CppWrapperNpu.generate_args_decl declares sync_block_lock / workspace_addr from them")
    src.replace_in(start,
                   f'            {{"void* workspace_addr = NULL;" if not {simt} else ""}}\n'
                   f'            {{"void* sync_block_lock = NULL;" if not {simt} else ""}}\n' + extra,
                   "            {sync_decl}\n", "CppWrapperNpu.generate_args_decl no longer passes NULL")


def edit_npu_wrapper(src: Source) -> None:
    add_import(src, _IMPORT, "imports the launch-resource code generator")
    anchor = f'''        prefix.splice(f"""
        auto launch_call = [=]() {{{{
        {_ARGS_DECL_CALL}
'''
    where = _launch_function(src, anchor)
    src.replace_in(where, anchor, _take("force_simt_only") + '''\
        args_decl = wrapper.generate_args_decl(
            prefix, call_args, arg_types, arg_signatures, True, force_simt_only, launch_resources
        )
        prefix.writelines(launch_resources.before)
        prefix.splice(f"""
        auto launch_call = [=]() {{
        {args_decl}
''', "DeferredNpuTritonCallWrapper: each launch takes its workspace and locks before the lambda")
    src.replace_in(where, _LAUNCH_KERNEL, _LAUNCH_KERNEL + _AFTER, _HANDED_OVER)
    src.replace_in("    def generate_args_decl(\n", "        force_simt_only=False,\n    ):\n",
                   "        force_simt_only=False,\n        launch_resources=None,\n    ):\n",
                   "CppWrapperNpu.generate_args_decl takes the launch's resource lines")
    _args_decl_null(src, "force_simt_only")
    _add_include(src)
    _keep_launch_lambda_in_aot(src)


def has_own_allocation(text: str) -> bool:
    """Upstream's own fix (2.7.1.post11 .. 2.14.0): generate_args_decl(..., kernel_params) asks
    allocate_workspace twice per launch and fills the locks with a blocking aclrtMemcpy."""
    return "kernel_params" in text and "allocate_workspace(" in text and "aclrtMemcpy(" in text


_OWN_PARAM = "        kernel_params: Optional[dict[str, Any]] = None,\n"
_OWN_FIELDS = re.compile(r"        kernel_params = kernel_params or \{\}\n(?:        [^\n]*\n|\s*\n)*?"
                         r"        workspace_size = int\(kernel_params\.get\(\"workspace_size\", 0\) or 0\)\n")
_OWN_ALLOCATION = re.compile(r"        workspace_str = \"\"\n.*?(?=        args_str = f\"\"\"\n)", re.S)
_OWN_KWARG = re.compile(r"            kernel_params=\{\n(?:                [^\n]*\n)*?            \},\n        \)\n")


def edit_npu_wrapper_replacing(src: Source) -> None:
    """The same result where upstream already allocates (its own fix): its two allocate_workspace
    requests inside the lambda and its blocking copy are replaced by the launch's one block."""
    add_import(src, _IMPORT, "imports the launch-resource code generator")
    start = "    def generate_args_decl(\n"
    begin, end = src.section(start, "CppWrapperNpu.generate_args_decl")
    part = src.text[begin:end]
    simt = next((s for s in ("is_pure_simt", "force_simt_only") if f"        {s}=False,\n" in part), None)
    if simt is None:
        raise CannotApply(f"{src.path}: generate_args_decl has neither force_simt_only=False nor is_pure_simt=False")
    call = "        args_decl = wrapper.generate_args_decl(\n"
    where = _launch_function(src, call)
    src.replace_in(where, call, _take(simt) + call,
                   "DeferredNpuTritonCallWrapper: each launch takes its workspace and locks before the lambda")
    b, e = src.section(where, "the launch code")
    found = _OWN_KWARG.findall(src.text[b:e])
    if len(found) != 1:
        raise CannotApply(f"{src.path}: {where.strip()}: expected one kernel_params={{...}} argument of "
                          f"generate_args_decl, found {len(found)}")
    src.replace_in(where, found[0], "            launch_resources=launch_resources,\n        )\n"
                   "        prefix.writelines(launch_resources.before)\n",
                   "hands them to generate_args_decl instead of kernel_params")
    src.replace_in(where, _LAUNCH_KERNEL, _LAUNCH_KERNEL + _AFTER, _HANDED_OVER)
    src.replace_in(start, _OWN_PARAM, "        launch_resources=None,\n",
                   "CppWrapperNpu.generate_args_decl takes the launch's resource lines")
    begin, end = src.section(start, "CppWrapperNpu.generate_args_decl")
    part = src.text[begin:end]
    for pattern, what in ((_OWN_FIELDS, "drops upstream's own parse of the sync fields"),
                          (_OWN_ALLOCATION, "drops upstream's two allocate_workspace requests and blocking aclrtMemcpy")):
        found = pattern.findall(part)
        if len(found) != 1:
            raise CannotApply(f"{src.path}: generate_args_decl: expected one {pattern.pattern[:60]!r}, "
                              f"found {len(found)}")
        part = pattern.sub("", part)
        src.changes.append(f"CppWrapperNpu.generate_args_decl {what}")
    if "kernel_params" in part:
        raise CannotApply(f"{src.path}: generate_args_decl uses kernel_params beyond the sync fields")
    src.text = src.text[:begin] + part + src.text[end:]
    _args_decl_null(src, simt, "            {workspace_str}\n            {sync_block_lock_str}\n")
    _add_include(src)
    _keep_launch_lambda_in_aot(src)


#: torch_npu 2.13.0 / 2.14.0 / master: torch's generate runs with lazy compile on in aot_mode, and torch 2.14 then
#: writes its lazy-compile launch (no torch_npu runtime, no workspace or lock argument): keep the lambda instead.
_LAZY_IN_AOT = '''            # todo: support lazy compile for cpp_wrapper_npu
            with config.patch("triton.autotune_at_compile_time", not V.graph.aot_mode):
'''
_EAGER_IN_AOT = '''            # torch_npu has no runtime for torch's lazy-compile launch, AOTInductor included (torch 2.14
            # takes it in aot_mode too): keep torch_npu's own launch lambda, which gets the workspace and locks
            with config.patch("triton.autotune_at_compile_time", True):
'''


def _keep_launch_lambda_in_aot(src: Source) -> None:
    """Where DeferredNpuTritonCallWrapper.generate turns compile-time autotuning off in aot_mode (the same
    change as the runtime patch set's aot-npu-launch-lambda); nothing where it does not."""
    if 'config.patch("triton.autotune_at_compile_time", not V.graph.aot_mode)' not in src.text:
        return
    src.replace_in("    def generate(self, wrapper: CppWrapperGpu):\n", _LAZY_IN_AOT, _EAGER_IN_AOT,
                   "DeferredNpuTritonCallWrapper.generate keeps AOTInductor launches on torch_npu's launch lambda")


def _add_include(src: Source) -> None:
    include = f"        {{{upm.INCLUDE_FN}(indent=\" \" * 8)}}\n"
    if "    def get_device_include_path(device: str) -> str:\n" in src.text:
        src.replace_in("    def get_device_include_path(device: str) -> str:\n",
                       "        #include <torch_npu/csrc/framework/OpCommand.h>\n        \"\"\"\n",
                       "        #include <torch_npu/csrc/framework/OpCommand.h>\n" + include + "        \"\"\"\n",
                       "the wrapper header includes the helper")
    else:  # newer torch: includes are spliced by add_device_include
        src.replace_in("    def add_device_include(self, device: str) -> None:\n",
                       "        super().add_device_include(device)\n",
                       f"        self.header.splice({upm.INCLUDE_FN}())\n        super().add_device_include(device)\n",
                       "the wrapper header includes the helper")


def edit_rt_wrapper(src: Source) -> None:
    add_import(src, _IMPORT, "imports the launch-resource code generator")
    launch = "    def generate_launch_kernel(self, prefix, wrapper, kernel_var_name, params):\n"
    src.replace_in(launch, "        call, call_args_str = wrapper.generate_args_decl(\n",
                   _take(None) + "        call, call_args_str = wrapper.generate_args_decl(\n",
                   "DeferredNpuTritonCallWrapper: each launch takes its workspace and locks before the lambda")
    src.replace_in(launch, "            self.kernel_id,\n        )\n        prefix.writeline(f\"{call_args_str}\")\n",
                   "            self.kernel_id,\n            launch_resources=launch_resources,\n        )\n"
                   "        prefix.writelines(launch_resources.before)\n        prefix.writeline(f\"{call_args_str}\")\n",
                   "hands them to generate_args_decl")
    call = "        prefix.writeline(r\"launchKernel({}, {});\".format(call, f'\"{kernel_var_name}\"'))\n"
    src.replace_in(launch, call, call + _AFTER, _HANDED_OVER)
    start = "    def generate_args_decl(\n"
    src.replace_in(start, "        is_triton_kernel=True,\n    ):\n",
                   "        is_triton_kernel=True,\n        launch_resources=None,\n    ):\n",
                   "CppWrapperNpu.generate_args_decl takes the launch's resource lines")
    src.replace_in(start, '        launch_str = f"""\n',
                   _SYNC_DECL.format(fn=upm.LINES_FN, simt="False", indent=" " * 8).replace(", simt_only=False", "")
                   .replace(" (none for SIMT-only)", "")
                   + '        launch_str = f"""\n', "CppWrapperNpu.generate_args_decl declares them from them")
    src.replace_in(start, "        void* workspace_addr = NULL;\n        void* sync_block_lock = NULL;\n",
                   "        {sync_decl}\n", "CppWrapperNpu.generate_args_decl no longer passes NULL")
    src.replace_in("    def write_header(self):\n", '        self.header.splice("#include <runtime/runtime/rt.h>")\n',
                   '        self.header.splice("#include <runtime/runtime/rt.h>")\n'
                   f"        self.header.splice({upm.INCLUDE_FN}())\n", "the wrapper header includes the helper")


# ---- the autotuner -----------------------------------------------------------------------------------
def edit_heuristics(src: Source, layout: str) -> None:
    package = ".." if layout == "cpp_wrapper_npu" else "."
    start = "    def save_npu_kernel(self, input_stream, input_launcher):\n"
    begin = src.text.find(start)
    if begin < 0:
        raise CannotApply(f"{src.path}: no NPUCachingAutotuner.save_npu_kernel(self, input_stream, input_launcher)")
    # The first definition is NPUCachingAutotuner's (a subclass may override it and call super()).
    params = src.text.find("        params = {\n", begin)
    close = src.text.find("\n        }\n", params)
    nxt = src.text.find("\n    def ", begin + len(start))
    if params < 0 or close < 0 or (0 <= nxt < close):
        raise CannotApply(f"{src.path}: save_npu_kernel does not build its params as one dict literal")
    at = close + len("\n        }\n")
    src.text = src.text[:at] + (
        "        # The kernel's workspace and sync-block locks, for the C++ wrapper (bad metadata fails here, named)\n"
        f"        from {package}codegen.npu_launch_resources import {upm.SYNC_PARAMS_FN}\n"
        f"        params.update({upm.SYNC_PARAMS_FN}(input_launcher.bin.metadata, key))\n"
    ) + src.text[at:]
    src.changes.append("NPUCachingAutotuner.save_npu_kernel records the kernel's workspace and lock fields")
    grouped = "    def _grouped_variant_load_meta(launcher) -> dict[str, Any]:\n"
    if grouped in src.text:  # each variant of a grouped launch has its own sync fields
        src.replace_in(grouped, "        return {\n",
                       '        name = metadata.name if hasattr(metadata, "name") else metadata["name"]\n'
                       f"        from {package}codegen.npu_launch_resources import {upm.SYNC_PARAMS_FN}\n"
                       "        return {\n"
                       f"            **{upm.SYNC_PARAMS_FN}(metadata, name),\n",
                       "each variant of a grouped launch records its own workspace and lock fields")


# ---- Flex Attention backward grid --------------------------------------------------------------------
_GRID = '''

@SymbolicGridFn
def _npu_flex_attention_backward_grid(batch_size, q_heads, num_queries, d_model, kv_heads, num_kv, meta, *, cdiv):
    # torch 2.7.1's grid, printable in C++ for dynamic shapes: on symbols `//` prints std::floor(a * 1.0 / b)
    ratio = q_heads // kv_heads if isinstance(q_heads * kv_heads, int) else FloorDiv(q_heads, kv_heads)
    return cdiv(num_queries, meta["BLOCK_M2"]) * ratio + cdiv(num_kv, meta["BLOCK_N1"]), 1, batch_size * kv_heads
'''
_GRID_IMPORTS = ("from torch._inductor.select_algorithm import SymbolicGridFn\n"
                 "from torch.utils._sympy.functions import FloorDiv\n")


def flex_form(text: str) -> str | None:
    """Which plain-grid Flex backward template this kernel/flex_attention.py compiles, if any:
    ``"own"`` (its NPUTritonTemplate built with torch's plain grid) or ``"torch"`` (torch 2.7.1's
    template, imported as upstream_flex_attention_backward_template)."""
    if re.search(r"^flex_attention_backward_template = NPUTritonTemplate\(\n\s+name=\"flex_attention_backward\",\n"
                 r"\s+grid=flex_attention_backward_grid,", text, re.M):
        return "own"
    if ("flex_attention_backward_template as upstream_flex_attention_backward_template" in text
            and "upstream_flex_attention_backward_template.maybe_append_choice(" in text
            and not re.search(r"^\s*upstream_flex_attention_backward_template\.grid\s*=", text, re.M)):
        return "torch"
    return None


def edit_flex(src: Source) -> bool:
    form = flex_form(src.text)
    if form is None:
        return False
    first_def = re.search(r"^(?:def |class |@)", src.text, re.M)
    imports_end = src.text.rfind("\n)\n", 0, first_def.start()) if form == "torch" else -1
    if form == "own":
        src.replace_once("from torch_npu._inductor.select_algorithm import NPUTritonTemplate\n",
                         "from torch_npu._inductor.select_algorithm import NPUTritonTemplate\n" + _GRID_IMPORTS,
                         "imports SymbolicGridFn and FloorDiv")
        src.replace_once("\n\nflex_attention_backward_template = NPUTritonTemplate(\n"
                         "    name=\"flex_attention_backward\",\n    grid=flex_attention_backward_grid,\n",
                         _GRID + "\n\nflex_attention_backward_template = NPUTritonTemplate(\n"
                         "    name=\"flex_attention_backward\",\n    grid=_npu_flex_attention_backward_grid,\n",
                         "the NPU Flex Attention backward template gets a SymbolicGridFn grid")
        if len(re.findall(r"\bflex_attention_backward_grid\b", src.text)) == 1:  # left only in the import
            src.replace_once("    flex_attention_backward_grid,\n", "", "drops the import the grid no longer uses")
        return True
    if imports_end < 0:
        raise CannotApply(f"{src.path}: no import block before the first definition")
    at = imports_end + len("\n)\n")
    src.text = (src.text[:at] + _GRID_IMPORTS + _GRID + "\n\n"
                "if not isinstance(upstream_flex_attention_backward_template.grid, SymbolicGridFn):  # torch 2.7.1\n"
                "    upstream_flex_attention_backward_template.grid = _npu_flex_attention_backward_grid\n"
                + src.text[at:])
    src.changes.append("torch's Flex Attention backward template, which this lowering compiles, gets a "
                       "SymbolicGridFn grid")
    return True


# ---- Flex Attention templates: loads that mask along their pointers' axes ----------------------------------
#: How the change starts in the commit's list (the message says why where it is there).
LOADS_CHANGE = "the Flex Attention template loads"


def edit_flex_loads(src: Source) -> bool:
    """Where torch_npu's own Flex templates load a block with the bounds checks of its transpose (the backward's
    [N, D] kT / vT / qT loaded with torch's [D, N] arguments; the forward's [head, sequence] K block with the flags
    of a [sequence, head] one), those loads get their blocks' own order, and the backward's index lines their bound
    when not IS_DIVISIBLE: the runtime patch's rule, ``masked_loads.fixed``, on the file's text. Nothing where every
    load fits its block or none is there."""
    reading = masked_loads.read(src.text)
    if reading.shape == masked_loads.UNKNOWN:
        raise CannotApply(f"{src.path}: {reading.detail}")
    if reading.shape != masked_loads.SWAPPED:
        return False
    bounds = masked_loads.unbounded_indices(src.text)
    src.text = masked_loads.fixed(src.text)
    names = ", ".join(ld.target for ld in reading.swapped)
    src.changes.append(f"{LOADS_CHANGE} {names} check the axes their blocks are laid out in"
                       + (f"; {len(bounds)} backward index lines bounded when not IS_DIVISIBLE" if bounds else ""))
    return True
