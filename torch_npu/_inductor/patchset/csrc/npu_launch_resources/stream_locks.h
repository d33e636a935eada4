// npu_launch_resources: one launch at a time per stream.
//
// torch_npu's workspace allocator hands every request on a stream the same
// block, so "allocate, initialise locks, launch" must not interleave with
// another thread doing the same on that stream: the second fill would land
// before the first kernel. A plain mutex per stream, held by LaunchResources
// until the launch is issued, keeps them apart. With torch_npu's task queue
// (the default) one thread per device runs every launch and the mutex is never
// contended; it matters with TASK_QUEUE_ENABLE=0 and several Python threads.
// A launch on a capturing stream takes no stream lock: its memory comes from
// the graph's pool and is its own.
#pragma once

#include <acl/acl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "abi.h"
#include "errors.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE
namespace detail {

class StreamLock {  // move-only; unlocks on destruction
 public:
  StreamLock() noexcept = default;
  StreamLock(StreamLock &&o) noexcept : mutex_(o.mutex_), holder_(o.holder_) { o.mutex_ = nullptr; }
  StreamLock &operator=(StreamLock &&o) noexcept {
    if (this != &o) {
      unlock();
      mutex_ = o.mutex_;
      holder_ = o.holder_;
      o.mutex_ = nullptr;
    }
    return *this;
  }
  StreamLock(const StreamLock &) = delete;
  StreamLock &operator=(const StreamLock &) = delete;
  ~StreamLock() { unlock(); }

  // Takes `stream`'s mutex. ACL_ERROR_INVALID_PARAM if this thread holds it
  // already (two live launches on one stream would share memory).
  static aclError take(const char *kernel, aclrtStream stream, StreamLock *out) {  // may throw std::bad_alloc
    Slot &slot = slot_for(stream);
    if (slot.holder.load(std::memory_order_relaxed) == &thread_marker())
      return fail(ACL_ERROR_INVALID_PARAM, kernel,
                  "this thread still holds launch resources for stream %p; issue that launch first", stream);
    slot.mutex.lock();
    slot.holder.store(&thread_marker(), std::memory_order_relaxed);
    *out = StreamLock();
    out->mutex_ = &slot.mutex;
    out->holder_ = &slot.holder;
    return ACL_SUCCESS;
  }

 private:
  struct Slot {
    std::mutex mutex;
    std::atomic<const void *> holder{nullptr};  // the holding thread's marker; only ever equal to ours if we hold it
  };
  static const char &thread_marker() noexcept {
    static thread_local char marker;
    return marker;
  }
  static Slot &slot_for(aclrtStream stream) {
    static std::mutex table_mutex;
    static auto *table = new std::unordered_map<aclrtStream, std::unique_ptr<Slot>>();  // streams live as long
    std::lock_guard<std::mutex> guard(table_mutex);
    std::unique_ptr<Slot> &slot = (*table)[stream];
    if (!slot) slot.reset(new Slot());
    return *slot;
  }
  void unlock() noexcept {
    if (mutex_ == nullptr) return;
    holder_->store(nullptr, std::memory_order_relaxed);
    mutex_->unlock();
    mutex_ = nullptr;
  }

  std::mutex *mutex_ = nullptr;
  std::atomic<const void *> *holder_ = nullptr;
};

}  // namespace detail
TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
