#include "platform/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace braid {

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

namespace {

// MemAvailable + SwapFree from /proc/meminfo in bytes (SIZE_MAX without
// MemAvailable), read in one pass.
size_t meminfoRoom() {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  unsigned long long kib = 0;
  size_t available = SIZE_MAX, swapFree = 0;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == "MemAvailable:") available = static_cast<size_t>(kib) * 1024;
    if (name == "SwapFree:") swapFree = static_cast<size_t>(kib) * 1024;
  }
  return available == SIZE_MAX ? SIZE_MAX : available + swapFree;
}

// The least of limit - usage over the cgroup directory `path` under `root`
// and its ancestors (SIZE_MAX: no limit). A directory missing from this
// mount namespace (a container sees its own cgroup as the root) is skipped.
size_t cgroupRoom(const std::string& root, std::string path, const char* limitFile, const char* usageFile) {
  size_t room = SIZE_MAX;
  for (;;) {
    const std::string dir = root + (path == "/" ? std::string() : path);
    std::ifstream limitIn(dir + "/" + limitFile), usageIn(dir + "/" + usageFile);
    std::string limit;  // cgroup v2 writes "max" for none
    unsigned long long usage = 0;
    if (limitIn >> limit && limit != "max" && usageIn >> usage) {
      const unsigned long long l = std::strtoull(limit.c_str(), nullptr, 10);
      room = std::min<size_t>(room, l > usage ? static_cast<size_t>(l - usage) : 0);
    }
    if (path.empty() || path == "/") return room;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

// What this process's memory cgroup (v2, or v1's memory controller) still
// allows, or SIZE_MAX without a limit.
size_t cgroupAllowance() {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  size_t room = SIZE_MAX;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) {
      room = std::min(room, cgroupRoom("/sys/fs/cgroup", line.substr(3), "memory.max", "memory.current"));
    } else if (const size_t at = line.find(":memory:"); at != std::string::npos) {
      room = std::min(room, cgroupRoom("/sys/fs/cgroup/memory", line.substr(at + 8), "memory.limit_in_bytes",
                                       "memory.usage_in_bytes"));
    }
  }
  return room;
}

}  // namespace

Status checkMemoryAvailable(size_t bytes, const char* what) {
  const size_t host = meminfoRoom();
  const size_t cgroup = cgroupAllowance();
  if (bytes <= host && bytes <= cgroup) return okStatus();
  const bool byCgroup = cgroup < host;
  return systemError(
      "cannot reserve ", bytes, " bytes of shared host memory for ", what, ": only ",
      byCgroup ? cgroup : host, " bytes are left (",
      byCgroup ? "what the memory cgroup's limit leaves" : "MemAvailable + SwapFree in /proc/meminfo",
      "); ask for less, or free memory");
}

Status sharedMemoryCreate(size_t bytes, int* fd, void** addr) {
  *fd = -1;
  *addr = nullptr;
  BRAID_CHECK(checkMemoryAvailable(bytes, "a shared memory file"));
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
                       " (the processes must run as the same user; where they cannot open each other's "
                       "/proc/<pid>/fd, set BRAID_SHM_NAMED=1)");
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
