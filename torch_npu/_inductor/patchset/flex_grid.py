"""Launch grid of the Flex Attention backward Triton template, int- and sympy-exact.

Pure functions, no torch._inductor import: the fix module wraps them in the
installed torch's ``SymbolicGridFn``, which passes ``cdiv`` (``ceildiv`` for
ints, ``CeilDiv`` for sympy). Call sizes are those the template is called with
(``query.get_size() + key.get_size()[1:3]``):

    (batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, meta)

x = cdiv(q_len, BLOCK_M2) * (q_heads // kv_heads) + cdiv(kv_len, BLOCK_N1).
The head ratio is ``//`` on ints and ``FloorDiv`` on sympy values: a plain
``//`` on sympy symbols becomes ``floor(a/b)``, which Inductor's C++ printer
writes as ``std::floor(a*1.0/b)`` (floating point); ``FloorDiv`` prints as
``c10::div_floor_integer``. Both have floor semantics, so every result equals
the original Python grid's.

Validation. Concrete values (int or sympy.Integer) are checked here and
rejected with a ValueError naming the template: kv_heads <= 0, q_heads not a
multiple of kv_heads, a block size that is missing, not an integer, or <= 0.
Symbolic values are checked only as far as sympy can decide them (a negative
or zero kv_heads expression, a remainder that simplifies to a non-zero
integer); the rest is not decidable here and is enforced upstream:
``torch.nn.attention.flex_attention`` rejects ``Hq % Hkv != 0`` (or unequal
heads without ``enable_gqa``), which under Dynamo installs a guard on the
symbolic head counts, and Inductor's symbols are positive integers. Triton
meta (BLOCK_*) is always concrete in Inductor; a symbolic block size is
accepted (the formula stays exact) unless sympy proves it non-positive.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

TEMPLATE = "flex_attention_backward_template"
# Where torch has kept that template, oldest first.
TEMPLATE_MODULES = (
    "torch._inductor.kernel.flex_attention",  # torch 2.7.x
    "torch._inductor.kernel.flex.flex_attention",  # torch 2.8+ (2.13 checked)
)

# The two grid layouts torch has used for this template. LAYOUT_2_7 is what
# torch 2.7.1's kernel reads (program_id(2) = batch * kv_heads flattened);
# LAYOUT_SPLIT is torch >= 2.8's (program_id(1) = batch, program_id(2) = kv head).
LAYOUT_2_7 = "2.7"
LAYOUT_SPLIT = "split"


def _sympy():
    import sympy

    return sympy


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, (int, float, bool)) or x is None:
        return False
    sympy = _sympy()
    return isinstance(x, sympy.Basic) and not isinstance(x, sympy.Integer)


def _concrete_int(x: Any) -> int | None:
    """int value of a concrete integer (python int or sympy.Integer), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if type(x).__module__.startswith("sympy"):
        sympy = _sympy()
        if isinstance(x, sympy.Integer):
            return int(x)
    return None


def _error(msg: str) -> ValueError:
    return ValueError(f"{TEMPLATE} grid: {msg}")


