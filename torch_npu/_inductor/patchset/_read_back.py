"""Reading a generated C++ wrapper back: its launchers, and what each launch does with its memory.

What a launch's memory looks like is what ``launch_codegen.resource_code`` writes: a
``LaunchMemory`` taken before the ``launch_call`` lambda, the block handed
back right after ``launchKernel``; nothing inside a lambda may allocate. The selftest reads Inductor's
real wrappers with it, and the tooling's sample launchers too.
"""
from __future__ import annotations

import re

_CALL_DEF = re.compile(r"\bvoid\s+call_(\w+)\s*\(")
#: What a launch's memory looks like in the generated code (launch_codegen.resource_code).
_LAUNCH_MEMORY = re.compile(r"\btorch_npu::inductor::LaunchMemory\s+(\w+)\s*[({]")
_LAUNCH_KERNEL = re.compile(r"\blaunchKernel\s*\(")
#: Nothing inside a launch lambda may allocate: it runs on torch_npu's task-queue thread (issue 22).
_ALLOCATION = re.compile(r"\b(allocate_workspace|unsafe_empty_workspace|raw_alloc\w*|LaunchMemory|aclrtMalloc\w*)\b")
_NULL_SYNC_POINTER = re.compile(r"\b(sync_block_lock|workspace_addr)\s*=\s*(?:NULL|nullptr|0)\s*;")


def _masked(source: str) -> str:
    """``source`` with comments and string / character literals blanked (same length, newlines kept),
    so that braces, parentheses and names are matched in code only."""
    out, i, n = list(source), 0, len(source)

    def blank(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _closing(code: str, opening: int) -> int:
    """Index of the bracket closing the one at ``opening`` in masked ``code`` (-1: unbalanced)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    want, depth = pairs[code[opening]], 0
    for j in range(opening, len(code)):
        if code[j] == code[opening]:
            depth += 1
        elif code[j] == want:
            depth -= 1
            if depth == 0:
                return j
    return -1


def launches_in(source: str) -> dict[str, str]:
    """``{kernel: text of its call_<kernel> function}`` in a generated C++ wrapper."""
    code = _masked(source)
    defs = list(_CALL_DEF.finditer(code))
    out = {}
    for i, m in enumerate(defs):
        end = defs[i + 1].start() if i + 1 < len(defs) else len(source)
        params_end = _closing(code, m.end() - 1)
        brace = code.find("{", params_end) if params_end >= 0 else -1
        close = _closing(code, brace) if 0 <= brace < end else -1
        out[m.group(1)] = source[m.start():(close + 1 if close >= 0 else end)]
    return out


def _lambda_span(code: str, start: int, stop: int) -> tuple[int, int] | None:
    """(``[`` .. closing ``}``) of the lambda whose text starts at or after ``start`` (before ``stop``)."""
    bracket = code.find("[", start, stop)
    captures_end = _closing(code, bracket) if bracket >= 0 else -1
    if captures_end < 0:
        return None
    brace = code.find("{", captures_end, stop)
    close = _closing(code, brace) if brace >= 0 else -1
    return (bracket, close + 1) if close >= 0 else None


def read_back(body: str, needs_memory: bool | None) -> dict:
    """Read one ``call_<k>`` function's launches back (issue 22's shape).

    ``needs_memory`` (the kernel's metadata asks for a workspace or locks; None: unknown): each
    ``launchKernel(<lambda>, ...)`` must then be preceded, after the previous launch, by exactly one
    ``torch_npu::inductor::LaunchMemory <m>(...)`` outside the lambda, and followed at once by
    ``<m>.handed();`` (issue 39: the block is the thread's again, kept for its next launch on the stream); the
    lambda allocates nothing, never names ``<m>``
    (it copies only the raw pointers) and passes no NULL sync pointer. A launch that needs nothing takes
    and releases nothing.
    Returns ``{"launches", "takes_memory", "problems"}``."""
    code = _masked(body)
    problems: list[str] = []
    calls = list(_LAUNCH_KERNEL.finditer(code))
    if not calls:
        return {"launches": 0, "takes_memory": False, "problems": ["no launchKernel(...) call"]}
    memories = [(m.start(), m.group(1)) for m in _LAUNCH_MEMORY.finditer(code)]
    region, takes = 0, False
    for n, call in enumerate(calls, 1):
        where = f"launch {n}" if len(calls) > 1 else "the launch"
        paren = call.end() - 1
        close = _closing(code, paren)
        semicolon = code.find(";", close) if close >= 0 else -1
        if semicolon < 0:
            problems.append(f"{where}: launchKernel( is not closed")
            break
        first = code[paren + 1:close].split(",")[0].strip()
        if re.fullmatch(r"\w+", first):  # a named lambda, declared before the call
            decl = list(re.finditer(rf"\bauto\s+{first}\s*=\s*(?=\[)", code[region:call.start()]))
            span = _lambda_span(code, region + decl[-1].end(), call.start()) if decl else None
        else:  # the lambda written inside the call
            span = _lambda_span(code, paren + 1, close)
        if span is None:
            problems.append(f"{where}: launchKernel({first}, ...) is not given a lambda of this function")
            region = semicolon + 1
            continue
        lam = code[span[0]:span[1]]
        before = [name for pos, name in memories if region <= pos < span[0]]
        for alloc in sorted({m.group(1) for m in _ALLOCATION.finditer(lam)}):
            problems.append(f"{where}: {alloc} inside the launch lambda (it runs on the task-queue thread)")
        after = code[semicolon + 1:]
        released = re.match(r"\s*(\w+)\s*\.\s*handed\s*\(\s*\)\s*;", after)
        if needs_memory or (needs_memory is None and before):
            if len(before) != 1:
                problems.append(f"{where}: {len(before)} torch_npu::inductor::LaunchMemory before the launch lambda "
                                "(want 1)")
            else:
                owner = before[0]
                takes = True
                if not (released and released.group(1) == owner):
                    problems.append(f"{where}: the statement right after launchKernel(...) is not "
                                    f"{owner}.handed();")
                if re.search(rf"\b{owner}\b", lam):
                    problems.append(f"{where}: the launch lambda names the owning {owner} (it must get only the "
                                    "raw pointers)")
            for m in _NULL_SYNC_POINTER.finditer(lam):
                problems.append(f"{where}: the launch lambda sets {m.group(1)} to a null pointer")
        else:
            if before:
                problems.append(f"{where}: takes LaunchMemory {before} though its kernel needs no workspace or locks")
            if released:
                problems.append(f"{where}: releases {released.group(1)} though its kernel needs no memory")
        region = semicolon + 1
    return {"launches": len(calls), "takes_memory": takes, "problems": problems}
