// HOST SIMULATION stand-in for torch_npu's workspace allocator header
// (test double and dry-run tool for torch-npu-inductor-patches; not torch_npu).
// Declares the one entry point this project uses, with torch_npu's public
// name and signature, and a minimal move-only c10::DataPtr with the members
// this project relies on (get(), operator bool, clear(), move, RAII release).
// Simulated contract (DOMAIN.md section 4): one block per stream; every
// request that fits returns the same pointer, even while an earlier DataPtr
// lives; a larger request synchronises the device, frees the old block and
// allocates round_up(request + 32, 2 MiB); releasing a DataPtr only updates
// statistics.
#pragma once
#include <stddef.h>
#include <utility>

#include "acl/acl_rt.h"

namespace c10 {

using DeleterFnPtr = void (*)(void *);

class DataPtr {
 public:
  DataPtr() noexcept = default;
  DataPtr(void *data, void *ctx, DeleterFnPtr deleter) noexcept : data_(data), ctx_(ctx), deleter_(deleter) {}
  DataPtr(const DataPtr &) = delete;
  DataPtr &operator=(const DataPtr &) = delete;
  DataPtr(DataPtr &&o) noexcept : data_(o.data_), ctx_(o.ctx_), deleter_(o.deleter_) {
    o.data_ = nullptr;
    o.ctx_ = nullptr;
    o.deleter_ = nullptr;
  }
  DataPtr &operator=(DataPtr &&o) noexcept {
    if (this != &o) {
      clear();
      std::swap(data_, o.data_);
      std::swap(ctx_, o.ctx_);
      std::swap(deleter_, o.deleter_);
    }
    return *this;
  }
  ~DataPtr() { clear(); }
  void clear() noexcept {
    DeleterFnPtr d = deleter_;
    void *c = ctx_;
    data_ = nullptr;
    ctx_ = nullptr;
    deleter_ = nullptr;
    if (d != nullptr) d(c);
  }
  void *get() const noexcept { return data_; }
  operator bool() const noexcept { return data_ != nullptr; }

 private:
  void *data_ = nullptr;
  void *ctx_ = nullptr;
  DeleterFnPtr deleter_ = nullptr;
};

}  // namespace c10

namespace c10_npu {
namespace NPUWorkspaceAllocator {
c10::DataPtr malloc_with_stream(size_t size, aclrtStream stream);
}  // namespace NPUWorkspaceAllocator
}  // namespace c10_npu
