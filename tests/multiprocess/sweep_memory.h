// Where the correctness sweeps (coll_sweep.h) keep their buffers, and how
// they reach them: host memory and the null stream (the default, for the host
// backend), or, implemented in tests/gpu/, device memory and a stream. The
// sweeps build inputs and references in host vectors, copy inputs in, run
// the collective on stream(), wait with synchronize() and copy results out;
// with host memory every copy is a memcpy and synchronize() does nothing.
//
// This header needs no GPU runtime: tests/multiprocess never links one.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"

namespace braid::test {

// Every call returns "" on success, else a message.
class SweepMemory {
 public:
  virtual ~SweepMemory() = default;
  // The stream every collective of the sweep is called with.
  virtual braidStream_t stream() const = 0;
  // `bytes` may be 0 (then *p may be null). Sweep buffers are never shared by threads.
  virtual std::string alloc(size_t bytes, void** p) = 0;
  virtual void free(void* p) = 0;
  // Host to buffer: ordered before every later collective on stream(); `src`
  // may be reused as soon as this returns.
  virtual std::string copyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Buffer to host, blocking. Not ordered after collectives still running on
  // stream(): call synchronize() first.
  virtual std::string copyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Blocks until all work on stream() is done; `comm` is the communicator
  // whose work is waited for (an implementation may report its async error).
  virtual std::string synchronize(ncclComm_t comm) = 0;
};

// Host memory and the null stream: what the sweeps always used.
class HostMemory : public SweepMemory {
 public:
  braidStream_t stream() const override { return nullptr; }
  std::string alloc(size_t bytes, void** p) override {
    *p = bytes == 0 ? nullptr : std::malloc(bytes);
    return bytes != 0 && *p == nullptr ? "out of host memory" : "";
  }
  void free(void* p) override { std::free(p); }
  std::string copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return "";
  }
  std::string copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return "";
  }
  std::string synchronize(ncclComm_t) override { return ""; }
};

// A process-wide HostMemory (it has no state: any thread may use it).
inline SweepMemory& hostMemory() {
  static HostMemory memory;
  return memory;
}

// `count` elements of T in `memory`, freed on destruction. An allocation
// failure is kept in error() and returned by every later upload/download.
template <typename T>
class SweepBuffer {
 public:
  SweepBuffer(SweepMemory& memory, size_t count) : memory_(memory), count_(count) {
    void* p = nullptr;
    error_ = memory_.alloc(count * sizeof(T), &p);
    data_ = static_cast<T*>(p);
  }
  // A buffer holding `init`.
  SweepBuffer(SweepMemory& memory, const std::vector<T>& init) : SweepBuffer(memory, init.size()) {
    if (error_.empty()) error_ = upload(init);
  }
  ~SweepBuffer() {
    if (data_ != nullptr) memory_.free(data_);
  }
  SweepBuffer(const SweepBuffer&) = delete;
  SweepBuffer& operator=(const SweepBuffer&) = delete;

  T* data() { return data_; }
  size_t size() const { return count_; }
  const std::string& error() const { return error_; }

  // `host` into elements [offset, offset + host.size()).
  std::string upload(const std::vector<T>& host, size_t offset = 0) {
    if (!error_.empty()) return error_;
    if (offset + host.size() > count_) return "upload past the end of a sweep buffer";
    return memory_.copyToDevice(data_ + offset, host.data(), host.size() * sizeof(T));
  }
  // Elements [offset, offset + count) into *host (resized to count).
  std::string download(std::vector<T>* host, size_t offset, size_t count) {
    if (!error_.empty()) return error_;
    if (offset + count > count_) return "download past the end of a sweep buffer";
    host->resize(count);
    return memory_.copyToHost(host->data(), data_ + offset, count * sizeof(T));
  }
  std::string download(std::vector<T>* host) { return download(host, 0, count_); }

 private:
  SweepMemory& memory_;
  size_t count_;
  T* data_ = nullptr;
  std::string error_;
};

}  // namespace braid::test
