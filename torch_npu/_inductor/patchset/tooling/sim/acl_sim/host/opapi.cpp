// HOST ACL LIBRARY: a TEST DOUBLE of CANN for torch-npu-inductor-patches' tests and dry runs, loaded by a
// released torch_npu wheel in a test's subprocess only, never in a user's process (README.md).
//
// The op-api part (libopapi.so and libnnopbase.so are the same object): the tensor and scalar descriptors
// of CANN's aclnn/acl_meta.h and FIVE operators:
//  * aclnnInplaceFillScalar (aclnnop/aclnn_fill_scalar.h: what torch_npu's op-plugin runs for Tensor.fill_ with a
//    number, torch.ones, torch.full, and torch.npu.graph's generator state at capture and replay) and
//    aclnnInplaceZero (aclnnop/aclnn_zero.h: zero_, torch.zeros);
//  * aclnnMm (aclnnop/aclnn_mm.h: op-plugin's mm and mm.out, so Inductor's extern mm and torch_npu's npu_linear)
//    and aclnnMatmul (aclnnop/aclnn_matmul.h: op-plugin's matmul and matmul_backward, so nn.Linear without a bias,
//    eagerly, and the backward of a compiled one), on the arithmetic of the cube unit ("the matrix multiplies");
//  * aclnnInplaceCopy (aclnnop/aclnn_copy.h: torch_npu's copy_ between tensors of one device, clone, contiguous,
//    a strided host-to-device copy's last step), without a cast.
// Their two phases are CANN's: GetWorkspaceSize checks the arguments and returns an executor and a
// workspace size (> 0, so that torch_npu takes a workspace from its allocator); the second phase puts the
// operator on the stream as a kernel (stream-ordered, captured and replayed like every launch of acl_sim),
// whose every device access is checked: it computes when the stream reaches it, never before. What an operator
// does not implement (a type, a format, a cubeMathType, a cast) its first phase refuses by name. Every other
// aclnn* is absent from the library (dlsym answers NULL, as for an operator CANN does not ship): op-plugin
// then falls back to its aclop path, whose functions fail loudly.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "acl_host_prelude.h"  // the wheel's headers (and op-plugin's prototypes), the supplement
#include "acl_sim/control.h"
#include "internal.h"
#include "opapi.h"

namespace {
constexpr int kMaxDims = 8;  // aclnn_fill_scalar.h: no more than 8 dimensions
}  // namespace

struct aclTensor {
  std::vector<int64_t> view, strides, storage;
  aclDataType dtype;
  aclFormat format;
  int64_t offset;
  void *data;
};

struct aclScalar {
  aclDataType dtype;
  alignas(16) uint8_t bytes[16];
};

namespace {
// What every operator's kernel receives first (the launch's argument bytes: captured and replayed with the
// launch). The first phase fills op, workspace_size and tid_phase1; the second workspace and tid_phase2.
struct Phases {
  uint64_t workspace;       // the second phase's workspace
  uint64_t workspace_size;  // what the first phase asked for
  int64_t tid_phase1, tid_phase2;
  int32_t op, reserved;  // op: an index of kOps
};

// The fill kernel's arguments.
struct FillArgs {
  Phases ph;
  uint64_t data;   // the tensor's storage base (aclCreateTensor's tensorData)
  int64_t offset;  // in elements
  uint32_t ndim, itemsize;
  int32_t dtype, reserved;
  uint8_t value[16];  // the scalar converted to the tensor's type
  int64_t dims[kMaxDims], strides[kMaxDims];
};

// A tensor as a kernel reads or writes it: its view of its storage.
struct View {
  uint64_t data;   // the storage base (aclCreateTensor's tensorData)
  int64_t offset;  // in elements
  uint32_t ndim, itemsize;
  int32_t dtype, reserved;
  int64_t dims[kMaxDims], strides[kMaxDims];
};

// The matrix multiplies' arguments (aclnnMm, aclnnMatmul).
struct MatmulArgs {
  Phases ph;
  View self, mat2, out;
  int32_t cube_math_type, reserved;
};

// The copy's arguments (aclnnInplaceCopy): src into self.
struct CopyArgs {
  Phases ph;
  View self, src;
};
}  // namespace

// The executor: the operator's kernel arguments, made by the first phase, consumed by the second.
struct aclOpExecutor {
  int op;
  std::vector<uint8_t> args;  // a FillArgs, MatmulArgs or CopyArgs, its Phases first
};

namespace {
constexpr aclnnStatus kSuccess = 0;
constexpr aclnnStatus kErrNullptr = 161001;  // ACLNN_ERR_PARAM_NULLPTR
constexpr aclnnStatus kErrInvalid = 161002;  // ACLNN_ERR_PARAM_INVALID
constexpr aclnnStatus kErrRuntime = 361001;  // ACLNN_ERR_RUNTIME_ERROR
constexpr const char *kOps[] = {"aclnnInplaceFillScalar", "aclnnInplaceZero", "aclnnMm", "aclnnMatmul",
                                "aclnnInplaceCopy"};
constexpr int kFillOp = 0, kZeroOp = 1, kMmOp = 2, kMatmulOp = 3, kCopyOp = 4, kOpCount = 5;
// The workspace the double's fills ask for (CANN documents no operator's size: it is whatever the first
// phase answers): one 32-byte block, where the kernel stages the value before writing it out. The matrix
// multiplies' and the copy's: prepare_matmul, prepare_copy.
constexpr uint64_t kFillWorkspace = 32;

long tid_now() { return static_cast<long>(syscall(SYS_gettid)); }

std::mutex g_mu;
std::set<const void *> &live() {  // descriptors and executors handed out and not yet destroyed / run
  static auto *s = new std::set<const void *>();
  return *s;
}
bool is_live(const void *p) {
  std::lock_guard<std::mutex> g(g_mu);
  return live().count(p) != 0;
}
void add_live(const void *p) {
  std::lock_guard<std::mutex> g(g_mu);
  live().insert(p);
}
bool take_live(const void *p) {
  std::lock_guard<std::mutex> g(g_mu);
  return live().erase(p) != 0;
}

aclnnStatus fail(aclnnStatus code, const std::string &why) {
  acl_host::recent_error(std::string("host ACL library (a test double of CANN): ") + why);
  return code;
}

// Logs once per text, on stderr, what the double does not implement (beside the error code).
void log_unimplemented(const std::string &what) {
  static std::mutex mu;
  static auto *seen = new std::set<std::string>();
  std::lock_guard<std::mutex> g(mu);
  if (seen->insert(what).second)
    std::fprintf(stderr, "acl_host: %s is not implemented by the host ACL library (a test double of CANN): failed\n",
                 what.c_str());
}

uint32_t item_size(aclDataType t) {
  switch (t) {
    case ACL_BOOL: case ACL_INT8: case ACL_UINT8: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: return 8;
    default: return 0;
  }
}

bool base_format(aclFormat f) {  // the formats whose layout is the strides' (no private NPU layout)
  return f == ACL_FORMAT_ND || f == ACL_FORMAT_NCHW || f == ACL_FORMAT_NHWC || f == ACL_FORMAT_NCDHW ||
         f == ACL_FORMAT_NDHWC || f == ACL_FORMAT_NCL;
}

// A number of a scalar: integral (i), floating (f) or boolean (kept in i).
struct Number {
  bool floating = false;
  double f = 0;
  int64_t i = 0;
};

template <class T>
T load(const uint8_t *b) {
  T v;
  std::memcpy(&v, b, sizeof v);
  return v;
}

bool number_of(const aclScalar &s, Number *n) {
  const uint8_t *b = s.bytes;
  switch (s.dtype) {
    case ACL_DOUBLE: n->floating = true; n->f = load<double>(b); return true;
    case ACL_FLOAT: n->floating = true; n->f = load<float>(b); return true;
    case ACL_INT64: n->i = load<int64_t>(b); return true;
    case ACL_INT32: n->i = load<int32_t>(b); return true;
    case ACL_INT16: n->i = load<int16_t>(b); return true;
    case ACL_INT8: n->i = load<int8_t>(b); return true;
    case ACL_UINT8: n->i = load<uint8_t>(b); return true;
    case ACL_BOOL: n->i = load<uint8_t>(b) != 0; return true;
    default: return false;
  }
}

// IEEE binary16, round to nearest even.
uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man != 0 ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h, rem, halfway;
  if (e <= 0) {  // a subnormal half (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const int shift = 14 - e;
    h = man >> shift;
    rem = man & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  } else {
    h = (static_cast<uint32_t>(e) << 10) | (man >> 13);
    rem = man & 0x1fffu;
    halfway = 0x1000u;
  }
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // a carry may reach the exponent: still right
  return static_cast<uint16_t>(sign | h);
}

