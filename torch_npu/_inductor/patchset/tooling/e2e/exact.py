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
create_barrier create_make_block_ptr create_advance
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

    def compare(op, unordered, ordered_ne=False):
        def run(self, lhs, rhs):
            out = op(lhs.data, rhs.data)
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
            setattr(B, f"create_icmp{sign}{key}", compare(op, False))
    B.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)  # the operand that is not NaN
    B.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)


def _reductions(interpreter) -> None:
    """Reductions and scans: a combine function the interpreter has a NumPy form for, exact in the input's type, or
    its element-by-element form (builder operations, each checked). A 16-bit float sum or scan is refused (its
    accumulator's width on the NPU is not the NumPy loop's); tl.sum promotes bf16 itself."""
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

    interpreter.ReduceOps.apply_impl, interpreter.ScanOps.apply_impl = reduce, scan


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
    _reductions(interpreter)
