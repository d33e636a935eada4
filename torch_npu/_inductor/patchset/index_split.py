"""Whether an index's ``FloorDiv`` / ``ModularIndexing`` splits over its terms when sizes are symbolic (pure).

torch_npu's NPU codegen (2.7.1.post6 .. post11, 2.9.0.post9: ``codegen/ir.py``) rewrites every index into a sum
of per-axis terms before it tiles a kernel ("linearization"): ``FloorDiv(a + b, d)`` into ``a//d + b//d`` and
``ModularIndexing(a + b, d, m)`` into one ``ModularIndexing`` per term. Its analysis of whether that is exact is
written for integer divisors and moduli: with a symbolic modulus it calls ``math.gcd`` on a sympy expression
(TypeError), and it calls a sub-expression made of sizes only, such as a split reduction's block size
``(s0*s1 + 5)//6``, unsplittable, then splits it into ``s0*s1//6``, which is wrong whenever ``s0*s1 % 6 > 1``.

Here, with ``lengths`` (each iteration variable -> its length: it takes 0 .. length-1) and ``proves`` (a sound
prover: True only if the relation holds for every value of the size symbols), exactly:

* an expression without an iteration variable is the same at every program and lane: nothing to split, and it
  is kept whole;
* ``FloorDiv(sum t_i, d)``, each ``t_i = c_i*v_i`` (or a size-only constant) with ``c_i >= 0``, equals
  ``sum c_i/d * v_i + t_k//d`` when every term but at most one (``t_k``) is a multiple of ``d``;
* ``ModularIndexing(sum t_i, d, m)`` (``(sum t_i // d) % m``) equals that same sum when, in addition,
  ``sum c_i*(length_i - 1) < m*d``: the floors then add up to less than ``m``, so the modulus never wraps.

Anything else is refused, with the reason: the caller keeps torch_npu's own verdict for it ("Can not split
expression", or SIMT-only kernels on Ascend950). A refusal is never a guess.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

#: A sound prover: True only if the relation holds for every value the size symbols may take.
Proves = Callable[[sympy.Basic], bool]


@dataclasses.dataclass(frozen=True)
class Split:
    ok: bool
    reason: str
    form: sympy.Expr | None = None  # equal to the expression at every value in range (when ok)


def sympy_proves(relation: sympy.Basic) -> bool:
    """The prover without a graph: sympy's evaluation, then torch's value-range bound, under the symbols'
    assumptions only (Inductor's sizes are positive integers). Inductor's own prover knows more (each size's
    range): the fix module uses that one while a graph is being compiled."""
    if relation in (sympy.true, sympy.false):
        return relation is sympy.true
    from torch.utils._sympy.value_ranges import bound_sympy

    bound = bound_sympy(relation)
    return bool(bound.is_singleton() and bound.lower is sympy.true)


def launch_constant(expr: sympy.Expr, lengths: Mapping[sympy.Symbol, sympy.Expr]) -> bool:
    """No iteration variable in ``expr``: it has one value per launch."""
    return not (expr.free_symbols & set(lengths))


def symbolic(expr: sympy.Expr, lengths: Mapping[sympy.Symbol, sympy.Expr]) -> bool:
    """Whether ``expr`` or the length of an iteration variable in it involves a size symbol (where torch_npu's
    analysis, written for integers, does not hold)."""
    sizes = expr.free_symbols - set(lengths)
    for var in expr.free_symbols & set(lengths):
        sizes |= sympy.sympify(lengths[var]).free_symbols
    return bool(sizes)


def _term(term: sympy.Expr, lengths) -> tuple[sympy.Expr, sympy.Symbol | None] | None:
    """``(c, v)`` with ``term == c*v``, ``v`` an iteration variable and ``c`` free of them; ``(term, None)`` for a
    size-only term; None for anything else (two variables, a variable inside a function or a power)."""
    found = term.free_symbols & set(lengths)
    if not found:
        return term, None
    if len(found) > 1:
        return None
    var = next(iter(found))
    coeff, rest = term.as_independent(var, as_Add=False)
    return (coeff, var) if rest == var else None


def split(expr: sympy.Expr, lengths: Mapping[sympy.Symbol, sympy.Expr], proves: Proves = sympy_proves) -> Split:
    """Whether ``expr`` (a ``FloorDiv`` or ``ModularIndexing``) splits over the terms of its base, and the split
    form: equal to ``expr`` for every value of the iteration variables in range and of the sizes."""
    if launch_constant(expr, lengths):
        return Split(True, "no iteration variable: one value per launch, kept whole", expr)
    if isinstance(expr, ModularIndexing):
        base, divisor, modulus = expr.args
    elif isinstance(expr, FloorDiv):
        (base, divisor), modulus = expr.args, None
    else:
        return Split(False, f"{expr} is neither FloorDiv nor ModularIndexing")
    if not isinstance(base, sympy.Add):
        return Split(True, "one term: nothing to split", expr)
    terms = [_term(t, lengths) for t in base.args]
    if None in terms:
        return Split(False, f"a term of {base} is not a size-only coefficient times one iteration variable")
    used = [v for _, v in terms if v is not None]
    if len(used) != len(set(used)):
        return Split(False, f"an iteration variable appears in more than one term of {base}")
    if not proves(sympy.Ge(divisor, 1)) or (modulus is not None and not proves(sympy.Ge(modulus, 1))):
        return Split(False, f"divisor {divisor} or modulus {modulus} not provably positive")
    if not all(proves(sympy.Ge(c, 0)) for c, _ in terms):
        return Split(False, f"a coefficient of {base} is not provably non-negative")
    multiples = [proves(sympy.Eq(sympy.Mod(c, divisor), 0)) for c, _ in terms]
    if multiples.count(False) > 1:
        return Split(False, f"more than one term of {base} is not a multiple of {divisor}: the floor of their "
                            "sum is not the sum of their floors")
    if modulus is not None:
        top = sympy.Add(*[c if v is None else c * (sympy.sympify(lengths[v]) - 1) for c, v in terms])
        if not proves(sympy.Lt(top, modulus * divisor)):
            return Split(False, f"the terms of {base} can reach {modulus * divisor} (modulus x divisor): the "
                                "modulus may wrap their sum, a split would not")
    parts = [sympy.cancel(c / divisor) * (1 if v is None else v) if whole else FloorDiv(c * (1 if v is None else v),
                                                                                         divisor)
             for (c, v), whole in zip(terms, multiples)]
    why = "each term but one a multiple of the divisor" if False in multiples else "each term a multiple of the divisor"
    if modulus is not None:
        why += f", their largest sum below {modulus} x {divisor}"
    return Split(True, f"exact split ({why})", sympy.Add(*parts))
