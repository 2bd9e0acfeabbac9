#include "platform/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace braid {

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

Status sharedMemoryCreate(size_t bytes, int* fd, void** addr) {
  *fd = -1;
  *addr = nullptr;
  int f = memfd_create("braid-mem", MFD_CLOEXEC);
  if (f < 0) return systemError("memfd_create failed: ", std::strerror(errno));
  if (ftruncate(f, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(f);
    return systemError("cannot size shared memory to ", bytes, " bytes: ", std::strerror(e));
  }
  // Reserve the pages now: without this, a full memory limit surfaces as
  // SIGBUS on the first touch of a page.
  const int err = posix_fallocate(f, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(f);
    return systemError("cannot reserve ", bytes, " bytes of shared host memory: ", std::strerror(err),
                       " (free memory, or raise the memory limit)");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(f);
    return systemError("cannot map ", bytes, " bytes of shared memory: ", std::strerror(e));
  }
  *fd = f;
  *addr = p;
  return okStatus();
}

void sharedMemoryDestroy(int fd, void* addr, size_t bytes) {
  if (addr != nullptr) munmap(addr, bytes);
  if (fd >= 0) close(fd);
}

Status sharedMemoryMapPeer(pid_t pid, int fd, size_t offset, size_t bytes, void** addr) {
  *addr = nullptr;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int f = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) {
    return systemError("cannot open process ", pid, "'s shared memory (", path, "): ", std::strerror(errno),
                       " (the processes must run as the same user)");
  }
  // Pages past the file's end (the descriptor closed and reused for a
  // shorter file meanwhile) would fault on first touch: refuse them here.
  struct stat st;
  if (fstat(f, &st) != 0 ||
      (static_cast<uint64_t>(st.st_size) + pageBytes() - 1) / pageBytes() * pageBytes() < offset + bytes) {
    close(f);
    return systemError("process ", pid, "'s shared memory (", path, ") is not the ", offset + bytes,
                       " bytes expected: did that rank leave?");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, static_cast<off_t>(offset));
  const int e = errno;
  close(f);  // the mapping keeps the memory
  if (p == MAP_FAILED) {
    return systemError("cannot map ", bytes, " bytes of process ", pid,
                       "'s shared memory: ", std::strerror(e));
  }
  *addr = p;
  return okStatus();
}

void sharedMemoryUnmap(void* addr, size_t bytes) {
  if (addr != nullptr) munmap(addr, bytes);
}

uint64_t pidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino) ^ (static_cast<uint64_t>(st.st_dev) << 32);
}

}  // namespace braid
