// HOST ACL LIBRARY: a TEST DOUBLE of CANN for torch-npu-inductor-patches' tests and dry runs, loaded by a
// released torch_npu wheel in a test's subprocess only, never in a user's process (README.md).
//
// The op-api part (libopapi.so and libnnopbase.so are the same object): the tensor and scalar descriptors
// of CANN's aclnn/acl_meta.h and TWO operators, aclnnInplaceFillScalar (aclnnop/aclnn_fill_scalar.h: what
// torch_npu's op-plugin runs for Tensor.fill_ with a number, torch.ones, torch.full, and torch.npu.graph's
// generator state at capture and replay) and aclnnInplaceZero (aclnnop/aclnn_zero.h: zero_, torch.zeros).
// Their two phases are CANN's: GetWorkspaceSize checks the arguments and returns an executor and a
// workspace size (> 0, so that torch_npu takes a workspace from its allocator); the second phase puts the
// fill on the stream as a kernel (stream-ordered, captured and replayed like every launch of acl_sim),
// whose every device access is checked. Every other aclnn* is absent from the library (dlsym answers
// NULL, as for an operator CANN does not ship): op-plugin then falls back to its aclop path, whose
// functions fail loudly.
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
// What the fill kernel receives (the launch's argument bytes: captured and replayed with the launch).
struct FillArgs {
  uint64_t data;            // the tensor's storage base (aclCreateTensor's tensorData)
  uint64_t workspace;       // the second phase's workspace
  uint64_t workspace_size;  // what the first phase asked for
  int64_t offset;           // in elements
  int64_t tid_phase1, tid_phase2;
  uint32_t ndim, itemsize;
  int32_t dtype, op;  // op: an index of kOps
  uint8_t value[16];  // the scalar converted to the tensor's type
  int64_t dims[kMaxDims], strides[kMaxDims];
};
}  // namespace

struct aclOpExecutor {
  FillArgs args;
};

