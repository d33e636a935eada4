"""The masked loads of torch_npu's Flex Attention templates' text (the forward's block-pointer loads, the
backward's 2-D loads): which mask the wrong axis, and the text with those loads corrected. Pure functions over
text (no torch import).

The backward's helper ``load_checked_2d(ptr, offs_m, offs_n, stride_m, stride_n, IS_DIVISIBLE_M, IS_DIVISIBLE_N,
M_LEN, N_DIM)`` masks rows ``offs_m < M_LEN`` (unless ``IS_DIVISIBLE_M``) and columns ``offs_n < N_DIM`` (unless
``IS_DIVISIBLE_N``), as ``offs_m[:, None]`` and ``offs_n[None, :]``. Called with strides it builds the pointers
from the same offsets, so its mask always fits them. Called with ``None`` strides it loads pointers built
elsewhere, and its mask fits them only when ``offs_m`` is the offset those pointers vary along their rows.

torch's backward template lays the transposed operands ``kT``, ``vT``, ``qT`` out ``[D, N]`` and loads them with
the head-dim offsets first. torch_npu 2.7.1.post4 .. post10 and 2.9.0.post9 lay the same pointers out ``[N, D]``
(the lines marked ``# pta``), transpose after the load, and kept torch's arguments: the mask is built
``[D, 1]`` / ``[1, N]`` for ``[N, D]`` pointers. Triton rejects that when the two sizes differ and, where they
are equal (a 16-wide block over a 16-wide head), masks the wrong axis. :func:`corrected` swaps each such load's
row and column arguments (offsets, flags, bounds: the three pairs move together).

The forward's helper ``load_checked_block(block_ptr, IS_DIVISIBLE, SAFE_HEAD_DIM)`` bounds-checks the block's
dimension 0 unless its second argument is true and dimension 1 unless its third is: it is written for
``[sequence, head]`` blocks, so a ``[head, sequence]`` block (``shape=(QK_HEAD_DIM, KV_LEN)``) must be passed
``SAFE_HEAD_DIM, IS_DIVISIBLE``, as torch's own forward does for its ``K_block_ptr``. The same releases kept the
``[head, sequence]`` ``K_block_ptr`` but pass it ``IS_DIVISIBLE, SAFE_HEAD_DIM``: the sequence is left
unchecked where it is ragged (the last block reads past the end of K) and the head where it is not a power of
two (its padding rows read the next key's values). :func:`corrected` swaps the two flags.

A load is read from one line of the template (``NAME = load_checked_2d(...)``, ``NAME = load_checked_block(...)``),
its pointers' layout from the statement that assigns them (``NAME = BASE + rows[:, None] * s + cols[None, :] * t``
on one line; ``NAME = tl.make_block_ptr(...)`` over as many lines as its parentheses take, its ``shape=`` saying
which dimension is the head's); the template's Jinja lines are never parsed. Anything else that looks like one of
those lines and cannot be read makes the reading ``unknown``: the caller then refuses to guess.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import re

HELPER = "load_checked_2d"
BLOCK_HELPER = "load_checked_block"
_ARGS = 9  # ptr, offs_m, offs_n, stride_m, stride_n, IS_DIVISIBLE_M, IS_DIVISIBLE_N, M_LEN, N_DIM
#: (offsets, divisibility flag, bound) of the rows, then of the columns: the argument positions that move together.
_ROWS, _COLS = (1, 5, 7), (2, 6, 8)
_HEAD_FLAG = "SAFE_HEAD_DIM"
_SEQ_FLAG = "IS_DIVISIBLE"
#: load_checked_block(block_ptr, <skips dim 0's check>, <skips dim 1's check>): the flags a block's layout wants.
_BLOCK_FLAGS = {"head-first": (_HEAD_FLAG, _SEQ_FLAG), "sequence-first": (_SEQ_FLAG, _HEAD_FLAG)}

# Shapes of a whole template's text.
SWAPPED = "swapped"  # at least one load masks the axes of its pointers' transpose (the bug)
CONSISTENT = "consistent"  # every pointer-only load is masked along its pointers' own axes
NO_POINTER_LOADS = "no-pointer-loads"  # no load of pointers built elsewhere (a rewritten template)
UNKNOWN = "unknown"

_LOAD_LINE = {helper: re.compile(rf"^\s*\w+\s*=\s*{helper}\s*\(") for helper in (HELPER, BLOCK_HELPER)}
_ASSIGN_LINE = re.compile(r"^\s*(\w+)\s*=[^=]")
_BLOCK_PTR_LINE = re.compile(r"^\s*\w+\s*=\s*tl\.make_block_ptr\s*\(")
_MAX_STATEMENT_LINES = 40  # a make_block_ptr call not closed within this many lines is not read


class UnrecognisedTemplate(ValueError):
    """The text is not the shape :func:`corrected` edits; the message says what differs."""


@dataclasses.dataclass(frozen=True)
class Load:
    """One ``NAME = load_checked_2d(...)`` or ``NAME = load_checked_block(...)`` line of the template."""
    line: int  # 1-based line number in the template text
    target: str
    args: tuple[str, ...]
    state: str  # CONSISTENT | SWAPPED | UNKNOWN
    why: str
    helper: str = HELPER

    @property
    def pointer(self) -> str:
        return self.args[0]


@dataclasses.dataclass(frozen=True)
class Reading:
    shape: str  # SWAPPED | CONSISTENT | NO_POINTER_LOADS | UNKNOWN
    detail: str
    loads: tuple[Load, ...] = ()

    @property
    def swapped(self) -> tuple[Load, ...]:
        return tuple(ld for ld in self.loads if ld.state == SWAPPED)


def _code_lines(text: str):
    """(1-based number, line) of each line that is not a comment."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def _statement(line: str):
    """The one Python statement on ``line``, or None when it is not one (a call over several lines)."""
    try:
        body = ast.parse(line.strip()).body
    except SyntaxError:
        return None
    return body[0] if len(body) == 1 else None


