"""What the kernel executor computes, and that it computes it exactly or refuses (issue 48).

    install(interpreter)      once, in the executor's process, before a kernel runs: the 16-bit types, the
                              operations' semantics, and the whitelist (every builder operation not in KNOWN_EXACT,
                              every element type not in NP_TYPES, every mistyped result: refused)
    NotExact                  what a refused launch raises; its message names the operation, argument or type

triton-ascend 3.2.0's interpreter keeps a bfloat16 value as the uint16 of its bits and converts it only at explicit
casts: arithmetic, comparisons and dots on bf16 ran on bit patterns, and a bf16 job came out off by 1e8 with no
error. The root is the value's NumPy type, so that is what changes here: a bf16 value is an ``ml_dtypes.bfloat16``
array (fp16 stays NumPy's float16). Storage is 16 bits; each operation that the kernel's IR types as 16-bit
computes in float32 and rounds its result to the 16-bit type, to nearest even (ml_dtypes and NumPy's half loops do
exactly that; for +, -, *, / and sqrt float32 holds enough bits that the one rounding is the correct one). Casts
between float types round to nearest even, as torch and the NPU's vector unit do. A dot takes 16-bit operands to
float32 and accumulates in float32 (NumPy's float32 matmul), the cube unit's contract for bf16/fp16 inputs.

The interpreter's own semantics are also corrected where they differ from the IR's: ``maxnum``/``minnum`` return
the operand that is not NaN (the interpreter's np.maximum returned NaN); unordered float comparisons are true when
an operand is NaN and ``one`` is false then; comparison results are typed int1; ``fma`` rounds once (float64 holds
the exact product of two float32). What it still cannot do exactly, or what nobody checked, is not on the list and
fails the launch, naming itself: an atomic, ``frem`` (the interpreter uses Python's sign rule), an extern or inline
assembly call, a histogram, fp8 types, a 16-bit float reduction by sum, a dot with a 16-bit accumulator.

int1 (issue 52): the masked Flex kernels (IS_DIVISIBLE false, every length off the block grid) build masks,
``tl.where`` on them and masked loads with ``other``; the interpreter's ``dtype.to_ir`` asks for ``get_int1_ty``,
which it lacks. An int1 value is a NumPy bool, whose &, |, ^, *, ==, !=, order (False < True: the front end's int1 is
unsigned), select, broadcast and conversions to numbers (0, 1) are the IR's i1 operations; where NumPy's bool is not
i1 it is corrected (_int1): + and - are modulo 2, signed operations read true as -1, all ones is true, a sum is a
parity. Integer sums and scans keep their width (modulo 2**n, NumPy's widen to int64), and every reduction's result,
like every builder result, must hold the NumPy type its Triton type says. Division, remainder, shifts and float
conversions into int1, which the front end never makes, are refused, named.
"""
from __future__ import annotations

import numpy as np


class NotExact(RuntimeError):
    """The executor cannot compute this exactly: the launch fails, naming it (never a silently wrong value)."""


def _bfloat16():
    import ml_dtypes  # installed for the executor by stand_ins.executor_deps_dir()

    return np.dtype(ml_dtypes.bfloat16)


#: Element types the executor computes (by Triton's name) and the NumPy type of their values. fp8 types are absent.
NP_TYPES: dict[str, np.dtype] = {
    "int1": np.dtype(bool), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64), "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32), "fp64": np.dtype(np.float64),
}
FLOAT16 = ("fp16", "bf16")