namespace {
constexpr aclnnStatus kSuccess = 0;
constexpr aclnnStatus kErrNullptr = 161001;  // ACLNN_ERR_PARAM_NULLPTR
constexpr aclnnStatus kErrInvalid = 161002;  // ACLNN_ERR_PARAM_INVALID
constexpr aclnnStatus kErrRuntime = 361001;  // ACLNN_ERR_RUNTIME_ERROR
constexpr const char *kOps[] = {"aclnnInplaceFillScalar", "aclnnInplaceZero"};
constexpr int kFillOp = 0, kZeroOp = 1;
// The workspace the double's operators ask for (CANN documents no operator's size: it is whatever the
// first phase answers): one 32-byte block, where the kernel stages the value before writing it out.
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

// Lowest and highest element offsets a view reaches (numel > 0).
void span(const FillArgs &a, int64_t *lo, int64_t *hi) {
  *lo = *hi = a.offset;
  for (uint32_t d = 0; d < a.ndim; ++d) {
    const int64_t reach = (a.dims[d] - 1) * a.strides[d];
    (reach < 0 ? *lo : *hi) += reach;
  }
}

bool contiguous(const FillArgs &a) {
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
};
std::vector<Run> &runs() {  // under g_mu
  static auto *v = new std::vector<Run>();
  return *v;
}

void fill_kernel(const acl_sim::KernelCall &call) {
  FillArgs a;
  std::memcpy(&a, call.args, sizeof a);
  const std::string name = kOps[a.op], ws_who = name + " (workspace)", out_who = name + " (output)";
  Run r;
  r.launch_id = call.launch_id;
  r.captured_launch_id = call.captured_launch_id;
  r.device = call.device;
  r.stream = reinterpret_cast<uintptr_t>(call.stream);
  r.tid_phase1 = a.tid_phase1;
  r.tid_phase2 = a.tid_phase2;
  r.tid_kernel = tid_now();
  r.workspace = a.workspace;
  r.workspace_size = a.workspace_size;
  r.op = a.op;
  r.dtype = a.dtype;
  r.elements = element_count(a.dims, a.ndim);
  if (a.workspace != 0) acl_sim::allocation_extent(reinterpret_cast<void *>(a.workspace), &r.workspace_extent);
  const uint64_t item = a.itemsize;
  if (r.elements != 0) {
    int64_t lo, hi;
    span(a, &lo, &hi);
    r.overlaps_with_running += acl_sim::internal::hold_region(
        call.launch_id, name, call.stream, a.data + static_cast<uint64_t>(lo) * item,
        static_cast<uint64_t>(hi - lo + 1) * item, "output");
  }
  if (a.workspace_size != 0)
    r.overlaps_with_running +=
        acl_sim::internal::hold_region(call.launch_id, name, call.stream, a.workspace, a.workspace_size, "workspace");

  // The value goes through the workspace: staged there, read back, then written out.
  uint8_t value[16];
  std::memcpy(value, a.value, item);
  if (a.workspace_size != 0) {
    std::vector<uint8_t> staged(a.workspace_size), back(a.workspace_size);
    for (uint64_t i = 0; i < staged.size(); ++i) staged[i] = a.value[i % item];
    auto *ws = reinterpret_cast<void *>(a.workspace);
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

aclrtFuncHandle fill_kernel_handle(int op) {
  static aclrtFuncHandle h[2] = {acl_sim::register_kernel(kOps[0], &fill_kernel, nullptr),
                                 acl_sim::register_kernel(kOps[1], &fill_kernel, nullptr)};
  return h[op];
}

// The first phase of both operators: checks, the value as the tensor's type, the workspace size.
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
  a.op = op;
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
  a.tid_phase1 = tid_now();
  a.workspace_size = numel != 0 ? kFillWorkspace : 0;
  auto *e = new aclOpExecutor{a};
  add_live(e);
  *workspaceSize = a.workspace_size;
  *executor = e;
  return kSuccess;
}

// The second phase of both: the fill goes on `stream` (recorded instead while the stream captures). The
// executor is consumed, as CANN's is unless made repeatable; here also when the call fails (CANN's
// documentation is silent there: a second use is then refused, never run).
aclnnStatus run(int op, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
  const std::string name = kOps[op];
  if (executor == nullptr) return fail(kErrNullptr, name + ": null executor");
  if (!take_live(executor)) return fail(kErrInvalid, name + ": executor unknown or already run");
  std::unique_ptr<aclOpExecutor> e(executor);
  FillArgs a = e->args;
  if (a.op != op) return fail(kErrInvalid, name + ": the executor is " + kOps[a.op] + "'s");
  if (workspaceSize < a.workspace_size || (a.workspace_size != 0 && workspace == nullptr))
    return fail(kErrInvalid, name + ": workspace smaller than the first phase asked for");
  a.workspace = reinterpret_cast<uint64_t>(workspace);
  a.tid_phase2 = tid_now();
  const aclError rc = aclrtLaunchKernelWithHostArgs(fill_kernel_handle(op), 1, stream, nullptr, &a, sizeof a, nullptr, 0);
  if (rc != ACL_SUCCESS) return fail(kErrRuntime, name + ": the launch on its stream failed with " + std::to_string(rc));
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
      << ",\"overlaps_with_running\":" << r.overlaps_with_running << "}";
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

}  // extern "C"

#ifdef ACL_HOST_WHEEL_OPAPI_FUNC
// The second phases have the type op-plugin calls them through (op_api_common_base.h's OpApiFunc).
static_assert(std::is_same<decltype(&aclnnInplaceFillScalar), acl_host_wheel_OpApiFunc>::value,
              "aclnnInplaceFillScalar differs from the wheel's OpApiFunc");
static_assert(std::is_same<decltype(&aclnnInplaceZero), acl_host_wheel_OpApiFunc>::value,
              "aclnnInplaceZero differs from the wheel's OpApiFunc");
#endif
