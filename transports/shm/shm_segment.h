// POSIX shared memory segments (/dev/shm) for connectors between processes
// of one host.
//
// The creator names the segment, reserves its memory up front (so a full
// /dev/shm is an error here, with the size needed and what to do, not a
// SIGBUS later) and unlinks the name as soon as the peer has mapped it, so a
// crash leaks nothing. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
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

  static Status create(size_t bytes, ShmSegment* out);
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
  std::string name_;
  bool linked_ = false;
};

}  // namespace braid
