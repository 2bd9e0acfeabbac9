// Runs ranks as real forked processes over real sockets.
//
// The parent (the gtest process) never calls Braid itself: it only forks,
// so no Braid thread or lock is ever inherited by a child. The unique id is
// made by a separate "root process" that holds the bootstrap root, as the
// process calling ncclGetUniqueId does in a real job; tests may kill it.
// Each rank reports one line of text back through a pipe ("" = success).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace braid::test {

struct RootProcess {
  pid_t pid = -1;
  ncclUniqueId id{};
  void kill();  // SIGKILL and reap; the root dies with it
  RootProcess() = default;
  RootProcess(RootProcess&& o) noexcept : pid(o.pid), id(o.id) { o.pid = -1; }
  RootProcess& operator=(RootProcess&&) = delete;
  RootProcess(const RootProcess&) = delete;
  ~RootProcess() { kill(); }
};

// Forks a process that calls ncclGetUniqueId and then waits (holding the
// root) until killed. `env` entries ("NAME=value") are set in it first.
RootProcess startRootProcess(const std::vector<std::string>& env = {});

struct RankOutcome {
  bool exited = false;   // exited normally (else killed by a signal or timed out)
  int exitCode = -1;
  bool timedOut = false;
  std::string report;    // what the rank's body returned ("" = success)
  double seconds = 0;    // from fork to exit
};

using RankBody = std::function<std::string(int rank, int nranks)>;

// Runs body in nranks processes; kills everything still running after
// timeoutSec. `env` is set in every rank before body runs.
std::vector<RankOutcome> runRanks(int nranks, const RankBody& body, double timeoutSec,
                                  const std::vector<std::string>& env = {});

// "rank r: <report>" for every rank whose report is not "" (for messages).
std::string describeFailures(const std::vector<RankOutcome>& outcomes);

// ncclResult_t and ncclGetLastError as one report line: "" on success.
std::string check(ncclResult_t result, const char* what);

// A fresh directory under the temporary directory (mkdtemp), removed with
// everything in it when the test's object goes out of scope. Ranks end with
// _exit, so only the test process ever removes it.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix);
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }  // "" if it could not be made

 private:
  std::string path_;
};

}  // namespace braid::test