// bfloat16, round to nearest even.
uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <class T>
void store(uint8_t *out, T v) {
  std::memcpy(out, &v, sizeof v);
}

// The scalar as the tensor's type (what torch's fill_ does: a cast).
bool convert(const Number &n, aclDataType to, uint8_t *out) {
  const double d = n.floating ? n.f : static_cast<double>(n.i);
  int64_t i = n.i;
  if (n.floating && to != ACL_FLOAT && to != ACL_FLOAT16 && to != ACL_BF16 && to != ACL_DOUBLE && to != ACL_BOOL) {
    if (!std::isfinite(n.f) || n.f <= -9.3e18 || n.f >= 9.3e18) return false;
    i = static_cast<int64_t>(n.f);  // toward zero, as a C++ cast
  }
  switch (to) {
    case ACL_FLOAT: store(out, static_cast<float>(d)); return true;
    case ACL_DOUBLE: store(out, d); return true;
    case ACL_FLOAT16: store(out, to_half(static_cast<float>(d))); return true;
    case ACL_BF16: store(out, to_bf16(static_cast<float>(d))); return true;
    case ACL_BOOL: store(out, static_cast<uint8_t>(n.floating ? n.f != 0 : n.i != 0)); return true;
    case ACL_INT8: store(out, static_cast<int8_t>(i)); return true;
    case ACL_UINT8: store(out, static_cast<uint8_t>(i)); return true;
    case ACL_INT16: store(out, static_cast<int16_t>(i)); return true;
    case ACL_UINT16: store(out, static_cast<uint16_t>(i)); return true;
    case ACL_INT32: store(out, static_cast<int32_t>(i)); return true;
    case ACL_UINT32: store(out, static_cast<uint32_t>(i)); return true;
    case ACL_INT64: store(out, i); return true;
    case ACL_UINT64: store(out, static_cast<uint64_t>(i)); return true;
    default: return false;
  }
}

uint64_t element_count(const int64_t *dims, uint32_t ndim) {
  uint64_t n = 1;
  for (uint32_t d = 0; d < ndim; ++d) n *= static_cast<uint64_t>(dims[d]);
  return n;
}

// Lowest and highest element offsets a view reaches (numel > 0). V: FillArgs or View.
template <class V>
void span(const V &a, int64_t *lo, int64_t *hi) {
  *lo = *hi = a.offset;
  for (uint32_t d = 0; d < a.ndim; ++d) {
    const int64_t reach = (a.dims[d] - 1) * a.strides[d];
    (reach < 0 ? *lo : *hi) += reach;
  }
}

template <class V>
bool contiguous(const V &a) {
  int64_t expect = 1;
  for (int d = static_cast<int>(a.ndim) - 1; d >= 0; --d) {
    if (a.dims[d] != 1 && a.strides[d] != expect) return false;
    expect *= a.dims[d];
  }
  return true;
}

// ---------------------------------------------------------------- the fill kernel and its records
struct Run {
  uint64_t launch_id = 0, captured_launch_id = 0;
  int device = 0;
  uintptr_t stream = 0;
  long tid_phase1 = 0, tid_phase2 = 0, tid_kernel = 0;
  uint64_t workspace = 0, workspace_size = 0, elements = 0;
  acl_sim::Extent workspace_extent;
  int op = 0, dtype = 0, access_errors = 0, overlaps_with_running = 0;
  int64_t m = 0, k = 0, n = 0, batch = 0;  // the matrix multiplies: out is batch x m x n, k summed
  int cube_math_type = 0;
};
std::vector<Run> &runs() {  // under g_mu
  static auto *v = new std::vector<Run>();
  return *v;
}

// What every operator's record starts with: the launch, its stream and threads, its workspace (and that block's extent).
Run run_of(const acl_sim::KernelCall &call, const Phases &ph) {
  Run r;
  r.launch_id = call.launch_id;
  r.captured_launch_id = call.captured_launch_id;
  r.device = call.device;
  r.stream = reinterpret_cast<uintptr_t>(call.stream);
  r.tid_phase1 = ph.tid_phase1;
  r.tid_phase2 = ph.tid_phase2;
  r.tid_kernel = tid_now();
  r.workspace = ph.workspace;
  r.workspace_size = ph.workspace_size;
  r.op = ph.op;
  if (ph.workspace != 0) acl_sim::allocation_extent(reinterpret_cast<void *>(ph.workspace), &r.workspace_extent);
  return r;
}