#: Builder operations reviewed as exact (with the corrections below), by name. Everything else is refused.
KNOWN_EXACT = frozenset("""
set_grid_idx set_grid_dim get_half_ty get_bf16_ty get_float_ty get_double_ty get_int8_ty get_uint8_ty get_int16_ty
get_uint16_ty get_int32_ty get_uint32_ty get_int64_ty get_uint64_ty get_ptr_ty get_block_ty get_int1 get_uint8
get_int8 get_uint16 get_int16 get_uint32 get_int32 get_uint64 get_int64 get_fp16 get_bf16 get_fp32 get_fp64
get_null_value
get_all_ones_value create_get_program_id create_get_num_programs create_load create_store create_masked_load
create_masked_store cast_impl create_si_to_fp create_ui_to_fp create_fp_to_si create_fp_to_ui create_fp_ext
create_fp_trunc create_int_cast create_fp_to_fp create_bitcast create_int_to_ptr create_ptr_to_int binary_op
create_fadd create_fmul create_fdiv create_fsub create_mul create_precise_divf create_sdiv create_udiv create_srem
create_urem create_add create_sub create_shl create_lshr create_ashr create_minsi create_minui create_minimumf
create_minnumf create_maxsi create_maxui create_maximumf create_maxnumf create_icmpSLE create_icmpSLT create_icmpSGE
create_icmpSGT create_icmpULE create_icmpULT create_icmpUGE create_icmpUGT create_icmpEQ create_icmpNE
create_fcmpOLT create_fcmpOGT create_fcmpOLE create_fcmpOGE create_fcmpOEQ create_fcmpONE create_fcmpULT
create_fcmpUGT create_fcmpULE create_fcmpUGE create_fcmpUEQ create_fcmpUNE create_and create_xor create_or
create_idiv ternary_op create_select create_fma unary_op create_fabs create_exp create_exp2 create_log create_log2
create_sqrt create_precise_sqrt create_rsqrt create_floor create_ceil create_iabs create_reshape create_trans
create_dot create_make_range create_addptr create_tensor_pointer_load create_tensor_pointer_store
create_expand_dims create_broadcast create_join create_split create_splat create_assert create_assume
create_barrier create_make_block_ptr create_advance get_int1_ty
""".split())

_CMP = {"LT": np.less, "GT": np.greater, "LE": np.less_equal, "GE": np.greater_equal, "EQ": np.equal}


def np_type(tt) -> np.dtype:
    """The NumPy type of a Triton type's values (pointers: uint64); a type the executor does not know is refused."""
    while hasattr(tt, "element_ty"):  # a block type: its element; a pointer: an address
        if hasattr(tt, "address_space"):
            return NP_TYPES["uint64"]
        tt = tt.element_ty
    try:
        return NP_TYPES[tt.name]
    except (KeyError, AttributeError):
        raise NotExact(f"element type {tt}: not one the executor computes exactly (exact.NP_TYPES)") from None


def _typed(name: str, result):
    """A result must hold the NumPy type its Triton type says: the check that would have caught bf16-as-uint16."""
    handle = result if hasattr(result, "data") and hasattr(result, "dtype") else None
    if handle is not None and isinstance(handle.data, np.ndarray) and handle.data.dtype != np_type(handle.dtype):
        raise NotExact(f"{name} gave {handle.data.dtype} values typed {handle.dtype}: not computed exactly")
    return result


def _guarded(name: str, method):
    def run(*args, **kwargs):
        result = method(*args, **kwargs)
        if isinstance(result, tuple):
            for r in result:
                _typed(name, r)
            return result
        return _typed(name, result)
    return run


def _refused(name: str):
    def run(*args, **kwargs):
        raise NotExact(f"operation {name}: not on the executor's list of operations it computes exactly "
                       "(exact.KNOWN_EXACT); the launch is refused")
    return run


