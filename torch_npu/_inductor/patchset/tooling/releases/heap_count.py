"""Host heap allocations on one thread of a real-runtime child: a counting ``malloc`` preloaded into the child only.

The launch helper's claim (issue 22) is that its calling-thread work makes no host heap allocation. On torch_npu's
own runtime that has to be measured with torch_npu's own allocations in the count: its ``OpCommand`` / task queue
allocates on the calling thread as it queues a lambda, and those are what a user pays whatever the launcher does.
So the count is of the C library's allocator itself (``malloc`` and its relatives, which libstdc++'s
``operator new`` calls): the shim below is put in front of it with ``LD_PRELOAD`` in the environment of the
benchmark's child (never in this process, never in a user's), forwards every call to glibc's own, and counts the
calls a thread makes between its ``npu_heap_count_begin()`` and ``npu_heap_count_end()``. Those two are called from
C around the launch loop (``real_runtime_bench.HELPER_SOURCE``), so Python's own allocations between ctypes calls
are not counted, nor any other thread's (torch_npu's queue thread, the host ACL library's stream workers).
``bench_heap_known`` in the same helper checks the counter on allocations of a known number.
"""
from __future__ import annotations

from pathlib import Path

from . import real_artifacts as ra

#: Forwarded to glibc's exported ``__libc_*`` entry points (no ``dlsym``: it may itself allocate). The counting
#: state is initial-exec TLS, which never allocates on first use in a preloaded library.
SOURCE = r"""
#include <cstddef>
#include <cstdint>
#include <cerrno>
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
#include <new>
namespace {
__thread __attribute__((tls_model("initial-exec"))) int counting = 0;
__thread __attribute__((tls_model("initial-exec"))) uint64_t counted = 0;
// Who made the counted calls (the calling code's address), for the breakdown by shared object; the first kSites
// (2 MiB of zero pages, touched only as used: a 2000-launch batch makes about 22,000 calls). Beyond them the
// breakdown names fewer calls than were counted, which the child sees and reports. Not thread-local: one thread
// counts at a time (and a large thread-local array would be zeroed for every thread the process starts, which
// slowed the benchmark's threads tenfold).
constexpr int kSites = 1 << 18;
void* sites[kSites];
inline void count(void* site) {
  if (!counting) return;
  if (counted < kSites) sites[counted] = site;
  ++counted;
}
}  // namespace
extern "C" {
__attribute__((visibility("default"))) void npu_heap_count_begin() {
  counted = 0;
  counting = 1;
}
__attribute__((visibility("default"))) uint64_t npu_heap_count_end() {
  counting = 0;
  return counted;
}
// The last count by shared object of the calling code ("libtorch_npu.so 3, ..."), operator new's callers named
// rather than libstdc++; called after npu_heap_count_end, on the same thread.
__attribute__((visibility("default"))) void npu_heap_count_by_object(char* out, size_t size) {
  const char* names[64];
  uint64_t counts[64];
  int kinds = 0;
  for (uint64_t i = 0; i < counted && i < uint64_t(kSites); ++i) {
    Dl_info info;
    const char* name = dladdr(sites[i], &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
    const char* base = std::strrchr(name, '/');
    name = base != nullptr ? base + 1 : name;
    int k = 0;
    while (k < kinds && std::strcmp(names[k], name) != 0) ++k;
    if (k == kinds && kinds < 64) {
      names[kinds] = name;
      counts[kinds++] = 0;
    }
    if (k < kinds) ++counts[k];
  }
  size_t used = 0;
  out[0] = 0;
  for (int k = 0; k < kinds && used < size; ++k)
    used += std::snprintf(out + used, size - used, "%s%s %llu", k ? ", " : "", names[k], (unsigned long long)counts[k]);
}
__attribute__((visibility("default"))) void* malloc(size_t n) {
  count(__builtin_return_address(0));
  return __libc_malloc(n);
}
__attribute__((visibility("default"))) void* calloc(size_t a, size_t b) {
  count(__builtin_return_address(0));
  return __libc_calloc(a, b);
}
__attribute__((visibility("default"))) void* realloc(void* p, size_t n) {
  count(__builtin_return_address(0));
  return __libc_realloc(p, n);
}
__attribute__((visibility("default"))) void* memalign(size_t align, size_t n) {
  count(__builtin_return_address(0));
  return __libc_memalign(align, n);
}
__attribute__((visibility("default"))) void* aligned_alloc(size_t align, size_t n) {
  count(__builtin_return_address(0));
  return __libc_memalign(align, n);
}
}
// operator new in front of libstdc++'s, so that the breakdown names its caller; the same allocation as there.
__attribute__((visibility("default"))) void* operator new(size_t n) {
  count(__builtin_return_address(0));
  void* p = __libc_malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
__attribute__((visibility("default"))) void* operator new[](size_t n) {
  count(__builtin_return_address(0));
  void* p = __libc_malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
extern "C" {
__attribute__((visibility("default"))) int posix_memalign(void** out, size_t align, size_t n) {
  count(__builtin_return_address(0));
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
"""


def library() -> Path:
    """:data:`SOURCE` compiled (cached by content in the build cache)."""
    return ra.small_library(SOURCE, "heap-count", "libnpu_heap_count.so", ra.TierError, "the heap-counting shim",
                            cflags=("-fno-builtin",))


def preload_env(env: dict) -> dict:
    """``env`` with the shim first on ``LD_PRELOAD`` (for the child only)."""
    rest = env.get("LD_PRELOAD", "")
    return dict(env, LD_PRELOAD=f"{library()}{':' + rest if rest else ''}")