void fill_kernel(const acl_sim::KernelCall &call) {
  FillArgs a;
  std::memcpy(&a, call.args, sizeof a);  // sized by the launch: run() launches sizeof(FillArgs)
  const std::string name = kOps[a.ph.op], ws_who = name + " (workspace)", out_who = name + " (output)";
  Run r = run_of(call, a.ph);
  r.dtype = a.dtype;
  r.elements = element_count(a.dims, a.ndim);
  const uint64_t item = a.itemsize;
  if (r.elements != 0) {
    int64_t lo, hi;
    span(a, &lo, &hi);
    r.overlaps_with_running += acl_sim::internal::hold_region(
        call.launch_id, name, call.stream, a.data + static_cast<uint64_t>(lo) * item,
        static_cast<uint64_t>(hi - lo + 1) * item, "output");
  }
  if (a.ph.workspace_size != 0)
    r.overlaps_with_running += acl_sim::internal::hold_region(call.launch_id, name, call.stream, a.ph.workspace,
                                                              a.ph.workspace_size, "workspace");

  // The value goes through the workspace: staged there, read back, then written out.
  uint8_t value[16];
  std::memcpy(value, a.value, item);
  if (a.ph.workspace_size != 0) {
    std::vector<uint8_t> staged(a.ph.workspace_size), back(a.ph.workspace_size);
    for (uint64_t i = 0; i < staged.size(); ++i) staged[i] = a.value[i % item];
    auto *ws = reinterpret_cast<void *>(a.ph.workspace);
    if (!acl_sim::device_write(ws, staged.data(), staged.size(), ws_who.c_str()) ||
        !acl_sim::device_read(ws, back.data(), back.size(), ws_who.c_str())) {
      r.access_errors++;
    } else {
      std::memcpy(value, back.data(), item);
    }
  }
  if (r.elements != 0 && contiguous(a)) {
    constexpr uint64_t kChunk = uint64_t(4) << 20;  // bytes written per checked access
    const uint64_t per = std::max<uint64_t>(1, kChunk / item);
    std::vector<uint8_t> buf(std::min(per, r.elements) * item);
    for (uint64_t i = 0; i < buf.size(); ++i) buf[i] = value[i % item];
    for (uint64_t done = 0; done < r.elements && r.access_errors == 0;) {
      const uint64_t n = std::min(per, r.elements - done);
      auto *dst = reinterpret_cast<void *>(a.data + static_cast<uint64_t>(a.offset + static_cast<int64_t>(done)) * item);
      if (!acl_sim::device_write(dst, buf.data(), n * item, out_who.c_str())) r.access_errors++;
      done += n;
    }
  } else if (r.elements != 0) {  // strided: element by element, stopping at the first bad access
    std::vector<int64_t> idx(a.ndim, 0);
    for (uint64_t e = 0; e < r.elements && r.access_errors == 0; ++e) {
      int64_t off = a.offset;
      for (uint32_t d = 0; d < a.ndim; ++d) off += idx[d] * a.strides[d];
      if (!acl_sim::device_write(reinterpret_cast<void *>(a.data + static_cast<uint64_t>(off) * item), value, item,
                                 out_who.c_str()))
        r.access_errors++;
      for (int d = static_cast<int>(a.ndim) - 1; d >= 0 && ++idx[d] == a.dims[d]; --d) idx[d] = 0;
    }
  }
  acl_sim::internal::release_regions(call.launch_id);
  std::lock_guard<std::mutex> g(g_mu);
  runs().push_back(r);
}

