// Sweep buffers in a symmetric window (ncclCommWindowRegister), so that the
// sweeps' all-reduces, all-gathers and reduce-scatters may run zero-copy,
// and the log lines that prove they did. Shared by the host backend's
// window tests and the GPU ones (tests/gpu/), whose base memory differs.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "harness.h"
#include "nccl.h"
#include "sweep_memory.h"
#include "util/strings.h"

namespace braid::test {

// The buffers of `Base` (a SweepMemory: host memory, or a GPU's) carved
// from one ncclMemAlloc arena registered as a window on the communicator
// (or as a buffer).
// Every rank makes the same allocations in the same order, so a buffer sits
// in the window on every rank or on none. Beyond the arena, Base's own.
template <typename Base>
class WindowMemory final : public Base {
 public:
  using Base::Base;

  // With `window` false the arena is registered as a buffer (ncclCommRegister)
  // instead; `memory`, when given, is the arena (the caller's to free).
  std::string open(ncclComm_t comm, size_t bytes, bool window = true, void* memory = nullptr) {
    comm_ = comm;
    size_ = bytes;
    owned_ = memory == nullptr;
    arena_ = memory;
    std::string err = owned_ ? check(ncclMemAlloc(&arena_, bytes), "ncclMemAlloc") : "";
    if (err.empty() && window)
      err = check(ncclCommWindowRegister(comm, arena_, bytes, &win_, NCCL_WIN_COLL_SYMMETRIC),
                  "ncclCommWindowRegister");
    if (err.empty() && !window) err = check(ncclCommRegister(comm, arena_, bytes, &reg_), "ncclCommRegister");
    return err;
  }
  void* arena() const { return arena_; }
  std::string close() {
    std::string err;
    if (win_ != nullptr) err += check(ncclCommWindowDeregister(comm_, win_), "ncclCommWindowDeregister");
    if (reg_ != nullptr) err += check(ncclCommDeregister(comm_, reg_), "ncclCommDeregister");
    if (arena_ != nullptr && owned_) err += check(ncclMemFree(arena_), "ncclMemFree");
    win_ = nullptr, reg_ = nullptr, arena_ = nullptr;
    return err;
  }
  // A bump allocator, rewound when every buffer is free again.
  std::string alloc(size_t bytes, void** p) override {
    const size_t need = (bytes + 63) / 64 * 64;
    if (bytes == 0 || used_ + need > size_) return Base::alloc(bytes, p);
    *p = static_cast<char*>(arena_) + used_;
    used_ += need;
    ++live_;
    return "";
  }
  void free(void* p) override {
    char* c = static_cast<char*>(p);
    if (c < static_cast<char*>(arena_) || c >= static_cast<char*>(arena_) + size_) return Base::free(p);
    if (--live_ == 0) used_ = 0;
  }

 private:
  ncclComm_t comm_ = nullptr;
  void* arena_ = nullptr;
  ncclWindow_t win_ = nullptr;
  void* reg_ = nullptr;
  bool owned_ = true;
  size_t size_ = 0, used_ = 0;
  int live_ = 0;
};

// Lines of this process's log (NCCL_DEBUG_FILE=<dir>/%p.log) holding every
// one of `parts`.
inline int logLines(const std::string& dir, std::initializer_list<std::string> parts) {
  std::ifstream in(strCat(dir, "/", getpid(), ".log"));
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& p : parts) all = all && line.find(p) != std::string::npos;
    lines += all;
  }
  return lines;
}

// What a window test's ranks log: every collective's choice and the windows.
inline std::vector<std::string> windowLogEnv(const std::string& logDir) {
  return {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL,ALLOC", "NCCL_DEBUG_FILE=" + logDir + "/%p.log"};
}

// "" if this process's log shows each collective that can run zero-copy
// doing so, the reducing ones with each built-in operator and with PreMulSum
// (operators ncclNumOps and up, which the sweeps create per datatype).
inline std::string ranZeroCopy(const std::string& logDir) {
  const std::string zeroCopy = "Direct/Simple zero-copy,";
  if (logLines(logDir, {"ncclAllGather", zeroCopy}) == 0) return "no ncclAllGather ran zero-copy";
  for (const char* name : {"ncclAllReduce", "ncclReduceScatter"}) {
    for (int op = 0; op < ncclNumOps; ++op) {
      if (logLines(logDir, {name, strCat(" op ", op, " root "), zeroCopy}) == 0)
        return strCat("no ", name, " with op ", op, " ran zero-copy");
    }
    std::ifstream in(strCat(logDir, "/", getpid(), ".log"));
    bool preMulSum = false;
    for (std::string line; !preMulSum && std::getline(in, line);) {
      const size_t at = line.find(" op ");
      preMulSum = line.find(name) != std::string::npos && line.find(zeroCopy) != std::string::npos &&
                  at != std::string::npos && std::atoi(line.c_str() + at + 4) >= ncclNumOps;
    }
    if (!preMulSum) return strCat("no ", name, " with a PreMulSum operator ran zero-copy");
  }
  return "";
}

}  // namespace braid::test
