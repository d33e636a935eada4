"""Do the Flex Attention backward template's loads mask along their pointers' axes? Asked of Triton's interpreter.

For each ``load_checked_2d`` of a pointer block that a torch_npu ``kernel/flex_attention.py`` builds
(:func:`pointer_loads` finds the block's line and the load's), a kernel made of the file's own
``load_checked_2d`` and those two lines, as the file writes them, loads a [SEQ, DIM] tensor through the block and
stores what it got back through the same block into a second tensor. Whatever the block's layout, each element goes
back to its own place, so the result must be the tensor with zeros at and beyond SEQ_LEN rows and DIM_LEN columns.
The cases (:data:`CASES`): sides that differ (a mask of the other shape cannot broadcast: triton's front end
rejects the load) and equal sides (it broadcasts, and masks the wrong axis), with ``IS_DIVISIBLE`` and
``SAFE_HEAD_DIM`` both false and each false alone. The mask rule is the same text in triton and triton-ascend
(docs/facts.md); the interpreter is this interpreter's triton's, so no device is needed.

The names the two lines use are bound by the template's conventions (:data:`BINDINGS`); a name outside them fails
the check, naming it, rather than being guessed at.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from . import edits

# ---- the template's 2-D pointer loads -------------------------------------------------------------------------
#: The pointers torch_npu's own backward template lays out [N, D] (its "# pta" lines) where torch's lays them out
#: [D, N]; each is read by one ``load_checked_2d``, whose (offs_m, offs_n) must be the pointers' (rows, columns).
TRANSPOSED_PTRS = ("kT_ptrs", "vT_ptrs", "qT_ptrs")
_AXIS = r"(\w+)\[(:, None|None, :)\] \* \w+"
_PTRS = re.compile(rf"^[ \t]*(\w+_ptrs) = \w+ \+ {_AXIS} \+ {_AXIS}[ \t]*$", re.M)
_LOAD = re.compile(r"^[ \t]*\w+ = load_checked_2d\((\w+_ptrs), ([^()\n]*)\)[ \t]*$", re.M)


@dataclasses.dataclass(frozen=True)
class PointerLoad:
    """A ``load_checked_2d`` of a 2-D pointer block built once in the template, and that block's axes."""

    ptrs: str
    line: str  # the load's line, as the file has it
    ptr_line: str  # the line that builds the block
    rows: str  # the offsets along the pointers' first axis ([:, None]) and their second
    cols: str
    args: tuple  # the load's arguments after the pointers: offs_m, offs_n, stride_m, stride_n, ...

    @property
    def matches(self) -> bool:
        return self.args[:2] == (self.rows, self.cols)


def pointer_loads(text: str, path: str = edits.FLEX) -> list[PointerLoad]:
    """Each ``load_checked_2d`` of a pointer block the template builds (``X_ptrs = B + o[:, None] * s + ...``), in
    file order; ``CannotApply`` naming the pointers where the text is not a shape this knows (a block built more
    than once, a load of the transposed pointers that is not ``load_checked_2d``, offsets of neither order)."""
    blocks: dict[str, list] = {}
    for m in _PTRS.finditer(text):
        if m.group(3) == m.group(5):
            raise edits.CannotApply(f"{path}: {m.group(1)}: both offsets index the same axis: {m.group(0).strip()!r}")
        rows, cols = (m.group(2), m.group(4)) if m.group(3) == ":, None" else (m.group(4), m.group(2))
        blocks.setdefault(m.group(1), []).append((rows, cols, m.group(0)))
    found = []
    for m in _LOAD.finditer(text):
        ptrs, args = m.group(1), tuple(a.strip() for a in m.group(2).split(","))
        if len(args) != 8 or args[2:4] != ("None", "None"):
            raise edits.CannotApply(f"{path}: {ptrs}: expected load_checked_2d({ptrs}, offs_m, offs_n, None, None, "
                              f"div_m, div_n, len_m, dim_n), found {m.group(0).strip()!r}")
        if len(blocks.get(ptrs, ())) != 1:
            raise edits.CannotApply(f"{path}: {ptrs}: expected one 2-D '{ptrs} = ...' before its load, found "
                              f"{len(blocks.get(ptrs, ()))}")
        rows, cols, ptr_line = blocks[ptrs][0]
        if {args[0], args[1]} != {rows, cols}:
            raise edits.CannotApply(f"{path}: {ptrs}: the load's offsets ({args[0]}, {args[1]}) are not the pointers' "
                              f"({rows}, {cols}) in either order")
        found.append(PointerLoad(ptrs, m.group(0), ptr_line, rows, cols, args))
    loaded = {p.ptrs for p in found}
    assigned = set(re.findall(r"^[ \t]*(\w+_ptrs) = ", text, re.M))
    for ptrs in TRANSPOSED_PTRS:
        if ptrs in assigned and (ptrs not in loaded or len(blocks.get(ptrs, ())) != 1):
            raise edits.CannotApply(f"{path}: {ptrs} is built or read in a way this does not know (one 2-D "
                              f"'{ptrs} = B + o[:, None] * s + ...' and one load_checked_2d({ptrs}, ...) expected)")
    return found