// ---------------------------------------------------------------- the matrix multiplies
// What the double computes for aclnnMm and aclnnMatmul (docs/facts.md, "The matrix multiplies of the host ACL
// library", says where each part is read). out = self @ mat2 over the views (any strides: CANN's aclnn reads a
// transposed or strided view as it is, ops-nn matmul/mat_mul_v3/op_host/op_api, and writes the result into `out`'s
// view with a ViewCopy), as the cube unit contracts for it with cubeMathType KEEP_DTYPE:
//  * each FLOAT16 or BFLOAT16 input element is widened to float32 (exact);
//  * every product is a float32 product (for 16-bit inputs exact: 11 or 8 significant bits each, 22 or 16 in the
//    product, within float32's 24), and is accumulated in float32 (the cube's L0C accumulator), one rounding to
//    nearest even per addition; the double's order is fixed: k = 0, 1, ..., K-1 from +0.0f, each addition
//    `acc = acc + a[m][k] * b[k][n]` with the product rounded to float32 first (no fused multiply-add: the product
//    is formed in double, where a float32 by float32 product is exact, and rounded once to float32). The NPU's cube
//    sums in k0-wide fractal blocks in an order CANN does not document: its float32 sums may differ from these in
//    the last bits; the value contract (float32 accumulation of exact products, one rounding to the output) is
//    the same;
//  * the float32 accumulators are staged in the workspace (as the cube's L0C is drained by its fixpipe), read back,
//    and each is rounded once, to nearest even, to the output's type (FLOAT16, BFLOAT16), or kept (FLOAT).
// FLOAT inputs with KEEP_DTYPE are computed as IEEE float32 (the Atlas A2 cube takes float32 without lowering it
// to HF32 unless cubeMathType asks for it); what the double does not implement is refused by name in the first
// phase: dtype promotion, a FLOAT16 product into a FLOAT output (CANN's FP16FP32_KEEP_DTYPE), any cubeMathType
// that changes the arithmetic (HF32, FP16, USE_FP32_ADD), private formats, an output whose view overlaps itself.
float from_half(uint16_t h) {  // IEEE binary16 to float32: exact
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float from_bf16(uint16_t b) {  // bfloat16 to float32: exact
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool matmul_dtype(int32_t t) { return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16; }

std::string dtype_name(int32_t t) {
  switch (t) {
    case ACL_FLOAT:
      return "FLOAT";
    case ACL_FLOAT16:
      return "FLOAT16";
    case ACL_BF16:
      return "BFLOAT16";
    default:
      return "data type " + std::to_string(t);
  }
}

float load_float(const uint8_t *p, int32_t dtype) {
  if (dtype == ACL_FLOAT) return load<float>(p);
  return dtype == ACL_FLOAT16 ? from_half(load<uint16_t>(p)) : from_bf16(load<uint16_t>(p));
}

void store_float(uint8_t *p, int32_t dtype, float v) {
  if (dtype == ACL_FLOAT)
    store(p, v);
  else
    store(p, dtype == ACL_FLOAT16 ? to_half(v) : to_bf16(v));
}

// Visits a view's elements in runs of consecutive storage elements, every element once: fn(storage offset of the
// run's first element, its row-major index in the view, the run's length, the row-major step between its elements);
// fn returns false to stop. A contiguous view is one run; otherwise the runs follow the last dimension of stride 1
// (a transposed matrix: its columns), or are single elements. Only the view's own elements are touched.
template <class Fn>
bool for_each_run(const View &v, Fn fn) {
  const uint64_t numel = element_count(v.dims, v.ndim);
  if (numel == 0) return true;
  if (contiguous(v)) return fn(v.offset, int64_t{0}, static_cast<int64_t>(numel), int64_t{1});
  int64_t logical[kMaxDims], idx[kMaxDims] = {};
  int64_t acc = 1;
  int run = -1;
  for (int d = static_cast<int>(v.ndim) - 1; d >= 0; --d) {
    logical[d] = acc;
    acc *= v.dims[d];
    if (run < 0 && v.strides[d] == 1 && v.dims[d] > 1) run = d;
  }
  const int64_t len = run >= 0 ? v.dims[run] : 1, step = run >= 0 ? logical[run] : 1;
  for (uint64_t done = 0; done < numel; done += static_cast<uint64_t>(len)) {
    int64_t off = v.offset, lin = 0;
    for (uint32_t d = 0; d < v.ndim; ++d) {
      off += idx[d] * v.strides[d];
      lin += idx[d] * logical[d];
    }
    if (!fn(off, lin, len, step)) return false;
    for (int d = static_cast<int>(v.ndim) - 1; d >= 0; --d) {
      if (d == run) continue;
      if (++idx[d] < v.dims[d]) break;
      idx[d] = 0;
    }
  }
  return true;
}

// A view's elements, as bytes, in row-major order of the view; false at the first bad access.
bool gather(const View &v, const char *who, std::vector<uint8_t> *out) {
  out->assign(element_count(v.dims, v.ndim) * v.itemsize, 0);
  std::vector<uint8_t> buf;
  return for_each_run(v, [&](int64_t off, int64_t lin, int64_t len, int64_t step) {
    uint8_t *dst = step == 1 ? out->data() + lin * v.itemsize : (buf.resize(len * v.itemsize), buf.data());
    if (!acl_sim::device_read(reinterpret_cast<void *>(v.data + static_cast<uint64_t>(off) * v.itemsize), dst,
                              static_cast<size_t>(len) * v.itemsize, who))
      return false;
    if (step != 1)
      for (int64_t j = 0; j < len; ++j)
        std::memcpy(out->data() + (lin + j * step) * v.itemsize, buf.data() + j * v.itemsize, v.itemsize);
    return true;
  });
}

// Writes `bytes` (the view's elements in row-major order of the view) into the view; false at the first bad access.
bool scatter(const View &v, const std::vector<uint8_t> &bytes, const char *who) {
  std::vector<uint8_t> buf;
  return for_each_run(v, [&](int64_t off, int64_t lin, int64_t len, int64_t step) {
    const uint8_t *src = bytes.data() + lin * v.itemsize;
    if (step != 1) {
      buf.resize(static_cast<size_t>(len) * v.itemsize);
      for (int64_t j = 0; j < len; ++j)
        std::memcpy(buf.data() + j * v.itemsize, bytes.data() + (lin + j * step) * v.itemsize, v.itemsize);
      src = buf.data();
    }
    return acl_sim::device_write(reinterpret_cast<void *>(v.data + static_cast<uint64_t>(off) * v.itemsize), src,
                                 static_cast<size_t>(len) * v.itemsize, who);
  });
}

// torch.matmul's reading of an operand (CANN's aclnnMatmul reads it alike): its batch dimensions and one matrix; a
// 1-D first operand is one row, a 1-D second operand one column.
struct Operand {
  std::vector<int64_t> batch;
  int64_t rows = 0, cols = 0;
};

Operand operand_of(const int64_t *dims, uint32_t ndim, bool first) {
  Operand o;
  if (ndim == 1) {
    o.rows = first ? 1 : dims[0];
    o.cols = first ? dims[0] : 1;
    return o;
  }
  o.batch.assign(dims, dims + ndim - 2);
  o.rows = dims[ndim - 2];
  o.cols = dims[ndim - 1];
  return o;
}

// The product's shape: the broadcast batch dimensions, then M (unless self is 1-D) and N (unless mat2 is 1-D);
// false when the batch dimensions do not broadcast.
bool product_shape(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb, std::vector<int64_t> *batch,
                   std::vector<int64_t> *shape) {
  const Operand x = operand_of(a, na, true), y = operand_of(b, nb, false);
  const size_t n = std::max(x.batch.size(), y.batch.size());
  batch->assign(n, 1);
  for (size_t i = 0; i < n; ++i) {  // aligned on the right
    const int64_t p = i < x.batch.size() ? x.batch[x.batch.size() - 1 - i] : 1;
    const int64_t q = i < y.batch.size() ? y.batch[y.batch.size() - 1 - i] : 1;
    if (p != q && p != 1 && q != 1) return false;
    (*batch)[n - 1 - i] = p == 1 ? q : p;
  }
  *shape = *batch;
  if (na > 1) shape->push_back(x.rows);
  if (nb > 1) shape->push_back(y.cols);
  return true;
}

// The row-major index, in an operand's batch dimensions, of the batch element `o` of the product's batch
// (broadcast: an operand's dimension of size 1, or one it lacks, is read at index 0).
int64_t batch_index(const std::vector<int64_t> &mine, const std::vector<int64_t> &all, int64_t o) {
  int64_t index = 0, scale = 1;
  for (size_t i = 0; i < all.size(); ++i) {  // from the last batch dimension
    const int64_t at = o % all[all.size() - 1 - i];
    o /= all[all.size() - 1 - i];
    if (i < mine.size()) {
      const int64_t size = mine[mine.size() - 1 - i];
      index += (size == 1 ? 0 : at) * scale;
      scale *= size;
    }
  }
  return index;
}

// One float32 product, rounded once (formed in double, where it is exact): never fused with the addition after it.
inline float product(float a, float b) { return static_cast<float>(static_cast<double>(a) * static_cast<double>(b)); }

void matmul_kernel(const acl_sim::KernelCall &call) {
  MatmulArgs a;
  std::memcpy(&a, call.args, sizeof a);  // sized by the launch: run() launches sizeof(MatmulArgs)
  const std::string name = kOps[a.ph.op], ws_who = name + " (workspace)", out_who = name + " (output)",
                    self_who = name + " (self)", mat2_who = name + " (mat2)";
  Run r = run_of(call, a.ph);
  r.dtype = a.out.dtype;
  r.cube_math_type = a.cube_math_type;
  r.elements = element_count(a.out.dims, a.out.ndim);
  const Operand x = operand_of(a.self.dims, a.self.ndim, true), y = operand_of(a.mat2.dims, a.mat2.ndim, false);
  std::vector<int64_t> batch, shape;
  product_shape(a.self.dims, a.self.ndim, a.mat2.dims, a.mat2.ndim, &batch, &shape);  // checked by the first phase
  int64_t batches = 1;
  for (int64_t b : batch) batches *= b;
  const int64_t m = x.rows, k = x.cols, n = y.cols;
  r.m = m;
  r.k = k;
  r.n = n;
  r.batch = batches;
  if (r.elements != 0) {
    int64_t lo, hi;
    span(a.out, &lo, &hi);
    r.overlaps_with_running += acl_sim::internal::hold_region(
        call.launch_id, name, call.stream, a.out.data + static_cast<uint64_t>(lo) * a.out.itemsize,
        static_cast<uint64_t>(hi - lo + 1) * a.out.itemsize, "output");
  }
  if (a.ph.workspace_size != 0)
    r.overlaps_with_running += acl_sim::internal::hold_region(call.launch_id, name, call.stream, a.ph.workspace,
                                                              a.ph.workspace_size, "workspace");
  std::vector<uint8_t> lhs_bytes, rhs_bytes, out_bytes;
  std::vector<float> lhs, rhs, acc(static_cast<size_t>(r.elements), 0.0f);
  if (r.elements != 0 &&
      !(gather(a.self, self_who.c_str(), &lhs_bytes) && gather(a.mat2, mat2_who.c_str(), &rhs_bytes)))
    r.access_errors++;
  if (r.elements != 0 && r.access_errors == 0) {
    lhs.resize(lhs_bytes.size() / a.self.itemsize);  // each element widened to float32 (exact)
    for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = load_float(lhs_bytes.data() + i * a.self.itemsize, a.self.dtype);
    rhs.resize(rhs_bytes.size() / a.mat2.itemsize);
    for (size_t i = 0; i < rhs.size(); ++i) rhs[i] = load_float(rhs_bytes.data() + i * a.mat2.itemsize, a.mat2.dtype);
    for (int64_t o = 0; o < batches; ++o) {
      const float *pa = lhs.data() + batch_index(x.batch, batch, o) * m * k;
      const float *pb = rhs.data() + batch_index(y.batch, batch, o) * k * n;
      float *pc = acc.data() + o * m * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          float sum = 0.0f;
          for (int64_t t = 0; t < k; ++t) sum = sum + product(pa[i * k + t], pb[t * n + j]);
          pc[i * n + j] = sum;
        }
      }
    }
    // The accumulators go through the workspace (float32, as the cube's L0C holds them), then to the output.
    auto *ws = reinterpret_cast<void *>(a.ph.workspace);
    const size_t bytes = acc.size() * sizeof(float);
    bool ok = a.ph.workspace_size >= bytes && acl_sim::device_write(ws, acc.data(), bytes, ws_who.c_str()) &&
              acl_sim::device_read(ws, acc.data(), bytes, ws_who.c_str());
    if (ok) {
      out_bytes.resize(acc.size() * a.out.itemsize);  // each rounded once to the output's type
      for (size_t i = 0; i < acc.size(); ++i) store_float(out_bytes.data() + i * a.out.itemsize, a.out.dtype, acc[i]);
      ok = scatter(a.out, out_bytes, out_who.c_str());
    }
    if (!ok) r.access_errors++;
  }
  acl_sim::internal::release_regions(call.launch_id);
  std::lock_guard<std::mutex> g(g_mu);
  runs().push_back(r);
}