def _corrected_semantics(interpreter) -> None:
    """The builder's operations, where the interpreter's NumPy mapping differs from the IR's meaning."""
    B, TensorHandle, tl, ir = interpreter.InterpreterBuilder, interpreter.TensorHandle, interpreter.tl, interpreter._ir

    def cast(self, src, dst_type):  # every cast: NumPy's, to nearest even (the interpreter truncated f32 -> bf16)
        return TensorHandle(src.data.astype(np_type(dst_type)), dst_type.scalar)

    def fp_to_fp(self, src, dst_type, rounding_mode):
        narrowing = np_type(dst_type).itemsize < src.data.dtype.itemsize
        if narrowing and rounding_mode not in (None, ir.ROUNDING_MODE.RTNE):
            raise NotExact(f"create_fp_to_fp rounding {rounding_mode} to {dst_type}: only to nearest even")
        return cast(self, src, dst_type)

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        names = (a.get_element_ty().name, b.get_element_ty().name, d.get_element_ty().name)
        if names[2] != "fp32" or not {names[0], names[1]} <= {"fp32", *FLOAT16} or names[0] != names[1]:
            raise NotExact(f"create_dot of {names[0]} x {names[1]} into {names[2]}: only 16-bit or float32 operands "
                           "(alike) into a float32 accumulator")
        f32 = np.float32
        out = np.matmul(a.data.astype(f32), b.data.astype(f32)) + d.data  # float32 products, float32 accumulation
        return TensorHandle(out.astype(f32), d.dtype.scalar)

    def fma(self, x, y, z):
        if z.get_element_ty().name not in ("fp32", *FLOAT16):
            raise NotExact(f"create_fma of {z.get_element_ty()}: one rounding is exact for float32 and 16-bit only")
        f64 = np.float64
        return TensorHandle((x.data.astype(f64) * y.data.astype(f64) + z.data.astype(f64)).astype(z.data.dtype),
                            z.dtype.scalar)

    def compare(op, unordered, ordered_ne=False, signed=None):  # signed: icmpS* (True), icmpU* (False)
        def run(self, lhs, rhs):
            out = op(lhs.data, rhs.data) if signed is None else op(_as(lhs.data, signed), _as(rhs.data, signed))
            if unordered or ordered_ne:
                nan = np.isnan(lhs.data) | np.isnan(rhs.data)
                out = out | nan if unordered else out & ~nan
            return TensorHandle(out, tl.int1)
        return run

    B.cast_impl, B.create_fp_to_fp, B.create_dot, B.create_fma = cast, fp_to_fp, dot, fma
    # a bf16 constant (triton-ascend's semantics make one for `x_bf16 * 0.125`; the interpreter has no maker):
    # the value rounded to nearest even, as the compiler folds it
    B.get_bf16 = lambda self, value: TensorHandle(np.array([value], dtype=NP_TYPES["bf16"]), tl.bfloat16)
    for key, op in _CMP.items():
        setattr(B, f"create_fcmpO{key}", compare(op, False))
        setattr(B, f"create_fcmpU{key}", compare(op, True))
    B.create_fcmpONE = compare(np.not_equal, False, ordered_ne=True)
    B.create_fcmpUNE = compare(np.not_equal, False)  # true when either is NaN: np.not_equal's own answer
    for key, op in (*_CMP.items(), ("NE", np.not_equal)):
        for sign in ("S", "U") if key not in ("EQ", "NE") else ("",):
            setattr(B, f"create_icmp{sign}{key}", compare(op, False, signed={"S": True, "U": False}.get(sign)))
    B.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)  # the operand that is not NaN
    B.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)


def _as(data, signed: bool):
    """An integer's bits as the IR's signed or unsigned operation reads them (NumPy reads them by the array's type):
    an int1 true is -1 signed and 1 unsigned; a value's top bit is its sign only for the signed operations."""
    kind = data.dtype.kind
    if kind == "b":
        return -data.astype(np.int8) if signed else data
    if kind in "iu" and (kind == "i") != signed:
        return data.view(f"{'int' if signed else 'uint'}{8 * data.dtype.itemsize}")
    return data