def _axis(term) -> tuple[str, str] | None:
    """``("rows"|"cols", offsets)`` for ``offs[:, None] * stride`` (or the subscript alone), else None."""
    if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult):
        found = [a for a in (_axis(term.left), _axis(term.right)) if a is not None]
        return found[0] if len(found) == 1 else None
    if not (isinstance(term, ast.Subscript) and isinstance(term.value, ast.Name)
            and isinstance(term.slice, ast.Tuple) and len(term.slice.elts) == 2):
        return None
    first, second = term.slice.elts

    def is_none(e):
        return isinstance(e, ast.Constant) and e.value is None

    if isinstance(first, ast.Slice) and is_none(second):
        return "rows", term.value.id
    if is_none(first) and isinstance(second, ast.Slice):
        return "cols", term.value.id
    return None


def _terms(expr) -> list:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _terms(expr.left) + _terms(expr.right)
    return [expr]


def pointer_layouts(text: str) -> dict[str, tuple[str, str] | None]:
    """{pointer name: (row offsets, column offsets)} for every 2-D pointer block the text assigns; None for a
    name assigned twice with different layouts."""
    layouts: dict[str, tuple[str, str] | None] = {}
    for _, line in _code_lines(text):
        if not _ASSIGN_LINE.match(line) or "[" not in line:
            continue
        stmt = _statement(line)
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        axes = [a for a in map(_axis, _terms(stmt.value)) if a is not None]
        rows = [o for kind, o in axes if kind == "rows"]
        cols = [o for kind, o in axes if kind == "cols"]
        if len(rows) != 1 or len(cols) != 1:
            continue
        name = stmt.targets[0].id
        layout = (rows[0], cols[0])
        layouts[name] = layout if layouts.get(name, layout) == layout else None
    return layouts


def make_block_ptr_statements(text: str):
    """(1-based line, statement or None) of each ``NAME = tl.make_block_ptr(...)``: the lines from that one to
    where its parentheses close, parsed as one statement; None when they never do."""
    lines = text.splitlines()
    for start, line in _code_lines(text):
        if not _BLOCK_PTR_LINE.match(line):
            continue
        stmt = None
        for end in range(start, min(start + _MAX_STATEMENT_LINES, len(lines)) + 1):
            stmt = _statement("\n".join(ln.strip() for ln in lines[start - 1:end]))
            if stmt is not None:
                break
        yield start, stmt