// ---------------------------------------------------------------- the copy
// aclnnInplaceCopy (ops-math conversion/view_copy/op_api/aclnn_copy.cpp): src is made contiguous (in the workspace),
// cast to self's type, broadcast to self's shape and written into self's view (ViewCopy). The double does the same
// without the cast (a copy between two types is refused by name in the first phase): every byte is copied as it is.
void copy_kernel(const acl_sim::KernelCall &call) {
  CopyArgs a;
  std::memcpy(&a, call.args, sizeof a);  // sized by the launch: run() launches sizeof(CopyArgs)
  const std::string name = kOps[a.ph.op], ws_who = name + " (workspace)", out_who = name + " (self)",
                    src_who = name + " (src)";
  Run r = run_of(call, a.ph);
  r.dtype = a.self.dtype;
  r.elements = element_count(a.self.dims, a.self.ndim);
  const uint64_t item = a.self.itemsize, src_numel = element_count(a.src.dims, a.src.ndim);
  if (r.elements != 0 && src_numel != 0) {
    int64_t lo, hi;
    span(a.self, &lo, &hi);
    r.overlaps_with_running += acl_sim::internal::hold_region(call.launch_id, name, call.stream,
                                                              a.self.data + static_cast<uint64_t>(lo) * item,
                                                              static_cast<uint64_t>(hi - lo + 1) * item, "output");
    if (a.ph.workspace_size != 0)
      r.overlaps_with_running += acl_sim::internal::hold_region(call.launch_id, name, call.stream, a.ph.workspace,
                                                                a.ph.workspace_size, "workspace");
    std::vector<uint8_t> staged, out;
    auto *ws = reinterpret_cast<void *>(a.ph.workspace);
    bool ok = gather(a.src, src_who.c_str(), &staged) && a.ph.workspace_size >= staged.size() &&
              acl_sim::device_write(ws, staged.data(), staged.size(), ws_who.c_str()) &&
              acl_sim::device_read(ws, staged.data(), staged.size(), ws_who.c_str());
    if (ok && src_numel != r.elements) {  // broadcast: src's dimensions aligned on the right of self's
      out.resize(r.elements * item);
      for (uint64_t i = 0; i < r.elements; ++i) {
        uint64_t rest = i, from = 0, scale = 1;
        for (uint32_t d = 0; d < a.self.ndim; ++d) {
          const uint32_t sd = a.self.ndim - 1 - d;
          const uint64_t at = rest % static_cast<uint64_t>(a.self.dims[sd]);
          rest /= static_cast<uint64_t>(a.self.dims[sd]);
          if (d < a.src.ndim) {
            const uint64_t size = static_cast<uint64_t>(a.src.dims[a.src.ndim - 1 - d]);
            from += (size == 1 ? 0 : at) * scale;
            scale *= size;
          }
        }
        std::memcpy(out.data() + i * item, staged.data() + from * item, item);
      }
    }
    ok = ok && scatter(a.self, src_numel != r.elements ? out : staged, out_who.c_str());
    if (!ok) r.access_errors++;
  }
  acl_sim::internal::release_regions(call.launch_id);
  std::lock_guard<std::mutex> g(g_mu);
  runs().push_back(r);
}

aclrtFuncHandle kernel_handle(int op) {
  static aclrtFuncHandle h[kOpCount] = {acl_sim::register_kernel(kOps[kFillOp], &fill_kernel, nullptr),
                                        acl_sim::register_kernel(kOps[kZeroOp], &fill_kernel, nullptr),
                                        acl_sim::register_kernel(kOps[kMmOp], &matmul_kernel, nullptr),
                                        acl_sim::register_kernel(kOps[kMatmulOp], &matmul_kernel, nullptr),
                                        acl_sim::register_kernel(kOps[kCopyOp], &copy_kernel, nullptr)};
  return h[op];
}

aclOpExecutor *make_executor(int op, const void *args, size_t size) {
  auto *e = new aclOpExecutor{
      op, std::vector<uint8_t>(static_cast<const uint8_t *>(args), static_cast<const uint8_t *>(args) + size)};
  add_live(e);
  return e;
}

// The first phase of the fills: checks, the value as the tensor's type, the workspace size.
aclnnStatus prepare(int op, aclTensor *selfRef, const aclScalar *value, uint64_t *workspaceSize,
                    aclOpExecutor **executor) {
  const std::string name = std::string(kOps[op]) + "GetWorkspaceSize";
  if (selfRef == nullptr || (op == kFillOp && value == nullptr) || workspaceSize == nullptr || executor == nullptr)
    return fail(kErrNullptr, name + ": a null argument");
  if (!is_live(selfRef) || (value != nullptr && !is_live(value)))
    return fail(kErrInvalid, name + ": selfRef or value is not a live descriptor");
  const aclTensor &t = *selfRef;
  const uint32_t item = item_size(t.dtype);
  if (item == 0) {
    log_unimplemented(std::string(kOps[op]) + " on data type " + std::to_string(t.dtype));
    return fail(kErrInvalid, name + ": data type " + std::to_string(t.dtype) + " not implemented");
  }
  if (t.view.size() > kMaxDims) return fail(kErrInvalid, name + ": more than 8 dimensions");
  if (!base_format(t.format)) {
    log_unimplemented(std::string(kOps[op]) + " on format " + std::to_string(t.format));
    return fail(kErrInvalid, name + ": format " + std::to_string(t.format) + " not implemented");
  }
  FillArgs a{};
  a.ph.op = op;
  a.ndim = static_cast<uint32_t>(t.view.size());
  a.itemsize = item;
  a.dtype = t.dtype;
  a.offset = t.offset;
  a.data = reinterpret_cast<uint64_t>(t.data);
  for (uint32_t d = 0; d < a.ndim; ++d) {
    if (t.view[d] < 0) return fail(kErrInvalid, name + ": a negative dimension");
    a.dims[d] = t.view[d];
    a.strides[d] = t.strides[d];
  }
  const uint64_t numel = element_count(a.dims, a.ndim);
  if (numel != 0) {  // the view lies inside the storage
    int64_t lo, hi;
    span(a, &lo, &hi);
    const uint64_t storage = element_count(t.storage.data(), static_cast<uint32_t>(t.storage.size()));
    if (t.data == nullptr || lo < 0 || static_cast<uint64_t>(hi) >= storage)
      return fail(kErrInvalid, name + ": the view reaches outside its storage (or no data)");
  }
  Number n;  // zero: an integral 0, which every type converts exactly
  if (value != nullptr && !number_of(*value, &n)) {
    log_unimplemented(std::string(kOps[op]) + " of a scalar of data type " + std::to_string(value->dtype));
    return fail(kErrInvalid, name + ": scalar data type " + std::to_string(value->dtype) + " not implemented");
  }
  if (!convert(n, t.dtype, a.value)) return fail(kErrInvalid, name + ": the value does not fit the tensor's type");
  a.ph.tid_phase1 = tid_now();
  a.ph.workspace_size = numel != 0 ? kFillWorkspace : 0;
  *workspaceSize = a.ph.workspace_size;
  *executor = make_executor(op, &a, sizeof a);
  return kSuccess;
}

