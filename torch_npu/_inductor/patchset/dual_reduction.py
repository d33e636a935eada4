"""Where a kernel that reduces over two looped axes sets its accumulators and stores its result (pure; the
npu-dual-reduction-accumulator patch, fixes/npu_dual_reduction_accumulator.py, applies it to torch_npu's kernels).

torch_npu 2.7.1.post4 .. post10 write a reduction over two tiled axes as two nested loops, and splice the
accumulators' initialisation and the final reduction and store around the inner loop only::

    for loop_r2 in range(loops_r2):          # outer reduction axis
        r2 = ...
        _tmp4 = tl.full([...], 0, tl.float32)  # reset for every block of r2
        for loop_r3 in range(loops_r3):
            ...  _tmp4 = _tmp4 + ...
        tmp4 = tl.sum(_tmp4, 1)...
        tl.store(out_ptr0 + ..., tmp4, ...)   # each block of r2 overwrites the last

so whenever ``loops_r2 > 1`` the stored value is the last block's alone. :func:`hoist` moves those statements out
of the outer loop: the initialisations before it, the final statements after it, so that the accumulators add up
every block of both axes (a sum, a max, a Welford triple: what they accumulate is associative, elementwise over the
accumulator's lanes, and reduced across lanes only after the loop). It moves only what it can prove independent
of the outer loop (see :func:`hoist`); a kernel of any other shape is returned unchanged, with the reason.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: The loop torch_npu writes over a tiled axis: ``for loop_<axis> in range(loops_<axis>):``.
_LOOP = re.compile(r"loop_(r\d+)")


@dataclass(frozen=True)
class Hoisted:
    source: str  # the kernel module's source, the accumulators out of the outer loop where ``moved``
    moved: int  # statements moved out of outer reduction loops (0: unchanged)
    reason: str  # why, in a few words


def _reduction_loop(node) -> str | None:
    """The axis of ``for loop_rN in range(loops_rN):``, else None."""
    if not (isinstance(node, ast.For) and isinstance(node.target, ast.Name)):
        return None
    m = _LOOP.fullmatch(node.target.id)
    it = node.iter
    if not (m and isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and len(it.args) == 1 and isinstance(it.args[0], ast.Name) and it.args[0].id == f"loops_{m.group(1)}"):
        return None
    return m.group(1)


def _reads(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _writes(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _plan(outer: ast.For) -> tuple[list, list] | str:
    """(statements to move before ``outer``, statements to move after it), or why not.

    The body must read: the outer axis's own indexing (statements that read the loop variable, or what those
    wrote), then statements that do not (the accumulators' initialisation), then the inner reduction loops, then
    the final statements. Those last may read only what is defined outside ``outer``, the accumulators the inner
    loops updated, and what earlier final statements wrote; anything between two inner loops refuses."""
    body = outer.body
    inner = [i for i, s in enumerate(body) if _reduction_loop(s)]
    if not inner:
        return "no inner reduction loop"
    first, last = inner[0], inner[-1]
    if any(not _reduction_loop(s) for s in body[first:last + 1]):
        return "statements between two inner reduction loops"
    varying = {outer.target.id}
    before = []
    for s in body[:first]:
        if _reads(s) & varying:
            varying |= _writes(s)
        else:
            before.append(s)
    stay = set().union(*(_writes(s) for s in body if s not in before))
    if any(_reads(s) & (varying | stay) for s in before):  # what the loop computes, or carries round
        return "an initialisation reads what the outer loop computes"
    accumulators = set().union(*(_writes(s) for s in before)) if before else set()
    inside = set().union(*(_writes(s) for s in body[:last + 1])) - accumulators
    after, written = body[last + 1:], set()
    for s in after:
        if _reads(s) & inside - written:
            return f"a final statement reads {sorted(_reads(s) & inside - written)[0]} of the outer loop"
        written |= _writes(s)
    if not before and not after:
        return "nothing around the inner loops"
    return before, after


def _outer_loops(tree: ast.AST) -> list[ast.For]:
    """Reduction loops that hold another, outermost first, each not inside one already found."""
    found = []

    def visit(node, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            is_outer = bool(_reduction_loop(child)) and any(_reduction_loop(s) for s in child.body)
            if is_outer and not inside:
                found.append(child)
            visit(child, inside or is_outer)

    visit(tree, False)
    return found


def _dedented(lines: list[str], stmt: ast.stmt, step: int) -> list[str]:
    """``stmt``'s lines, one level (``step`` columns) out."""
    return [line[step:] if line[:step].strip() == "" else line for line in lines[stmt.lineno - 1:stmt.end_lineno]]


def hoist(source: str) -> Hoisted:
    """``source`` (a kernel module torch_npu generated) with each outer reduction loop's accumulators initialised
    before it and its final statements after it, or unchanged with the reason."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return Hoisted(source, 0, f"not Python: {exc.msg}")
    loops = _outer_loops(tree)
    if not loops:
        return Hoisted(source, 0, "no reduction loop holds another")
    lines = source.splitlines(keepends=True)
    edits = []  # (first line, last line (1-based, inclusive), replacement lines); applied bottom-up
    moved = 0
    for outer in loops:
        plan = _plan(outer)
        if isinstance(plan, str):
            return Hoisted(source, 0, f"line {outer.lineno}: {plan}")
        before, after = plan
        step = outer.body[0].col_offset - outer.col_offset
        head = [line for s in before for line in _dedented(lines, s, step)]
        tail = [line for s in after for line in _dedented(lines, s, step)]
        gone = {n for s in (*before, *after) for n in range(s.lineno, s.end_lineno + 1)}
        loop = [lines[n - 1] for n in range(outer.lineno, outer.end_lineno + 1) if n not in gone]
        edits.append((outer.lineno, outer.end_lineno, head + loop + tail))
        moved += len(before) + len(after)
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start - 1:end] = replacement
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError as exc:  # never expected: the moved statements are whole, at the loop's own indentation
        return Hoisted(source, 0, f"the result would not parse: {exc.msg}")
    return Hoisted(out, moved, f"{moved} statements out of {len(loops)} outer reduction loops")
