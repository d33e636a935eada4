// HOST SIMULATION stand-in for torch's c10/core/Allocator.h (test double; not
// torch). Only what the launch helper and torch_npu's caching allocator use of
// it: DataPtr (a unique pointer to device memory with the context its deleter
// frees; move-only) and Allocator::allocate, each member as torch declares it
// (test/test_sim_allocator_surface.py holds them to the installed torch's
// c10/core/Allocator.h and c10/util/UniqueVoidPtr.h, and compiles one use of
// every member against both).
#pragma once
#include <stddef.h>

#include <utility>

#include "c10/core/Device.h"

namespace c10 {

using DeleterFnPtr = void (*)(void *);  // c10/util/UniqueVoidPtr.h

class DataPtr {
 public:
  DataPtr() : device_(DeviceType::CPU) {}
  DataPtr(void *data, void *ctx, DeleterFnPtr ctx_deleter, Device device)
      : data_(data), ctx_(ctx), deleter_(ctx_deleter), device_(device) {}
  DataPtr(DataPtr &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        ctx_(std::exchange(other.ctx_, nullptr)),
        deleter_(other.deleter_),
        device_(other.device_) {}
  DataPtr &operator=(DataPtr &&other) noexcept {
    DataPtr(std::move(other)).swap_(*this);
    return *this;
  }
  DataPtr(const DataPtr &) = delete;
  DataPtr &operator=(const DataPtr &) = delete;
  ~DataPtr() { clear(); }
  // The context goes to its deleter (UniqueVoidPtr::clear: unique_ptr::reset), the data pointer is dropped.
  void clear() {
    data_ = nullptr;
    void *ctx = std::exchange(ctx_, nullptr);
    if (ctx != nullptr && deleter_ != nullptr) deleter_(ctx);  // torch: a null deleter is deleteNothing
  }
  void *get() const { return data_; }
  operator bool() const { return data_ != nullptr; }
  // The context, which no longer goes to the deleter; get() still answers the data pointer.
  void *release_context() { return std::exchange(ctx_, nullptr); }
  DeleterFnPtr get_deleter() const { return deleter_; }

 private:
  void swap_(DataPtr &o) noexcept {
    std::swap(data_, o.data_), std::swap(ctx_, o.ctx_), std::swap(deleter_, o.deleter_), std::swap(device_, o.device_);
  }
  void *data_ = nullptr;
  void *ctx_ = nullptr;
  DeleterFnPtr deleter_ = nullptr;
  Device device_;
};

struct Allocator {
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t n) = 0;
};

}  // namespace c10
