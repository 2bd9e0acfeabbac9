#include "util/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "util/param.h"
#include "util/strings.h"

namespace braid {
namespace {

struct SubsysName {
  const char* name;
  uint64_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kLogInit},   {"COLL", kLogColl},   {"P2P", kLogP2p},       {"SHM", kLogShm},
    {"NET", kLogNet},     {"GRAPH", kLogGraph}, {"TUNING", kLogTuning}, {"ENV", kLogEnv},
    {"ALLOC", kLogAlloc}, {"CALL", kLogCall},   {"PROXY", kLogProxy},   {"BOOTSTRAP", kLogBootstrap},
    {"REG", kLogReg},     {"NVLS", kLogNvls},   {"PROFILE", kLogProfile}, {"RAS", kLogRas},
    {"ALL", kLogAll},
};

const char* subsysName(uint64_t subsys) {
  for (const SubsysName& s : kSubsysNames) {
    if (s.bit == subsys) return s.name;
  }
  return "ALL";
}

// Parses "INIT,NET" or "^COLL"; unknown names are an error.
Status parseSubsys(const std::string& text, uint64_t* mask) {
  std::string list = trim(text);
  bool invert = !list.empty() && list[0] == '^';
  if (invert) list.erase(0, 1);
  uint64_t bits = 0;
  for (const std::string& raw : splitString(list, ',')) {
    std::string name = toUpper(trim(raw));
    if (name.empty()) continue;
    bool found = false;
    for (const SubsysName& s : kSubsysNames) {
      if (name == s.name) {
        bits |= s.bit;
        found = true;
      }
    }
    if (!found) {
      std::string known;
      for (const SubsysName& s : kSubsysNames) known += (known.empty() ? "" : ", ") + std::string(s.name);
      return invalidArgument("unknown subsystem '", name, "' (known: ", known, ")");
    }
  }
  if (mask != nullptr) *mask = invert ? ~bits : bits;
  return okStatus();
}

Status validateSubsys(const std::string& text) { return parseSubsys(text, nullptr); }

StringParam paramDebug("DEBUG", "WARN",
                       "Log level: NONE, VERSION, WARN, INFO, ABORT (INFO, and abort the process "
                       "after the first WARN) or TRACE",
                       {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"});
StringParam paramDebugSubsys("DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV",
                             "Subsystems logged at INFO and TRACE: a comma list of INIT, COLL, P2P, "
                             "SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, PROXY, BOOTSTRAP, REG, ALL "
                             "(NCCL's NVLS, PROFILE and RAS are accepted and log nothing); "
                             "'^' in front logs all but those",
                             {}, validateSubsys);
StringParam paramDebugFile("DEBUG_FILE", "",
                           "Write the log to this file instead of stderr; %h is replaced by the "
                           "host name and %p by the process id");

std::mutex gMutex;
std::atomic<bool> gConfigured{false};
std::atomic<int> gLevel{static_cast<int>(LogLevel::Warn)};
std::atomic<uint64_t> gMask{kLogInit | kLogBootstrap | kLogEnv};
FILE* gFile = nullptr;  // guarded by gMutex; stderr when null
std::string gHost;
thread_local int tlsRank = -1;

std::string shortHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  std::string host(buf);
  size_t dot = host.find('.');
  return dot == std::string::npos ? host : host.substr(0, dot);
}

std::string expandFileName(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        out += gHost;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

LogLevel levelFromName(const std::string& name) {
  if (name == "NONE") return LogLevel::None;
  if (name == "VERSION") return LogLevel::Version;
  if (name == "INFO") return LogLevel::Info;
  if (name == "ABORT") return LogLevel::Abort;
  if (name == "TRACE") return LogLevel::Trace;
  return LogLevel::Warn;
}

// Caller holds gMutex.
void configureLocked() {
  gHost = shortHostName();
  gLevel.store(static_cast<int>(levelFromName(paramDebug.get())), std::memory_order_relaxed);
  uint64_t mask = kLogInit | kLogBootstrap | kLogEnv;
  parseSubsys(paramDebugSubsys.get(), &mask).ignore();  // a bad value keeps the default
  gMask.store(mask, std::memory_order_relaxed);
  if (gFile != nullptr) {
    fclose(gFile);
    gFile = nullptr;
  }
  std::string file = paramDebugFile.get();
  if (!file.empty()) {
    std::string path = expandFileName(file);
    gFile = fopen(path.c_str(), "ae");  // not inherited by programs the process execs
    if (gFile == nullptr) {
      fprintf(stderr, "%s:%d BRAID WARN cannot open NCCL_DEBUG_FILE '%s' (%s); logging to stderr\n",
              gHost.c_str(), getpid(), path.c_str(), strerror(errno));
    } else {
      setvbuf(gFile, nullptr, _IOLBF, 0);
    }
  }
  gConfigured.store(true, std::memory_order_release);
}

void ensureConfigured() {
  if (gConfigured.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(gMutex);
  if (!gConfigured.load(std::memory_order_relaxed)) configureLocked();
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::Version: return "VERSION";
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Abort: return "ABORT";
    case LogLevel::Trace: return "TRACE";
    case LogLevel::None: break;
  }
  return "NONE";
}

}  // namespace

bool logEnabled(LogLevel level, uint64_t subsys) {
  ensureConfigured();
  if (static_cast<int>(level) > gLevel.load(std::memory_order_relaxed)) return false;
  if (level <= LogLevel::Warn) return true;
  return (gMask.load(std::memory_order_relaxed) & subsys) != 0;
}

void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  char body[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(body, sizeof(body), fmt, args);
  va_end(args);

  char rank[32] = "";
  if (tlsRank >= 0) snprintf(rank, sizeof(rank), " [rank %d]", tlsRank);
  char where[128] = "";
  if (level == LogLevel::Trace) {
    const char* base = strrchr(file, '/');
    snprintf(where, sizeof(where), " %s:%d", base ? base + 1 : file, line);
  }
  const char* sub = level == LogLevel::Info || level == LogLevel::Trace ? subsysName(subsys) : "";

  std::lock_guard<std::mutex> lock(gMutex);
  char out[2400];
  int n = snprintf(out, sizeof(out), "%s:%d:%ld%s BRAID %s%s%s%s %s\n", gHost.c_str(), getpid(),
                   static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), *sub ? " " : "",
                   sub, where, body);
  if (n < 0) return;
  size_t len = std::min(static_cast<size_t>(n), sizeof(out) - 1);
  if (len > 0 && out[len - 1] != '\n') out[len - 1] = '\n';  // truncated line still ends
  fwrite(out, 1, len, gFile != nullptr ? gFile : stderr);
  if (level == LogLevel::Warn && gLevel.load(std::memory_order_relaxed) ==
                                     static_cast<int>(LogLevel::Abort)) {
    fflush(gFile != nullptr ? gFile : stderr);
    fprintf(stderr, "%s:%d BRAID ABORT after the WARN above (NCCL_DEBUG=ABORT)\n", gHost.c_str(),
            getpid());
    abort();
  }
}

void logReset() {
  std::lock_guard<std::mutex> lock(gMutex);
  configureLocked();
}

void logVersionOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Only when the user asked for logging: the default WARN level is for
    // problems, and a banner from every rank of a large job is noise.
    if (paramDebug.source() == ParamSource::Default) return;
    BRAID_LOG_(LogLevel::Version, kLogInit, "Braid %d.%d.%d (NCCL %d.%d.%d API), flavor %s",
               BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
               BRAID_GPU_FLAVOR);
  });
}

LogRankScope::LogRankScope(int rank) : saved_(tlsRank) { tlsRank = rank; }
LogRankScope::~LogRankScope() { tlsRank = saved_; }

}  // namespace braid