#: (SEQ, DIM, SEQ_LEN, DIM_LEN): block sides (powers of two) and the tensor's valid extent inside them;
#: IS_DIVISIBLE is SEQ_LEN == SEQ, SAFE_HEAD_DIM is DIM_LEN == DIM.
CASES = ((16, 32, 11, 24), (16, 16, 11, 13), (16, 16, 11, 16), (16, 16, 16, 13))

#: The template's names -> what the probe binds them to: sequence offsets, head-dim offsets, their bounds, strides
#: (the tensor is [SEQ, DIM], row-major). The block's base pointer is bound apart (the first term of its line).
BINDINGS = (
    (r"offs_[mn]\d", "tl.arange(0, SEQ)"),
    (r"offs_[kv]", "tl.arange(0, DIM)"),
    (r"\w+_LEN", "SEQ_LEN"),
    (r"\w+_HEAD_DIM", "DIM_LEN"),
    (r"stride_\w+d", "1"),
    (r"stride_\w+[mn]", "DIM"),
)
_PARAMS = ("IS_DIVISIBLE", "SAFE_HEAD_DIM")  # the probe's own constexpr parameters, under the template's names


class ProbeError(ValueError):
    """The file's text cannot be made into a probe (no helper, a name the conventions do not bind)."""


def helper_source(text: str) -> str:
    """The file's ``load_checked_2d = r\"\"\"...\"\"\"`` (the jit function its templates splice in)."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["load_checked_2d"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise ProbeError("no module-level load_checked_2d = r\"\"\"...\"\"\" helper text")


def _names(line: str) -> tuple[str, str, set[str]]:
    """(assigned name, first name of the right-hand side, every name the right-hand side reads) of one line."""
    node = ast.parse(line.strip()).body[0]
    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        raise ProbeError(f"not a single assignment: {line.strip()!r}")
    first = node.value
    while isinstance(first, ast.BinOp):
        first = first.left
    read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return node.targets[0].id, getattr(first, "id", ""), read


def probe_kernel(name: str, load: PointerLoad) -> str:
    """A jit function that loads through ``load``'s block and stores the result back through it, into OUT."""
    ptrs, base, ptr_reads = _names(load.ptr_line)
    value, _, load_reads = _names(load.line)
    bound = {ptrs, base, "load_checked_2d", *_PARAMS}
    lines = []
    for used in sorted((ptr_reads | load_reads) - bound):
        expr = next((e for pattern, e in BINDINGS if re.fullmatch(pattern, used)), None)
        if expr is None:
            raise ProbeError(f"{load.ptrs}: the template's name {used!r} is none the probe knows how to bind")
        lines.append(f"{used} = {expr}")
    build, read = load.ptr_line.strip(), load.line.strip()
    lines += [f"{base} = BASE", build, read, f"{base} = OUT", build, f"tl.store({ptrs}, {value})"]
    body = "".join(f"    {ln}\n" for ln in lines)
    return (f"@triton.jit\ndef {name}(BASE, OUT, SEQ: tl.constexpr, DIM: tl.constexpr, SEQ_LEN: tl.constexpr,\n"
            f"        DIM_LEN: tl.constexpr, {', '.join(f'{p}: tl.constexpr' for p in _PARAMS)}):\n{body}")


