#include "transports/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "util/strings.h"

namespace braid {
namespace {
std::atomic<uint64_t> gCounter{0};
}  // namespace

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_ = other.size_;
    name_ = std::move(other.name_);
    linked_ = other.linked_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.linked_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
}

void ShmSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

Status ShmSegment::create(size_t bytes, ShmSegment* out) {
  std::string name = strCat("/braid-", getpid(), "-", gCounter.fetch_add(1), "-", std::hex,
                            static_cast<unsigned>(reinterpret_cast<uintptr_t>(out) >> 4) ^ static_cast<unsigned>(time(nullptr)));
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return errnoError(strCat("shm_open ", name), errno);
  ShmSegment seg;
  seg.name_ = name;
  seg.linked_ = true;
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    if (err == ENOSPC) {
      return systemError("/dev/shm is full: Braid needs ", bytes, " more bytes for a connector (", name,
                         "); free space in /dev/shm or enlarge it (docker: --shm-size)");
    }
    return errnoError(strCat("reserving ", bytes, " bytes of shared memory"), err);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errnoError("mmap of shared memory", errno);
  seg.data_ = p;
  seg.size_ = bytes;
  *out = std::move(seg);
  return okStatus();
}

Status ShmSegment::open(const std::string& name, size_t bytes, ShmSegment* out) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return errnoError(strCat("shm_open ", name, " (the peer's segment)"), errno);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errnoError("mmap of the peer's shared memory", errno);
  ShmSegment seg;
  seg.name_ = name;
  seg.data_ = p;
  seg.size_ = bytes;
  *out = std::move(seg);
  return okStatus();
}

}  // namespace braid