def _block_layout(stmt) -> tuple[str, str, str] | None:
    """(``"head-first"|"sequence-first"``, shape's first, shape's second) of a make_block_ptr assignment: the
    head dimension is the shape element naming a ``*HEAD_DIM`` and the ``block_shape`` element at the same place
    names a ``*HEAD_DIM_ROUNDED``; None when the statement does not say so plainly."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    keywords = {k.arg: k.value for k in call.keywords}
    # tl.make_block_ptr(base, shape, strides, offsets, block_shape, order)
    shape = keywords.get("shape", call.args[1] if len(call.args) > 1 else None)
    block = keywords.get("block_shape", call.args[4] if len(call.args) > 4 else None)
    pairs = []
    for expr in (shape, block):
        if not (isinstance(expr, (ast.Tuple, ast.List)) and len(expr.elts) == 2):
            return None
        pairs.append(tuple(ast.unparse(e) for e in expr.elts))
    (first, second), (block_first, block_second) = pairs
    heads = [d.endswith("HEAD_DIM") for d in (first, second)]
    rounded = [d.endswith("HEAD_DIM_ROUNDED") for d in (block_first, block_second)]
    if heads != rounded or sum(heads) != 1:
        return None
    return ("head-first" if heads[0] else "sequence-first"), first, second


def block_layouts(text: str) -> dict[str, tuple[str, str, str] | None]:
    """{block pointer name: ``_block_layout``} for every ``tl.make_block_ptr`` the text assigns; None for a
    name assigned twice with different shapes, or once in a form not read."""
    layouts: dict[str, tuple[str, str, str] | None] = {}
    lines = text.splitlines()
    for line, stmt in make_block_ptr_statements(text):
        name = re.match(r"\s*(\w+)", lines[line - 1]).group(1)
        layout = _block_layout(stmt)
        layouts[name] = layout if layouts.get(name, layout) == layout else None
    return layouts


def head_offsets(text: str) -> set[str]:
    """Names assigned ``tl.arange(0, <...>HEAD_DIM_ROUNDED)``: the offsets along a head dimension."""
    names = set()
    for _, line in _code_lines(text):
        stmt = _statement(line) if "arange" in line else None
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call) and stmt.value.args
                and ast.unparse(stmt.value.args[-1]).endswith("HEAD_DIM_ROUNDED")):
            names.add(stmt.targets[0].id)
    return names


def _coherent(args: tuple[str, ...], positions: tuple[int, int, int], heads: set[str]) -> bool:
    """Whether an axis' (offsets, flag, bound) all speak of one kind of axis: a head dimension (its offsets
    span ``*HEAD_DIM_ROUNDED``, its flag is SAFE_HEAD_DIM, its bound a ``*HEAD_DIM``) or a sequence."""
    offs, flag, bound = (args[i] for i in positions)
    kinds = {offs in heads, flag == _HEAD_FLAG, bound.endswith("HEAD_DIM")}
    return len(kinds) == 1


def _call(line: str, helper: str, count: int):
    """(target, argument texts) of ``NAME = helper(<count positional arguments>)`` on one line, else None."""
    stmt = _statement(line)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and not stmt.value.keywords and len(stmt.value.args) == count):
        return None
    return stmt.targets[0].id, tuple(ast.unparse(a) for a in stmt.value.args)


def _read_load(at: int, line: str, layouts, heads: set[str], shown: int) -> Load | None:
    """The load on ``line`` (line ``at`` of the text, named line ``shown``); None when it passes strides."""
    call = _call(line, HELPER, _ARGS)
    if call is None:
        return Load(at, "?", (), UNKNOWN, f"line {shown} calls {HELPER} in a form not read here: {line.strip()!r}")
    target, args = call
    if args[3:5] != ("None", "None"):
        return None  # strides given: the helper builds its pointers from the same offsets
    if not all(_coherent(args, axis, heads) for axis in (_ROWS, _COLS)):
        return Load(at, target, args, UNKNOWN, f"line {shown}: {target}'s offsets, flags and bounds do not pair "
                                               f"up as one head and one sequence axis: {', '.join(args)}")
    layout = layouts.get(args[0])
    if layout is None:
        return Load(at, target, args, UNKNOWN, f"line {shown}: the layout of {args[0]}, which {target} loads, is "
                                               "not assigned once in the text")
    mask = (args[_ROWS[0]], args[_COLS[0]])
    if mask == layout:
        return Load(at, target, args, CONSISTENT, f"{target} masks [{layout[0]}, {layout[1]}] as laid out")
    if mask == layout[::-1]:
        return Load(at, target, args, SWAPPED, f"{target} (line {shown}) masks [{mask[0]}, {mask[1]}] over "
                                               f"pointers laid out [{layout[0]}, {layout[1]}]")
    return Load(at, target, args, UNKNOWN, f"line {shown}: {target} masks [{mask[0]}, {mask[1]}] over {args[0]} "
                                           f"laid out [{layout[0]}, {layout[1]}]")


def _read_block_load(at: int, line: str, layouts, shown: int) -> Load:
    """The ``load_checked_block`` on ``line`` (line ``at`` of the text, named line ``shown``)."""
    call = _call(line, BLOCK_HELPER, 3)
    if call is None:
        return Load(at, "?", (), UNKNOWN, f"line {shown} calls {BLOCK_HELPER} in a form not read here: "
                                          f"{line.strip()!r}", BLOCK_HELPER)
    target, args = call
    if sorted(args[1:]) != sorted((_HEAD_FLAG, _SEQ_FLAG)):
        return Load(at, target, args, UNKNOWN, f"line {shown}: {target}'s flags are not {_SEQ_FLAG} and "
                                               f"{_HEAD_FLAG}: {', '.join(args)}", BLOCK_HELPER)
    layout = layouts.get(args[0])
    if layout is None:
        return Load(at, target, args, UNKNOWN, f"line {shown}: the shape of block pointer {args[0]}, which "
                                               f"{target} loads, is not made once in the text", BLOCK_HELPER)
    order, first, second = layout
    flags = args[1:]
    if flags == _BLOCK_FLAGS[order]:
        return Load(at, target, args, CONSISTENT, f"{target} checks ({first}, {second}) as shaped", BLOCK_HELPER)
    return Load(at, target, args, SWAPPED, f"{target} (line {shown}) passes ({', '.join(flags)}), the flags of the "
                                           f"transposed block, for a block pointer shaped ({first}, {second})",
                BLOCK_HELPER)


def _shown(number: int, first_line) -> int:
    """The module's line for the text's line ``number``: ``first_line`` is the module's line of the text's
    first, or a line map (pairs of the text's line where a piece starts and the module's line that holds it)."""
    if isinstance(first_line, int):
        return number + first_line - 1
    start, at = max((s, m) for s, m in first_line if s <= number)
    return at + number - start


@functools.lru_cache(maxsize=32)  # the status table reads the same text again on every call
def read(text: str, first_line: int | tuple[tuple[int, int], ...] = 1) -> Reading:
    """The shape of a template's text (see the module's constants), with each load read. Lines are named as
    numbered in the module the text comes from (``first_line``: see :func:`_shown`); ``Load.line`` is the
    text's own."""
    layouts, heads, blocks = pointer_layouts(text), head_offsets(text), block_layouts(text)
    loads = []
    for number, line in _code_lines(text):
        shown = _shown(number, first_line)
        for helper in (HELPER, BLOCK_HELPER):
            if helper + "(" not in line or line.lstrip().startswith(("def ", "@")):
                continue
            if not _LOAD_LINE[helper].match(line):
                if re.search(rf"\b{helper}\(", line):
                    return Reading(UNKNOWN, f"line {shown} calls {helper} in a form not read here: {line.strip()!r}")
                continue
            if helper == HELPER:
                load = _read_load(number, line, layouts, heads, shown)
            else:
                load = _read_block_load(number, line, blocks, shown)
            if load is not None:
                loads.append(load)
    unknown = [ld for ld in loads if ld.state == UNKNOWN]
    if unknown:
        return Reading(UNKNOWN, "; ".join(ld.why for ld in unknown), tuple(loads))
    swapped = [ld for ld in loads if ld.state == SWAPPED]
    if swapped:
        return Reading(SWAPPED, "; ".join(ld.why for ld in swapped), tuple(loads))
    if loads:
        helpers = " / ".join(dict.fromkeys(ld.helper for ld in loads))
        return Reading(CONSISTENT, f"its {len(loads)} {helpers} load(s) of pointers built elsewhere "
                                   f"({', '.join(ld.target for ld in loads)}) mask their pointers' own axes",
                       tuple(loads))
    return Reading(NO_POINTER_LOADS, f"it has no {HELPER} or {BLOCK_HELPER} load of pointers built elsewhere")


