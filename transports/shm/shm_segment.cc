#include "transports/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "util/strings.h"

namespace braid {
namespace {
std::atomic<uint64_t> gCounter{0};

constexpr const char* kLocalPrefix = "local:";

// Process-local segments by name, from create to unlink.
std::mutex gLocalMutex;
std::map<std::string, std::shared_ptr<void>>& localSegments() {
  static auto* table = new std::map<std::string, std::shared_ptr<void>>();
  return *table;
}
bool isLocal(const std::string& name) { return name.rfind(kLocalPrefix, 0) == 0; }
}  // namespace

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_ = other.size_;
    local_ = std::move(other.local_);
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
  if (data_ != nullptr && !local_) munmap(data_, size_);
  local_.reset();
  data_ = nullptr;
}

void ShmSegment::unlink() {
  if (linked_) {
    if (isLocal(name_)) {
      std::lock_guard<std::mutex> lock(gLocalMutex);
      localSegments().erase(name_);
    } else {
      shm_unlink(name_.c_str());
    }
  }
  linked_ = false;
}

Status ShmSegment::create(size_t bytes, bool processLocal, ShmSegment* out) {
  if (processLocal) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) return systemError("out of host memory: ", bytes, " bytes for an in-process connector");
    std::memset(p, 0, bytes);
    ShmSegment seg;
    seg.local_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    seg.name_ = strCat(kLocalPrefix, gCounter.fetch_add(1));
    seg.linked_ = true;
    seg.data_ = p;
    seg.size_ = bytes;
    {
      std::lock_guard<std::mutex> lock(gLocalMutex);
      localSegments()[seg.name_] = seg.local_;
    }
    *out = std::move(seg);
    return okStatus();
  }
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
  if (isLocal(name)) {
    ShmSegment seg;
    {
      std::lock_guard<std::mutex> lock(gLocalMutex);
      auto it = localSegments().find(name);
      if (it == localSegments().end()) {
        return internalError("in-process segment ", name, " is not known: the peer is not in this process, or gone");
      }
      seg.local_ = it->second;
    }
    seg.name_ = name;
    seg.data_ = seg.local_.get();
    seg.size_ = bytes;
    *out = std::move(seg);
    return okStatus();
  }
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
