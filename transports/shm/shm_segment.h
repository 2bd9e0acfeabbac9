// POSIX shared memory segments (/dev/shm) for connectors between processes
// of one host, and plain memory for peers in the same process (threads of
// ncclCommInitAll), with the same interface.
//
// The creator names the segment, reserves its memory up front (so a full
// /dev/shm is an error here, with the size needed and what to do, not a
// SIGBUS later) and unlinks the name as soon as the peer has mapped it, so a
// crash leaks nothing. A process-local segment ("local:N") is heap memory
// found by name in a process-wide table until unlinked; each end holds a
// reference, so either may go first. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "util/status.h"

namespace braid {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // `processLocal`: the peer that will open it is a thread of this process.
  static Status create(size_t bytes, bool processLocal, ShmSegment* out);
  static Status open(const std::string& name, size_t bytes, ShmSegment* out);
  // Removes the name (the mapping stays valid). Idempotent.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> local_;  // process-local memory (no mapping)
  std::string name_;
  bool linked_ = false;
};

}  // namespace braid