def _int1(interpreter) -> None:
    """int1 (i1) as the IR means it, where NumPy's bool differs, and the signed and unsigned integer operations by the
    operation, not by the array's NumPy type. int1 values are NumPy bools: &, |, ^, * (and), ==, !=, select, splat,
    broadcast, reshape and the masks of loads and stores are NumPy's own bool operations, which are i1's. Corrected:
    + and - are modulo 2 (xor; NumPy's + is or, its - raises); the signed compares, minsi/maxsi, si_to_fp and a
    signed int_cast read true as -1 (the unsigned ones as 1: the front end's int1 is unsigned); int_cast to i1 keeps
    the low bit (NumPy's astype(bool) is != 0); all ones is true. Refused (the front end never makes them for int1,
    and most of their inputs are undefined there): division, remainder, shifts, float to int1."""
    B, TensorHandle, tl = interpreter.InterpreterBuilder, interpreter.TensorHandle, interpreter.tl
    B.get_int1_ty = lambda self: tl.int1  # the interpreter's dtype.to_ir asks for it (tl.where, masks, bool casts)

    def all_ones(self, type):  # -1 in the type's width (NumPy 2 refuses np.full(-1) for unsigned types and bool)
        kind = np_type(type)
        if kind.kind not in "biu":
            raise NotExact(f"get_all_ones_value of {type}: integer types only")
        return TensorHandle(np.array([-1]).astype(kind), type.scalar)

    def modulo_2(name):
        original = getattr(B, name)

        def run(self, lhs, rhs):
            if lhs.data.dtype.kind == "b":
                return TensorHandle(lhs.data ^ rhs.data, lhs.dtype.scalar)
            return original(self, lhs, rhs)
        return run

    def min_max(op, signed):
        def run(self, lhs, rhs):
            out = op(_as(lhs.data, signed), _as(rhs.data, signed))
            return TensorHandle(out != 0 if lhs.data.dtype.kind == "b" else out.view(lhs.data.dtype), lhs.dtype.scalar)
        return run

    def int_cast(self, src, dst_type, is_signed):  # extends as the flag says (extsi / extui), truncates to the bits
        data, kind = src.data, np_type(dst_type)
        if kind.kind == "b" and data.dtype.kind != "b":
            data = (data & 1) != 0  # trunc to i1: the low bit
        return TensorHandle(_as(data, is_signed).astype(kind), dst_type.scalar)

    def to_fp(signed):
        return lambda self, src, dst_type: TensorHandle(_as(src.data, signed).astype(np_type(dst_type)),
                                                        dst_type.scalar)

    def no_int1(name, operand=0):
        original = getattr(B, name)

        def run(self, *args):
            value = args[operand]
            if (value.data.dtype if operand == 0 else np_type(value)).kind == "b":
                raise NotExact(f"operation {name} on int1: not computed by the executor (the front end never makes "
                               "it for int1; most of its inputs are undefined in the IR)")
            return original(self, *args)
        return run

    B.get_all_ones_value, B.create_int_cast = all_ones, int_cast
    B.create_add, B.create_sub = modulo_2("create_add"), modulo_2("create_sub")
    B.create_minsi, B.create_maxsi = min_max(np.minimum, True), min_max(np.maximum, True)
    B.create_minui, B.create_maxui = min_max(np.minimum, False), min_max(np.maximum, False)
    B.create_si_to_fp, B.create_ui_to_fp = to_fp(True), to_fp(False)
    for name in ("create_sdiv", "create_udiv", "create_srem", "create_urem", "create_idiv", "create_shl",
                 "create_lshr", "create_ashr"):
        setattr(B, name, no_int1(name))
    for name in ("create_fp_to_si", "create_fp_to_ui"):
        setattr(B, name, no_int1(name, operand=1))