def head_ratio(q_heads: Any, kv_heads: Any) -> Any:
    """``q_heads // kv_heads``: int for ints, ``FloorDiv`` for sympy values."""
    q, kv = _concrete_int(q_heads), _concrete_int(kv_heads)
    if kv is not None and kv <= 0:
        raise _error(f"kv_heads must be positive, got kv_heads={kv} (q_heads={q_heads})")
    if q is not None and q < 0:
        raise _error(f"q_heads must be non-negative, got q_heads={q} (kv_heads={kv_heads})")
    if q is not None and kv is not None:
        if q % kv:
            raise _error(
                f"q_heads must be a multiple of kv_heads, got q_heads={q}, kv_heads={kv} "
                f"(remainder {q % kv})"
            )
        if isinstance(q_heads, int) and isinstance(kv_heads, int):
            return q // kv
        return _sympy().Integer(q // kv)
    for name, value in (("q_heads", q_heads), ("kv_heads", kv_heads)):
        if not _is_symbolic(value) and _concrete_int(value) is None:
            raise _error(f"{name} must be an integer or a sympy expression, got {value!r}")
    sympy = _sympy()
    from torch.utils._sympy.functions import FloorDiv

    if getattr(kv_heads, "is_positive", None) is False:
        raise _error(f"kv_heads must be positive, got kv_heads={kv_heads} (q_heads={q_heads})")
    rem = sympy.Mod(q_heads, kv_heads)
    if isinstance(rem, sympy.Integer) and rem != 0:
        raise _error(f"q_heads must be a multiple of kv_heads, got q_heads={q_heads}, kv_heads={kv_heads}")
    return FloorDiv(q_heads, kv_heads)


def block_size(meta: Mapping[str, Any], key: str) -> Any:
    """``meta[key]`` checked to be a positive integer (or a sympy expression
    not provably non-positive)."""
    try:
        value = meta[key]
    except (KeyError, TypeError):
        raise _error(f"meta has no {key} (keys: {sorted(meta) if isinstance(meta, Mapping) else meta!r})") from None
    concrete = _concrete_int(value)
    if concrete is not None:
        if concrete <= 0:
            raise _error(f"{key} must be positive, got {key}={concrete}")
        return value
    if _is_symbolic(value):
        if getattr(value, "is_positive", None) is False:
            raise _error(f"{key} must be positive, got {key}={value}")
        return value
    raise _error(f"{key} must be an integer, got {key}={value!r}")


def _x_blocks(q_heads, q_len, kv_heads, kv_len, meta, cdiv):
    block_m2 = block_size(meta, "BLOCK_M2")
    block_n1 = block_size(meta, "BLOCK_N1")
    ratio = head_ratio(q_heads, kv_heads)
    return cdiv(q_len, block_m2) * ratio + cdiv(kv_len, block_n1)


def backward_grid(batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, meta, *, cdiv):
    """torch 2.7.1's layout: (x blocks, 1, batch * kv_heads)."""
    return (_x_blocks(q_heads, q_len, kv_heads, kv_len, meta, cdiv), 1, batch * kv_heads)


def backward_grid_split(batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, meta, *, cdiv):
    """torch >= 2.8's layout: (x blocks, batch, kv_heads)."""
    return (_x_blocks(q_heads, q_len, kv_heads, kv_len, meta, cdiv), batch, kv_heads)


GRIDS: dict[str, Callable[..., tuple]] = {LAYOUT_2_7: backward_grid, LAYOUT_SPLIT: backward_grid_split}

# Integer call sizes to compare a grid's behaviour with ours (GQA ratios,
# lengths that are not block multiples, batch != kv_heads so the layouts differ).
SAMPLE_CALLS: tuple[tuple, ...] = (
    (2, 8, 1000, 64, 2, 777, {"BLOCK_M2": 64, "BLOCK_N1": 32}),
    (3, 4, 128, 128, 4, 129, {"BLOCK_M2": 32, "BLOCK_N1": 128}),
    (1, 12, 17, 16, 3, 4096, {"BLOCK_M2": 16, "BLOCK_N1": 64}),
    (5, 2, 1, 64, 1, 1, {"BLOCK_M2": 128, "BLOCK_N1": 16}),
)


def int_cdiv(a: int, b: int) -> int:
    return -(a // -b)


def matching_layout(grid: Callable[..., tuple]) -> str | None:
    """Which of our layouts ``grid`` (called with ints) computes, or None.

    Exceptions from ``grid`` propagate (the caller decides what they mean)."""
    found = []
    for layout, ours in GRIDS.items():
        if all(
            tuple(int(v) for v in grid(*args[:-1], dict(args[-1]))) == ours(*args[:-1], dict(args[-1]), cdiv=int_cdiv)
            for args in SAMPLE_CALLS
        ):
            found.append(layout)
    return found[0] if len(found) == 1 else None
