// HOST SIMULATION stand-in for torch's at::Tensor (test double and dry-run
// tool for torch-npu-inductor-patches; not torch). It offers ONLY members the
// real at::Tensor has: default constructor, copy and move (reference
// counted), destructor, data_ptr(), defined(), reset() and storage().data()
// (what torch_npu's own generated launchers call). The only way to
// get a defined one is at_npu::native::allocate_workspace (simulated in
// acl_sim). The reference count lives in the simulation (acl_sim::detail).
#pragma once
#include <utility>

namespace acl_sim {
namespace detail {
struct TensorImpl;
void tensor_retain(TensorImpl *impl) noexcept;
void tensor_release(TensorImpl *impl) noexcept;
void *tensor_data(const TensorImpl *impl) noexcept;
struct TensorAccess;
}  // namespace detail
}  // namespace acl_sim

namespace c10 {
// Only data(), as torch_npu's generated code reads it: tensor.storage().data().
class Storage {
 public:
  explicit Storage(const void *data) noexcept : data_(data) {}
  const void *data() const noexcept { return data_; }

 private:
  const void *data_;
};
}  // namespace c10

namespace at {

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor &o) noexcept : impl_(o.impl_) {
    if (impl_ != nullptr) ::acl_sim::detail::tensor_retain(impl_);
  }
  Tensor(Tensor &&o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
  Tensor &operator=(const Tensor &o) & noexcept {
    Tensor(o).swap_(*this);
    return *this;
  }
  Tensor &operator=(Tensor &&o) & noexcept {
    Tensor(std::move(o)).swap_(*this);
    return *this;
  }
  ~Tensor() { reset(); }
  void *data_ptr() const { return impl_ != nullptr ? ::acl_sim::detail::tensor_data(impl_) : nullptr; }
  bool defined() const { return impl_ != nullptr; }
  c10::Storage storage() const { return c10::Storage(data_ptr()); }
  void reset() {
    ::acl_sim::detail::TensorImpl *p = impl_;
    impl_ = nullptr;
    if (p != nullptr) ::acl_sim::detail::tensor_release(p);
  }

 private:
  friend struct ::acl_sim::detail::TensorAccess;
  void swap_(Tensor &o) noexcept { std::swap(impl_, o.impl_); }
  ::acl_sim::detail::TensorImpl *impl_ = nullptr;
};

}  // namespace at