def _reductions(interpreter) -> None:
    """Reductions and scans: a combine function the interpreter has a NumPy form for, exact in the input's type, or
    its element-by-element form (builder operations, each checked). A 16-bit float sum or scan is refused (its
    accumulator's width on the NPU is not the NumPy loop's); tl.sum promotes bf16 itself. Integer sums and scans
    stay in the input's width; every result is typed as the builder's are."""
    import triton.language.standard as standard
    import triton.triton_patch.language.standard as ascend

    # maxnum / minnum (the combine functions' default): np.fmax / np.fmin; NaN-propagating maximum: np.maximum
    numpy_forms = {ascend._elementwise_max_default: np.fmax.reduce, ascend._elementwise_min: np.fmin.reduce,
                   ascend._elementwise_max_propagate_nan: np.maximum.reduce,
                   standard._elementwise_max: np.fmax.reduce, standard._elementwise_min: np.fmin.reduce}
    # the interpreter's NumPy argmax/argmin rank NaN unlike the combine functions: those run element by element
    element_wise = {standard._argmax_combine_tie_break_left, standard._argmin_combine_tie_break_left}
    sums = {standard._sum_combine, standard._prod_combine}
    reduce_impl, scan_impl = interpreter.ReduceOps.apply_impl, interpreter.ScanOps.apply_impl

    def no_16_bit_sum(self, input, what):
        if self.combine_fn in sums and any(x.dtype.scalar.name in FLOAT16 for x in input):
            raise NotExact(f"a {what} of {input[0].dtype.scalar} by {self.combine_fn.__name__}: 16-bit accumulation")

    def reduce(self, input):
        no_16_bit_sum(self, input, "reduction")
        if self.combine_fn in element_wise:
            return self.generic_reduce(input)
        op = numpy_forms.get(self.combine_fn)
        return self.min_max(input[0], val_reduce_op=op) if op is not None else reduce_impl(self, input)

    def scan(self, input):
        no_16_bit_sum(self, input, "scan")
        return scan_impl(self, input)

    ops, scans = interpreter.ReduceOps, interpreter.ScanOps
    sum_impl, cumsum_impl, cumprod_impl = ops.sum, scans.cumsum, scans.cumprod

    # Integers add and multiply in their own width, modulo 2**n as the IR's addi and muli, whatever the order (NumPy
    # widens a sum to int64); int1's + is xor (NumPy's bool sum counts), its * is and.
    def reduce_sum(self, x):
        data = x.handle.data
        if data.dtype.kind == "b":
            return self.to_tensor(np.bitwise_xor.reduce(data, axis=self.axis, keepdims=self.keep_dims), x.dtype)
        if data.dtype.kind in "iu":
            return self.to_tensor(np.sum(data, axis=self.axis, keepdims=self.keep_dims, dtype=data.dtype), x.dtype)
        return sum_impl(self, x)

    def scan_sum(self, x):
        data = x.handle.data
        if data.dtype.kind == "b":
            return [self.to_tensor(np.bitwise_xor.accumulate(data, axis=self.axis), x.dtype)]
        if data.dtype.kind in "iu":
            return [self.to_tensor(np.cumsum(data, axis=self.axis, dtype=data.dtype), x.dtype)]
        return cumsum_impl(self, x)

    def scan_prod(self, x):
        data = x.handle.data
        if data.dtype.kind in "biu":
            return [self.to_tensor(np.cumprod(data, axis=self.axis, dtype=data.dtype), x.dtype)]
        return cumprod_impl(self, x)

    def typed(what, method):  # as the builder's results: each holds the NumPy type its Triton type says
        def run(self, input):
            out = method(self, input)
            for r in out if isinstance(out, (tuple, list)) else (out,):
                _typed(f"a {what} by {getattr(self.combine_fn, '__name__', self.combine_fn)}", r.handle)
            return out
        return run

    ops.sum, scans.cumsum, scans.cumprod = reduce_sum, scan_sum, scan_prod
    ops.apply_impl, scans.apply_impl = typed("reduction", reduce), typed("scan", scan)


def guard(builder) -> None:
    """Every callable of the interpreter's builder: checked if known exact, refused if not, refused if unknown."""
    cls = type(builder)
    for name in dir(cls):
        if name.startswith("_") or not callable(getattr(cls, name)):
            continue
        method = getattr(builder, name)
        setattr(builder, name, _guarded(name, method) if name in KNOWN_EXACT else _refused(name))
    if "__getattr__" not in cls.__dict__:  # an operation the interpreter lacks altogether: refused, named
        def missing(self, name):
            if name.startswith("create_"):
                return _refused(name)
            raise AttributeError(name)
        cls.__getattr__ = missing


def install(interpreter) -> None:
    """Before any kernel runs, in the executor's process (the builder's memory routing is installed after, then
    :func:`guard`)."""
    NP_TYPES["bf16"] = _bfloat16()
    interpreter._get_np_dtype = np_type
    _corrected_semantics(interpreter)
    _int1(interpreter)
    _reductions(interpreter)
