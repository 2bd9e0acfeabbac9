#include "check.h"

#include <unistd.h>

#include <cstdarg>

namespace perf {

void die(const char* file, int line, const char* fmt, ...) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s:%d: [%s pid %d] %s\n", file, line, host, static_cast<int>(getpid()), msg);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

void ncclFailed(const char* call, const char* file, int line, ncclResult_t result) {
  const char* last = ncclGetLastError(nullptr);
  die(file, line, "%s failed: %s (%d)%s%s", call, ncclGetErrorString(result), static_cast<int>(result),
      last && *last ? ": " : "", last ? last : "");
}

}  // namespace perf