def _swap(load: Load) -> tuple[str, ...]:
    if load.helper == BLOCK_HELPER:
        return (load.args[0], load.args[2], load.args[1])
    out = list(load.args)
    for r, c in zip(_ROWS, _COLS):
        out[r], out[c] = load.args[c], load.args[r]
    return tuple(out)


def corrected(text: str) -> str:
    """``text`` with every load that masks the axes of its pointers' transpose given the arguments of its
    pointers' own layout; the rest of the text unchanged, byte for byte. Raises :class:`UnrecognisedTemplate`
    (saying what differs) when there is nothing of that shape to correct."""
    reading = read(text)
    if reading.shape != SWAPPED:
        raise UnrecognisedTemplate(f"no load to correct: the text is {reading.shape} ({reading.detail})")
    lines = text.splitlines(keepends=True)
    for load in reading.swapped:
        line = lines[load.line - 1]
        indent = line[: len(line) - len(line.lstrip())]
        stmt = _statement(line)
        rest = line.strip()[stmt.end_col_offset:]  # what follows the call (a comment), kept
        ending = line[len(line.rstrip("\r\n")):]
        lines[load.line - 1] = f"{indent}{load.target} = {load.helper}({', '.join(_swap(load))}){rest}{ending}"
    out = "".join(lines)
    after = read(out)
    if after.shape != CONSISTENT:  # the edit must leave every load fitting its pointers
        raise UnrecognisedTemplate(f"corrected text is {after.shape}: {after.detail}")
    return out