// A tensor descriptor as a kernel reads or writes it; the checks every operand gets (CANN's answers where CANN
// refuses, `unimplemented` where the double does). Empty: fine; else the failure's text.
std::string view_of(const char *role, const aclTensor &t, View *v, bool *unimplemented) {
  *unimplemented = false;
  if (t.view.size() > kMaxDims) return std::string(role) + " has more than 8 dimensions";
  if (item_size(t.dtype) == 0) {
    *unimplemented = true;
    return std::string(role) + " of " + dtype_name(t.dtype);
  }
  if (!base_format(t.format)) {
    *unimplemented = true;
    return std::string(role) + " in format " + std::to_string(t.format);
  }
  *v = View{};
  v->data = reinterpret_cast<uint64_t>(t.data);
  v->offset = t.offset;
  v->ndim = static_cast<uint32_t>(t.view.size());
  v->itemsize = item_size(t.dtype);
  v->dtype = t.dtype;
  for (uint32_t d = 0; d < v->ndim; ++d) {
    if (t.view[d] < 0) return std::string(role) + " has a negative dimension";
    v->dims[d] = t.view[d];
    v->strides[d] = t.strides[d];
  }
  if (element_count(v->dims, v->ndim) != 0) {  // the view lies inside the storage
    int64_t lo, hi;
    span(*v, &lo, &hi);
    const uint64_t storage = element_count(t.storage.data(), static_cast<uint32_t>(t.storage.size()));
    if (t.data == nullptr || lo < 0 || static_cast<uint64_t>(hi) >= storage)
      return std::string(role) + "'s view reaches outside its storage (or has no data)";
  }
  return "";
}

std::string dims_text(const int64_t *dims, uint32_t n) {
  std::string s = "[";
  for (uint32_t d = 0; d < n; ++d) s += (d ? ", " : "") + std::to_string(dims[d]);
  return s + "]";
}

// The first phase of both matrix multiplies: the checks of CANN's (ops-nn matmul/mat_mul_v3/op_host/op_api:
// aclnn_mm.cpp, aclnn_matmul.cpp, matmul/common/op_host/op_api/cube_util.cpp), then what the double refuses by name.
aclnnStatus prepare_matmul(int op, const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType,
                           uint64_t *workspaceSize, aclOpExecutor **executor) {
  const std::string name = std::string(kOps[op]) + "GetWorkspaceSize";
  if (self == nullptr || mat2 == nullptr || out == nullptr || workspaceSize == nullptr || executor == nullptr)
    return fail(kErrNullptr, name + ": a null argument");
  if (!is_live(self) || !is_live(mat2) || !is_live(out))
    return fail(kErrInvalid, name + ": self, mat2 or out is not a live descriptor");
  MatmulArgs a{};
  a.ph.op = op;
  a.cube_math_type = cubeMathType;
  const std::pair<const char *, std::pair<const aclTensor *, View *>> operands[] = {
      {"self", {self, &a.self}}, {"mat2", {mat2, &a.mat2}}, {"out", {out, &a.out}}};
  for (const auto &o : operands) {
    const int32_t dtype = o.second.first->dtype;  // ops-nn aclnn_mm.cpp, aclnn_matmul.cpp: these on the A2 chips
    if (!matmul_dtype(dtype))
      return fail(kErrInvalid,
                  name + ": " + o.first + " has " + dtype_name(dtype) + ", not FLOAT, FLOAT16 or BFLOAT16");
    bool unimplemented;
    const std::string why = view_of(o.first, *o.second.first, o.second.second, &unimplemented);
    if (why.empty()) continue;
    if (unimplemented) log_unimplemented(std::string(kOps[op]) + " with " + why);
    return fail(kErrInvalid, name + ": " + why + (unimplemented ? " is not implemented" : ""));
  }
  if (a.self.dtype != a.mat2.dtype) {  // CANN promotes (aclnn_mm.cpp, CheckDtypeValid): not implemented here
    const std::string what = std::string(kOps[op]) + " of " + dtype_name(a.self.dtype) + " by " +
                             dtype_name(a.mat2.dtype) + " (dtype promotion)";
    log_unimplemented(what);
    return fail(kErrInvalid, name + ": " + what + " is not implemented");
  }
  if (a.out.dtype != a.self.dtype) {
    if (a.self.dtype == ACL_FLOAT16 && a.out.dtype == ACL_FLOAT) {  // CANN's FP16FP32_KEEP_DTYPE: not here
      const std::string what = std::string(kOps[op]) + " of FLOAT16 into a FLOAT out";
      log_unimplemented(what);
      return fail(kErrInvalid, name + ": " + what + " is not implemented");
    }
    return fail(kErrInvalid, name + ": out has " + dtype_name(a.out.dtype) + ", self " + dtype_name(a.self.dtype));
  }
  // Shapes: aclnnMm takes 2-D by 2-D into 2-D; aclnnMatmul 1-D to 6-D operands, torch.matmul's broadcast.
  const uint32_t most = op == kMmOp ? 2 : 6, least = op == kMmOp ? 2 : 1;
  if (a.self.ndim < least || a.self.ndim > most || a.mat2.ndim < least || a.mat2.ndim > most)
    return fail(kErrInvalid, name + ": self " + dims_text(a.self.dims, a.self.ndim) + " or mat2 " +
                                 dims_text(a.mat2.dims, a.mat2.ndim) + " has a number of dimensions it does not take");
  const Operand x = operand_of(a.self.dims, a.self.ndim, true), y = operand_of(a.mat2.dims, a.mat2.ndim, false);
  std::vector<int64_t> batch, shape;
  if (x.cols != y.rows || !product_shape(a.self.dims, a.self.ndim, a.mat2.dims, a.mat2.ndim, &batch, &shape))
    return fail(kErrInvalid, name + ": self " + dims_text(a.self.dims, a.self.ndim) + " and mat2 " +
                                 dims_text(a.mat2.dims, a.mat2.ndim) + " do not multiply");
  if (shape != std::vector<int64_t>(a.out.dims, a.out.dims + a.out.ndim))
    return fail(kErrInvalid, name + ": out is " + dims_text(a.out.dims, a.out.ndim) + ", the product " +
                                 dims_text(shape.data(), static_cast<uint32_t>(shape.size())));
  // cubeMathType (cube_util.cpp): 0 KEEP_DTYPE, 1 ALLOW_FP32_DOWN_PRECISION, 2 USE_FP16, 3 USE_HF32, 4 USE_FP32_ADD,
  // -1 FP16FP32_KEEP_DTYPE (CANN's own, for FLOAT16 into FLOAT); any other value CANN refuses. Implemented: KEEP_DTYPE,
  // and ALLOW_FP32_DOWN_PRECISION for 16-bit inputs, which CANN computes in their own type then
  // (CalcAllowFp32DownPrecisionPromoteType): the same arithmetic. The others change it (HF32, FP16, ...).
  if (cubeMathType < -1 || cubeMathType > 4)
    return fail(kErrInvalid, name + ": cubeMathType " + std::to_string(cubeMathType) + " is not one of -1 to 4");
  if (!(cubeMathType == 0 || (cubeMathType == 1 && a.self.dtype != ACL_FLOAT))) {
    static const char *const kMath[] = {
        "FP16FP32_KEEP_DTYPE", "KEEP_DTYPE", "ALLOW_FP32_DOWN_PRECISION", "USE_FP16", "USE_HF32", "USE_FP32_ADD"};
    const std::string what = std::string(kOps[op]) + " with cubeMathType " + std::to_string(cubeMathType) + " (" +
                             kMath[cubeMathType + 1] + ") on " + dtype_name(a.self.dtype);
    log_unimplemented(what);
    return fail(kErrInvalid, name + ": " + what + " is not implemented");
  }
  for (uint32_t d = 0; d < a.out.ndim; ++d) {
    if (a.out.dims[d] > 1 && a.out.strides[d] == 0) {  // elements of out that share storage
      const std::string what = std::string(kOps[op]) + " into an out whose view overlaps itself";
      log_unimplemented(what);
      return fail(kErrInvalid, name + ": " + what + " is not implemented");
    }
  }
  const uint64_t numel = element_count(a.out.dims, a.out.ndim);
  a.ph.tid_phase1 = tid_now();
  a.ph.workspace_size = numel * sizeof(float);  // the float32 accumulators (the double's choice: matmul_kernel)
  *workspaceSize = a.ph.workspace_size;
  *executor = make_executor(op, &a, sizeof a);
  return kSuccess;
}

