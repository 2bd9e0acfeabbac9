// Shared memory for connectors between processes of one host, and plain
// memory for peers in the same process (threads of ncclCommInitAll), with
// the same interface.
//
// Between processes the creator reserves the segment's memory up front in
// /dev/shm (so a full /dev/shm is an error here, with the size needed and
// what to do, not a SIGBUS later) and shares it one of two ways:
//  - Descriptor (the default where the peer sees this process's pid): an
//    unnamed file of /dev/shm (O_TMPFILE), which the peer opens through
//    /proc/<pid>/fd/<fd> while the creator holds the descriptor. No name
//    ever exists, so nothing is left behind however the processes end.
//  - Name (peers in another PID namespace, or BRAID_SHM_NAMED=1): a POSIX
//    shared-memory name, unlinked as soon as the peer has mapped it; a
//    process killed between the two leaves the name in /dev/shm.
// A process-local segment ("local:N") is heap memory found by name in a
// process-wide table until withdrawn; each end holds a reference, so either
// may go first. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "util/status.h"

namespace braid {

enum class ShmShare {
  ProcessLocal,  // the peer is a thread of this process
  Descriptor,    // an unnamed file; the peer opens it through /proc
  Name,          // a /dev/shm name until the peer has mapped it
};

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Where the descriptor form cannot be made (no O_TMPFILE in /dev/shm),
  // it falls back to a name.
  static Status create(size_t bytes, ShmShare how, ShmSegment* out);
  // Maps the segment `name` (as create gave it, on the creating side).
  static Status open(const std::string& name, size_t bytes, ShmSegment* out);
  // Once the peer has mapped it: removes the name, or closes the descriptor
  // the peer opened it through (the mappings stay valid). Idempotent.
  void withdraw();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> local_;  // process-local memory (no mapping)
  std::string name_;
  bool linked_ = false;  // others may still open it by name_
  int fd_ = -1;          // Descriptor: what name_ refers to, held until withdrawn
};

}  // namespace braid