# ---- the backward's index bounds ---------------------------------------------------------------------------------
#: ``NAME = get_bounded_indices(offs[:, None] or offs[None, :], X_LEN if CHECK_BLOCK_BOUNDARY else None)``: a
#: backward block's indices of the other operand, bounded only at the peeled last block of a loop.
_UNBOUNDED = re.compile(r"^(\s*\w+\s*=\s*get_bounded_indices\(\s*\w+\[(?::, None|None, :)\],\s*)(\w+_LEN)"
                        r" if CHECK_BLOCK_BOUNDARY else None\)", re.M)
_BOUND = r"\1\2 if (not IS_DIVISIBLE or CHECK_BLOCK_BOUNDARY) else None)"


def unbounded_indices(text: str) -> list[str]:
    """The backward's index lines that bound a sequence index only at the boundary block (see :func:`bounded`)."""
    return [m.group(0).strip() for m in _UNBOUNDED.finditer(text)]


def bounded(text: str) -> str:
    """``text`` with every :func:`unbounded_indices` line bounding its index whenever ``IS_DIVISIBLE`` is false too,
    as its sibling line in the same block function does for the block's own rows (and as torch 2.14's template does
    for both). A backward loop runs every sub-block of its block list up to ``cdiv(length, BLOCK)`` sub-blocks from
    the list's start, and checks only the last: where the list ends with the ragged block, the sub-blocks before
    the last run past the length, and score_mod / mask_mod index captured tensors (a document mask's ids) past
    their end. Bounded (``% length``), those lanes read valid rows; their loads of q, k, v, do are masked to zero,
    so the results are the same."""
    return _UNBOUNDED.sub(_BOUND, text)


def fixed(text: str) -> str:
    """What the patch installs: :func:`corrected`, then :func:`bounded`."""
    return bounded(corrected(text))


