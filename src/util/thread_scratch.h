// Storage a function reuses across its calls on one thread, so that a hot
// path does not allocate every time (vectors keep their capacity when
// cleared). A nested call on the same thread, while the storage is still
// in use, gets a fresh object of its own instead. The caller clears what it
// needs; `Tag` tells apart uses of one type.
#pragma once

namespace braid {

template <typename T, typename Tag>
class ThreadScratch {
 public:
  ThreadScratch() {
    State& s = state();
    if (!s.busy) s.busy = true, owner_ = &s, ptr_ = &s.value;
  }
  ~ThreadScratch() {
    if (owner_ != nullptr) owner_->busy = false;
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;

  T& operator*() { return *ptr_; }
  T* operator->() { return ptr_; }

 private:
  struct State {
    T value{};
    bool busy = false;
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  State* owner_ = nullptr;
  T fresh_{};
  T* ptr_ = &fresh_;
};

}  // namespace braid