// The first phase of the copy: CANN's checks (aclnn_copy.cpp: the types it takes, at most 8 dimensions, src
// broadcast to self's shape), then what the double refuses by name (a cast, private formats, a self whose view
// overlaps itself, types it has no size for). The workspace holds src made contiguous (the double's choice).
aclnnStatus prepare_copy(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize, aclOpExecutor **executor) {
  const std::string name = std::string(kOps[kCopyOp]) + "GetWorkspaceSize";
  if (selfRef == nullptr || src == nullptr || workspaceSize == nullptr || executor == nullptr)
    return fail(kErrNullptr, name + ": a null argument");
  if (!is_live(selfRef) || !is_live(src)) return fail(kErrInvalid, name + ": selfRef or src is not a live descriptor");
  CopyArgs a{};
  a.ph.op = kCopyOp;
  const std::pair<const char *, std::pair<const aclTensor *, View *>> operands[] = {{"selfRef", {selfRef, &a.self}},
                                                                                    {"src", {src, &a.src}}};
  for (const auto &o : operands) {
    bool unimplemented;
    const std::string why = view_of(o.first, *o.second.first, o.second.second, &unimplemented);
    if (why.empty()) continue;
    if (unimplemented) log_unimplemented(std::string(kOps[kCopyOp]) + " with " + why);
    return fail(kErrInvalid, name + ": " + why + (unimplemented ? " is not implemented" : ""));
  }
  if (a.self.dtype != a.src.dtype) {  // CANN casts (l0op::Cast): not implemented here
    const std::string what = std::string(kOps[kCopyOp]) + " from " + dtype_name(a.src.dtype) + " to " +
                             dtype_name(a.self.dtype) + " (a cast)";
    log_unimplemented(what);
    return fail(kErrInvalid, name + ": " + what + " is not implemented");
  }
  bool broadcasts = a.src.ndim <= a.self.ndim;
  for (uint32_t d = 0; broadcasts && d < a.src.ndim; ++d) {
    const int64_t from = a.src.dims[a.src.ndim - 1 - d], to = a.self.dims[a.self.ndim - 1 - d];
    broadcasts = from == to || from == 1;
  }
  if (!broadcasts)
    return fail(kErrInvalid, name + ": src " + dims_text(a.src.dims, a.src.ndim) + " does not broadcast to selfRef " +
                                 dims_text(a.self.dims, a.self.ndim));
  const uint64_t numel = element_count(a.self.dims, a.self.ndim), src_numel = element_count(a.src.dims, a.src.ndim);
  for (uint32_t d = 0; d < a.self.ndim; ++d) {
    if (a.self.dims[d] > 1 && a.self.strides[d] == 0) {  // elements of selfRef that share storage
      const std::string what = std::string(kOps[kCopyOp]) + " into a selfRef whose view overlaps itself";
      log_unimplemented(what);
      return fail(kErrInvalid, name + ": " + what + " is not implemented");
    }
  }
  a.ph.tid_phase1 = tid_now();
  a.ph.workspace_size = numel != 0 && src_numel != 0 ? src_numel * a.src.itemsize : 0;  // CANN: 0 when either is empty
  *workspaceSize = a.ph.workspace_size;
  *executor = make_executor(kCopyOp, &a, sizeof a);
  return kSuccess;
}

// The second phase of every operator: its kernel goes on `stream` (recorded instead while the stream captures).
// The executor is consumed, as CANN's is unless made repeatable; here also when the call fails (CANN's
// documentation is silent there: a second use is then refused, never run).
aclnnStatus run(int op, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  const std::string name = kOps[op];
  if (executor == nullptr) return fail(kErrNullptr, name + ": null executor");
  if (!take_live(executor)) return fail(kErrInvalid, name + ": executor unknown or already run");
  std::unique_ptr<aclOpExecutor> e(executor);
  if (e->op != op) return fail(kErrInvalid, name + ": the executor is " + kOps[e->op] + "'s");
  Phases ph;
  std::memcpy(&ph, e->args.data(), sizeof ph);
  if (workspaceSize < ph.workspace_size || (ph.workspace_size != 0 && workspace == nullptr))
    return fail(kErrInvalid, name + ": workspace smaller than the first phase asked for");
  ph.workspace = reinterpret_cast<uint64_t>(workspace);
  ph.tid_phase2 = tid_now();
  std::memcpy(e->args.data(), &ph, sizeof ph);
  const aclError rc =
      aclrtLaunchKernelWithHostArgs(kernel_handle(op), 1, stream, nullptr, e->args.data(), e->args.size(), nullptr, 0);
  if (rc != ACL_SUCCESS)
    return fail(kErrRuntime, name + ": the launch on its stream failed with " + std::to_string(rc));
  return kSuccess;
}
}  // namespace

