"""Small pieces the launch fixes of both wrapper layouts share."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import re

from .. import launch_codegen
from .._patching import Probe


def probe_of_shape(shape: str, detail: str, upstream_fix: str = "upstream-fix", prefix: str = "") -> Probe:
    """The probe that the shape a fix read says: ``"unknown"`` is unrecognised (``detail`` says what differs),
    ``upstream_fix`` is upstream's own fix, any other (a shape the fix replaces, or its own) is needed."""
    if shape == "unknown":
        return Probe.unrecognised(prefix + detail)
    if shape == upstream_fix:
        return Probe.upstream_has_fix(detail)
    return Probe.needed(detail)


def needs_applying(found: tuple[str, str], replaces: str) -> bool:
    """From the shape a fix read: False when it is the fix's own already, True when it is the shape the fix
    replaces; any other raises with what differs."""
    shape, detail = found
    if shape == "ours":
        return False
    if shape != replaces:
        raise RuntimeError(detail)
    return True


#: DeferredNpuTritonCallWrapper.generate_launch_kernel's parameters in both layouts.
LAUNCH_PARAMS = ["self", "prefix", "wrapper", "kernel_var_name", "params"]
#: The two NULL declarations upstream's launch code writes (the first keeps its indent).
NULL_WORKSPACE = re.compile(r"^([ \t]*)void\*\s*workspace_addr\s*=\s*NULL;[ \t]*\n", re.M)
NULL_LOCK = re.compile(r"^[ \t]*void\*\s*sync_block_lock\s*=\s*NULL;[ \t]*\n", re.M)

#: The queue call every launcher ends with (torch_npu's ``launchKernel(<lambda>, "<kernel>");``).
LAUNCH_KERNEL = re.compile(r"^([ \t]*)launchKernel\(")


def splice_lambda_lines(text: str, code, kernel: str) -> str:
    """``text`` (upstream's launch code, holding the lambda's NULL sync declarations) with those two
    declarations replaced by ``code.in_lambda``; raises on any other shape."""
    ws, lock = NULL_WORKSPACE.search(text), NULL_LOCK.search(text)
    if not (ws and lock) or len(NULL_WORKSPACE.findall(text)) != 1 or len(NULL_LOCK.findall(text)) != 1:
        raise RuntimeError(
            f"torch_npu_patchset: launch code for {kernel} does not declare exactly one NULL workspace_addr "
            f"and one NULL sync_block_lock; refusing to guess where the sync resources go"
        )
    ours = "".join(f"{ws.group(1)}{ln}\n" for ln in code.in_lambda)
    text = NULL_LOCK.sub("", text, count=1)
    return NULL_WORKSPACE.sub(lambda m: ours, text, count=1)


def write_before_lambda(buffer, code) -> None:
    """``code.before`` into the launcher's buffer, where upstream is about to write the lambda."""
    for line in code.before:
        buffer.writeline(line)


def wrapper_classes(modules, module: str):
    """(the module, its ``CppWrapperNpu``, its ``DeferredNpuTritonCallWrapper``; None for a class it lacks)."""
    mod = modules[module]
    return mod, getattr(mod, "CppWrapperNpu", None), getattr(mod, "DeferredNpuTritonCallWrapper", None)


def launch_members(modules, module: str, *extra: str):
    """``(None, members)``: the functions both launch layouts replace, ``CppWrapperNpu.generate_args_decl`` and
    ``DeferredNpuTritonCallWrapper.generate_launch_kernel``, then ``extra`` ("Class.member"), each defined on the
    class itself; or ``(("unknown", what is missing), None)``."""
    _, wrapper_cls, deferred_cls = wrapper_classes(modules, module)
    if wrapper_cls is None or deferred_cls is None:
        return ("unknown", f"{module} lacks CppWrapperNpu or DeferredNpuTritonCallWrapper"), None
    classes = {"CppWrapperNpu": wrapper_cls, "DeferredNpuTritonCallWrapper": deferred_cls}
    names = ("CppWrapperNpu.generate_args_decl", "DeferredNpuTritonCallWrapper.generate_launch_kernel", *extra)
    members = {name: classes[name.split(".")[0]].__dict__.get(name.split(".")[1]) for name in names}
    missing = [name for name, fn in members.items() if not callable(fn)]
    if missing:
        return ("unknown", f"{', '.join(missing)} not defined in {module}"), None
    return None, members


def param_names(fn) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


