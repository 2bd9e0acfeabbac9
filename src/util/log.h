// Logging, NCCL-style.
//
//   NCCL_DEBUG        NONE | VERSION | WARN | INFO | ABORT | TRACE (default WARN);
//                     ABORT logs as INFO does and aborts the process after
//                     the first WARN line, as NCCL's does
//   NCCL_DEBUG_SUBSYS comma list of INIT, COLL, P2P, SHM, NET, GRAPH, TUNING,
//                     ENV, ALLOC, CALL, PROXY, BOOTSTRAP, REG, ALL; a leading
//                     (NCCL's NVLS, PROFILE and RAS are accepted and select
//                     nothing: Braid logs nothing under them)
//                     '^' logs everything except those (default INIT,BOOTSTRAP,ENV)
//   NCCL_DEBUG_FILE   file to write to instead of stderr; %h = host, %p = pid
// (BRAID_ spellings win, as for every parameter.)
//
// A line reads  "host:pid:tid [rank R] BRAID INFO INIT message", the rank part
// present while the thread works for a communicator (see LogRankScope).
// WARN lines are printed whatever the subsystem filter. Safe from any thread:
// each line is written with one call under a lock.
#pragma once

#include <cstdint>

namespace braid {

// The order is NCCL's: ABORT sits between INFO and TRACE.
enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Abort = 4, Trace = 5 };

enum LogSubsys : uint64_t {
  kLogInit = 1u << 0,
  kLogColl = 1u << 1,
  kLogP2p = 1u << 2,
  kLogShm = 1u << 3,
  kLogNet = 1u << 4,
  kLogGraph = 1u << 5,
  kLogTuning = 1u << 6,
  kLogEnv = 1u << 7,
  kLogAlloc = 1u << 8,
  kLogCall = 1u << 9,
  kLogProxy = 1u << 10,
  kLogBootstrap = 1u << 11,
  kLogReg = 1u << 12,
  // NCCL's names for subsystems Braid does not have; nothing logs under them.
  kLogNvls = 1u << 13,
  kLogProfile = 1u << 14,
  kLogRas = 1u << 15,
  kLogAll = ~uint64_t(0),
};

// True if a message of this level and subsystem would be printed.
bool logEnabled(LogLevel level, uint64_t subsys);
void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Re-reads the logging parameters (after ParamRegistry::reload()).
void logReset();
// Prints the version banner once per process at VERSION level and above.
void logVersionOnce();

// Tags this thread's log lines with a communicator's rank while alive.
class LogRankScope {
 public:
  explicit LogRankScope(int rank);
  ~LogRankScope();
  LogRankScope(const LogRankScope&) = delete;
  LogRankScope& operator=(const LogRankScope&) = delete;

 private:
  int saved_;
};

}  // namespace braid

#define BRAID_LOG_(level, subsys, ...)                                                  \
  do {                                                                                  \
    if (::braid::logEnabled(level, subsys))                                             \
      ::braid::logMessage(level, subsys, __FILE__, __LINE__, __VA_ARGS__);              \
  } while (0)
#define BRAID_WARN(...) BRAID_LOG_(::braid::LogLevel::Warn, ::braid::kLogAll, __VA_ARGS__)
#define BRAID_INFO(subsys, ...) BRAID_LOG_(::braid::LogLevel::Info, subsys, __VA_ARGS__)
#define BRAID_TRACE(subsys, ...) BRAID_LOG_(::braid::LogLevel::Trace, subsys, __VA_ARGS__)