// ================================================================ acl_host:: (opapi.h)
void acl_host::opapi_report_json(std::ostringstream &o) {
  std::lock_guard<std::mutex> g(g_mu);
  o << '[';
  bool first = true;
  for (const Run &r : runs()) {
    o << (first ? "" : ",") << "{\"op\":\"" << kOps[r.op] << "\",\"launch_id\":" << r.launch_id
      << ",\"captured_launch_id\":" << r.captured_launch_id << ",\"device\":" << r.device << ",\"stream\":" << r.stream
      << ",\"tid_phase1\":" << r.tid_phase1 << ",\"tid_phase2\":" << r.tid_phase2 << ",\"tid_kernel\":" << r.tid_kernel
      << ",\"dtype\":" << r.dtype << ",\"elements\":" << r.elements << ",\"workspace\":" << r.workspace
      << ",\"workspace_size\":" << r.workspace_size << ",\"workspace_extent\":{\"kind\":\""
      << acl_sim::extent_kind_name(r.workspace_extent.kind) << "\",\"base\":" << r.workspace_extent.base
      << ",\"size\":" << r.workspace_extent.size << ",\"device\":" << r.workspace_extent.device
      << ",\"freed\":" << (r.workspace_extent.freed ? "true" : "false") << "},\"access_errors\":" << r.access_errors
      << ",\"overlaps_with_running\":" << r.overlaps_with_running;
    if (r.op == kMmOp || r.op == kMatmulOp)
      o << ",\"m\":" << r.m << ",\"k\":" << r.k << ",\"n\":" << r.n << ",\"batch\":" << r.batch
        << ",\"cube_math_type\":" << r.cube_math_type;
    o << "}";
    first = false;
  }
  o << ']';
}

void acl_host::opapi_reset() {
  std::lock_guard<std::mutex> g(g_mu);
  runs().clear();
}

// ================================================================ op-api functions (C)
extern "C" {

// aclnn/acl_meta.h. The arrays are copied (the caller's die with its stack frame, as op-plugin's do).
aclTensor *aclCreateTensor(const int64_t *view_dims, uint64_t view_dims_num, aclDataType data_type,
                           const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storage_dims,
                           uint64_t storage_dims_num, void *tensor_data) {
  if ((view_dims_num != 0 && (view_dims == nullptr || stride == nullptr)) ||
      (storage_dims_num != 0 && storage_dims == nullptr)) {
    fail(kErrNullptr, "aclCreateTensor: null dimension array");
    return nullptr;
  }
  auto *t = new aclTensor{std::vector<int64_t>(view_dims, view_dims + view_dims_num),
                          std::vector<int64_t>(stride, stride + view_dims_num),
                          std::vector<int64_t>(storage_dims, storage_dims + storage_dims_num),
                          data_type,
                          format,
                          offset,
                          tensor_data};
  add_live(t);
  return t;
}

aclScalar *aclCreateScalar(void *value, aclDataType data_type) {
  const uint32_t size = item_size(data_type);
  if (value == nullptr || size == 0) {
    if (value != nullptr) log_unimplemented("aclCreateScalar of data type " + std::to_string(data_type));
    fail(value == nullptr ? kErrNullptr : kErrInvalid, "aclCreateScalar: null value or unsupported data type");
    return nullptr;
  }
  auto *s = new aclScalar{data_type, {}};
  std::memcpy(s->bytes, value, size);  // CANN copies the value: op-plugin's lives on its stack
  add_live(s);
  return s;
}

// A null descriptor is accepted (op-plugin releases every converted argument, nullptr for an absent
// optional one); a descriptor not handed out, or destroyed already, is refused.
aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
  if (tensor == nullptr) return kSuccess;
  if (!take_live(tensor)) return fail(kErrInvalid, "aclDestroyTensor: not a live aclTensor");
  delete tensor;
  return kSuccess;
}

aclnnStatus aclDestroyScalar(const aclScalar *scalar) {
  if (scalar == nullptr) return kSuccess;
  if (!take_live(scalar)) return fail(kErrInvalid, "aclDestroyScalar: not a live aclScalar");
  delete scalar;
  return kSuccess;
}

// aclnnop/aclnn_fill_scalar.h
aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor) {
  return prepare(kFillOp, selfRef, value, workspaceSize, executor);
}

aclnnStatus aclnnInplaceFillScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream) {
  return run(kFillOp, workspace, workspaceSize, executor, stream);
}

// aclnnop/aclnn_zero.h
aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor *selfRef, uint64_t *workspaceSize, aclOpExecutor **executor) {
  return prepare(kZeroOp, selfRef, nullptr, workspaceSize, executor);
}

aclnnStatus aclnnInplaceZero(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  return run(kZeroOp, workspace, workspaceSize, executor, stream);
}

// aclnnop/aclnn_mm.h
aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType,
                                    uint64_t *workspaceSize, aclOpExecutor **executor) {
  return prepare_matmul(kMmOp, self, mat2, out, cubeMathType, workspaceSize, executor);
}

aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  return run(kMmOp, workspace, workspaceSize, executor, stream);
}

// aclnnop/aclnn_matmul.h
aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                        int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor) {
  return prepare_matmul(kMatmulOp, self, mat2, out, cubeMathType, workspaceSize, executor);
}

aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  return run(kMatmulOp, workspace, workspaceSize, executor, stream);
}

// aclnnop/aclnn_copy.h
aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,
                                             aclOpExecutor **executor) {
  return prepare_copy(selfRef, src, workspaceSize, executor);
}

aclnnStatus aclnnInplaceCopy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  return run(kCopyOp, workspace, workspaceSize, executor, stream);
}

}  // extern "C"

#ifdef ACL_HOST_WHEEL_OPAPI_FUNC
// The second phases have the type op-plugin calls them through (op_api_common_base.h's OpApiFunc).
static_assert(std::is_same<decltype(&aclnnInplaceFillScalar), acl_host_wheel_OpApiFunc>::value,
              "aclnnInplaceFillScalar differs from the wheel's OpApiFunc");
static_assert(std::is_same<decltype(&aclnnInplaceZero), acl_host_wheel_OpApiFunc>::value,
              "aclnnInplaceZero differs from the wheel's OpApiFunc");
static_assert(std::is_same<decltype(&aclnnMm), acl_host_wheel_OpApiFunc>::value,
              "aclnnMm differs from the wheel's OpApiFunc");
static_assert(std::is_same<decltype(&aclnnInplaceCopy), acl_host_wheel_OpApiFunc>::value,
              "aclnnInplaceCopy differs from the wheel's OpApiFunc");
static_assert(std::is_same<decltype(&aclnnMatmul), acl_host_wheel_OpApiFunc>::value,
              "aclnnMatmul differs from the wheel's OpApiFunc");
#endif