def probe_module(text: str) -> str:
    """The probe module for a flex_attention.py's text: its helper, one kernel per pointer load, ``PROBES``."""
    loads = pointer_loads(text)
    kernels = {load.ptrs: probe_kernel(f"probe_{i}", load) for i, load in enumerate(loads)}
    table = ", ".join(f"{ptrs!r}: probe_{i}" for i, ptrs in enumerate(kernels))
    return ("import triton\nimport triton.language as tl\n\n" + helper_source(text) + "\n\n"
            + "\n\n".join(kernels.values()) + f"\n\nPROBES = {{{table}}}\n")


def run_probes(path: str) -> dict:
    """In a process with TRITON_INTERPRET=1: {pointers: {case: "ok" or what went wrong}} for the module at ``path``."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("flex_load_probes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = {}
    for ptrs, probe in module.PROBES.items():
        got = out[ptrs] = {}
        for seq, dim, seq_len, dim_len in CASES:
            key = f"{seq}x{dim} block, {seq_len}x{dim_len} valid"
            data = torch.arange(1, seq * dim + 1, dtype=torch.float32).reshape(seq, dim)
            result = torch.full_like(data, -1.0)
            try:
                probe[(1,)](data, result, seq, dim, seq_len, dim_len, seq_len == seq, dim_len == dim)
            except Exception as exc:  # the front end's refusal is the finding
                got[key] = _error(exc)
                continue
            want = data * ((torch.arange(seq)[:, None] < seq_len) & (torch.arange(dim)[None, :] < dim_len))
            wrong = (result != want).nonzero().tolist()
            got[key] = "ok" if not wrong else (f"{len(wrong)} of {seq * dim} elements wrong, the first at "
                                               f"(row, column) {tuple(wrong[0])}")
    return out


def _error(exc: Exception) -> str:
    """``Type: message``; the interpreter's InterpreterError('ValueError("...")') as the error it wraps."""
    name, text = type(exc).__name__, str(exc).strip()
    while (inner := re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", text, re.S)) is not None:
        name, text = inner.group(1), inner.group(3).replace("\\'", "'")
    return f"{name}: {_last_line(text)}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def check(text: str, python: str = sys.executable, timeout: float = 600) -> dict:
    """Every pointer load of a flex_attention.py's ``text``, through the interpreter in ``python``:
    {"loads": {pointers: {case: result}}, "ok": every case of every load right} or {"error": why}."""
    try:
        source = probe_module(text)
    except (ProbeError, edits.CannotApply) as exc:
        return {"error": str(exc), "ok": False}
    with tempfile.TemporaryDirectory(prefix="flex-load-probe-") as d:
        path = Path(d) / "flex_load_probes.py"
        path.write_text(source)
        code = f"import json, sys; from {__name__} import run_probes; print(json.dumps(run_probes(sys.argv[1])))"
        root = str(Path(__file__).resolve().parents[5])  # where this package is imported from
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        proc = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=d)
    try:
        loads = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"the probe exited {proc.returncode}: {_last_line(proc.stderr)}", "ok": False}
    return {"loads": loads, "ok": bool(loads) and all(r == "ok" for got in loads.values() for r in got.values())}


def summary(result: dict) -> str:
    """One line: each load and how many of the cases it got right."""
    if "error" in result:
        return f"not checked: {result['error']}"
    return ", ".join(f"{ptrs.removesuffix('_ptrs')} {sum(r == 'ok' for r in got.values())}/{len(got)}"
                     for ptrs, got in result["loads"].items())