@dataclasses.dataclass(frozen=True)
class Launch:
    """The kernel whose launch code ``generate_launch_kernel`` is writing (either layout), for the
    ``generate_args_decl`` calls it makes."""
    kernel: str
    params: dict
    block_clamp: int | None = None  # the newer layout's auto-blockify clamp (the older one never clamps)
    afters: list = dataclasses.field(default_factory=list)  # per launch lambda written: its release lines

    def splice(self, buffer, text: str, code) -> str:
        """Upstream's lambda ``text`` with its NULL sync declarations replaced by ``code``'s lambda part;
        ``code``'s calling-thread part written into the launcher's ``buffer`` (upstream writes the lambda
        next) and its release kept for after the launch."""
        text = splice_lambda_lines(text, code, self.kernel)
        write_before_lambda(buffer, code)
        self.afters.append(code.after)
        return text


_CURRENT: contextvars.ContextVar[Launch | None] = contextvars.ContextVar("npu_sync_launch", default=None)


def current_launch() -> Launch | None:
    return _CURRENT.get()


@contextlib.contextmanager
def generating(launch: Launch, prefix):
    """``launch`` is the current one while upstream writes its launch code into ``prefix``; ``starts``
    (yielded) are where each side of the buffer stood before it."""
    token = _CURRENT.set(launch)
    try:
        yield [len(lines) for lines in buffer_sides(prefix)]
    finally:
        _CURRENT.reset(token)


def buffer_sides(buffer) -> list:
    """The line lists of a launcher buffer: its own, and torch's dual-wrapper AOTI side (torch >= 2.13's
    ``DualIndentedBuffer.aot``, which every ``writeline`` / ``splice`` also writes)."""
    aot = getattr(buffer, "aot", None)
    return [buffer._lines] + ([aot._lines] if aot is not None and hasattr(aot, "_lines") else [])


def release_after_launches(buffer, starts: list[int], afters: list, kernel: str) -> None:
    """After each ``launchKernel(...)`` line upstream wrote into ``buffer`` (each side: from its line
    ``starts[i]`` on) the release lines of that launch (``afters``: one list per launch, in order);
    raises when the launches written are not the ones whose resources were taken."""
    for lines, start in zip(buffer_sides(buffer), starts):  # indented strings (and line objects), in order
        found = [i for i in range(start, len(lines)) if isinstance(lines[i], str) and LAUNCH_KERNEL.match(lines[i])]
        if len(found) != len(afters):
            raise RuntimeError(
                f"torch_npu_patchset: launch code for {kernel} queued {len(found)} launch(es) for {len(afters)} "
                f"launch lambda(s) with sync resources; refusing to guess where their memory is released"
            )
        for i, after in reversed(list(zip(found, afters))):
            indent = LAUNCH_KERNEL.match(lines[i]).group(1)
            lines[i + 1:i + 1] = [indent + ln for ln in after]


#: The runtime helper's header (what the generated wrapper includes).
HEADER_PATH = launch_codegen.HELPER_DIR / launch_codegen.HELPER_HEADER


#: The upstream form of this fix (the pull request tooling/upstream/patch.py writes): torch_npu's
#: own code calls these functions of its module codegen/npu_launch_resources.py.
UPSTREAM_MODULE = "torch_npu._inductor.codegen.npu_launch_resources"
UPSTREAM_LINES_FN = "launch_resource_lines"
UPSTREAM_SYNC_PARAMS_FN = "kernel_sync_params"


def upstream_form(*fns) -> str | None:
    """Which of ``fns`` (upstream functions) already emit their launch resources through the
    upstream form of this fix, as a sentence for the status table; None when none does."""
    from .._patching import source_of

    users = [f"{getattr(fn, '__qualname__', fn)}" for fn in fns
             if fn is not None and f"{UPSTREAM_LINES_FN}(" in source_of(fn)]
    if not users:
        return None
    return (f"{', '.join(users)} declare(s) sync_block_lock / workspace_addr through {UPSTREAM_MODULE}."
            f"{UPSTREAM_LINES_FN} (the upstream form of this fix: one carved, stream-initialised request)")


def helper_include_lines(aot_mode: bool = False) -> list[str]:
    """What the generated wrapper's header needs for the runtime helper (the ABI define, then
    the include by absolute path), as launch_codegen writes it for every layout. In aot_mode
    the helper's text itself: an AOTInductor model is built, or packaged, for another machine."""
    if aot_mode:
        return list(launch_codegen.helper_inline_lines())
    return list(launch_codegen.helper_include_lines())


def header_include_lines() -> list[str]:
    """:func:`helper_include_lines` for the graph being generated (read per header: JIT and AOT graphs are
    written by one process)."""
    return helper_include_lines(aot_mode=graph_in_aot_mode())


def graph_in_aot_mode() -> bool:
    """Whether the graph being generated is an AOTInductor one (read when the header is written)."""
    from torch._inductor.virtualized import V

    return bool(getattr(V.graph, "aot_mode", False))