# ---- where a template's text is: a module's source ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Source:
    """Where a module-level template gets its text from.

    ``kind`` "inline": ``text`` is the evaluated ``source=`` of its constructor call (at line ``line``);
    "imported": it is another module's template, ``origins`` the ``(module, name)`` it may come from (each
    branch of a ``try`` import); "unknown": ``detail`` says what was found."""
    kind: str
    text: str = ""
    line: int = 0
    first_line: int = 1  # the module's line that holds the text's first line (where the text opens with a literal)
    #: (the text's line where each of its literals starts, the module's line of that literal): :func:`read`'s
    #: ``first_line`` for a text spliced from several module-level strings.
    line_map: tuple[tuple[int, int], ...] = ()
    origins: tuple[tuple[str, str], ...] = ()
    detail: str = ""


def _top_level(body):
    """Module-level statements, those inside top-level ``try`` / ``if`` blocks included, in order."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.Try, ast.If)):
                yield from _top_level(getattr(node, block, []))
        for handler in getattr(node, "handlers", []) if isinstance(node, ast.Try) else []:
            yield from _top_level(handler.body)


def _pieces(expr, strings: dict[str, list]) -> list[tuple[str, int]] | None:
    """The literals, (value, module line), that a string expression of literals, module-level string names and
    ``+`` joins; None for any other expression."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [(expr.value, expr.lineno)]
    if isinstance(expr, ast.Name):
        return strings.get(expr.id)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        left, right = _pieces(expr.left, strings), _pieces(expr.right, strings)
        return None if left is None or right is None else left + right
    return None


def _line_map(pieces: list[tuple[str, int]]) -> tuple[tuple[int, int], ...]:
    out, text_line = [], 1
    for value, module_line in pieces:
        out.append((text_line, module_line))
        text_line += value.count("\n")
    return tuple(out)


@functools.lru_cache(maxsize=32)
def template_source(module_text: str, name: str) -> Source:
    """Where the module-level template ``name`` of a module (its source text) gets its text."""
    try:
        tree = ast.parse(module_text)
    except SyntaxError as exc:
        return Source("unknown", detail=f"the module does not parse: {exc}")
    strings: dict[str, list[tuple[str, int]]] = {}
    imports: dict[str, list[tuple[str, str]]] = {}
    assigned = None
    for node in _top_level(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imports.setdefault(alias.asname or alias.name, []).append((node.module, alias.name))
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        target = node.targets[0].id
        pieces = _pieces(node.value, strings)
        if pieces is not None:
            strings[target] = pieces
        elif target == name:
            assigned = node  # the last assignment wins, as when the module runs
    if assigned is None:
        if name in imports:
            return Source("imported", origins=tuple(imports[name]))
        return Source("unknown", detail=f"no module-level assignment or import of {name}")
    call = assigned.value
    if not isinstance(call, ast.Call):
        return Source("unknown", line=assigned.lineno,
                      detail=f"{name} is assigned {ast.unparse(call)[:80]!r} (line {assigned.lineno}), not a call")
    source = next((k.value for k in call.keywords if k.arg == "source"), None)
    if source is None and len(call.args) >= 3:  # TritonTemplate(name, grid, source, ...)
        source = call.args[2]
    if source is not None:
        pieces = _pieces(source, strings)
        if pieces is None:
            return Source("unknown", line=assigned.lineno, detail=f"{name}'s source (line {assigned.lineno}) is not "
                                                                  "a concatenation of module-level strings")
        first = source
        while isinstance(first, ast.BinOp):
            first = first.left
        return Source("inline", text="".join(value for value, _ in pieces), line=assigned.lineno,
                      first_line=first.lineno if isinstance(first, ast.Constant) else 1, line_map=_line_map(pieces))
    # A wrapper of another template (``_wrap_upstream_template(_upstream_...)``): where that one comes from.
    if len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Name):
        inner = template_source(module_text, call.args[0].id) if call.args[0].id != name else None
        if inner is not None and inner.kind == "imported":
            return dataclasses.replace(inner, line=assigned.lineno,
                                       detail=f"{name} = {ast.unparse(call)} (line {assigned.lineno})")
    return Source("unknown", line=assigned.lineno,
                  detail=f"{name} = {ast.unparse(call)[:100]} (line {assigned.lineno}) has no source= this reads")
