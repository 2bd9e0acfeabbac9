#include "harness.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace braid::test {
namespace {

void applyEnv(const std::vector<std::string>& env) {
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq != std::string::npos) setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
  }
}

bool writeAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void RootProcess::kill() {
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

RootProcess startRootProcess(const std::vector<std::string>& env) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  RootProcess rp;
  rp.pid = fork();
  if (rp.pid == 0) {
    close(fds[0]);
    applyEnv(env);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
    writeAll(fds[1], &id, sizeof(id));
    close(fds[1]);
    while (true) pause();  // the root thread serves until we are killed
  }
  close(fds[1]);
  size_t got = 0;
  while (got < sizeof(rp.id)) {
    ssize_t n = read(fds[0], reinterpret_cast<char*>(&rp.id) + got, sizeof(rp.id) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  if (got != sizeof(rp.id)) std::memset(&rp.id, 0, sizeof(rp.id));
  return rp;
}

std::vector<RankOutcome> runRanks(int nranks, const RankBody& body, double timeoutSec,
                                  const std::vector<std::string>& env) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  std::vector<RankOutcome> out(static_cast<size_t>(nranks));
  std::vector<pid_t> pids(static_cast<size_t>(nranks), -1);
  std::vector<int> pipes(static_cast<size_t>(nranks), -1);
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      applyEnv(env);
      std::string report = body(r, nranks);
      writeAll(fds[1], report.data(), report.size());
      close(fds[1]);
      _exit(report.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids[static_cast<size_t>(r)] = pid;
    pipes[static_cast<size_t>(r)] = fds[0];
  }
  int left = nranks;
  while (left > 0) {
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    for (int r = 0; r < nranks; ++r) {
      size_t i = static_cast<size_t>(r);
      if (pids[i] < 0) continue;
      // Drain the report pipe so a long report cannot block the child.
      char buf[4096];
      pollfd p{pipes[i], POLLIN, 0};
      while (poll(&p, 1, 0) > 0) {
        ssize_t n = read(pipes[i], buf, sizeof(buf));
        if (n <= 0) break;
        out[i].report.append(buf, static_cast<size_t>(n));
      }
      int status = 0;
      pid_t done = waitpid(pids[i], &status, WNOHANG);
      if (done == pids[i] || (elapsed > timeoutSec && done == 0)) {
        if (done == 0) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], &status, 0);
          out[i].timedOut = true;
        }
        while (true) {
          ssize_t n = read(pipes[i], buf, sizeof(buf));
          if (n <= 0) break;
          out[i].report.append(buf, static_cast<size_t>(n));
        }
        close(pipes[i]);
        out[i].exited = !out[i].timedOut && WIFEXITED(status);
        out[i].exitCode = out[i].exited ? WEXITSTATUS(status) : -1;
        if (!out[i].exited && !out[i].timedOut && out[i].report.empty()) {
          out[i].report = "killed by signal " + std::to_string(WTERMSIG(status));
        }
        if (out[i].timedOut) out[i].report += " [timed out]";
        out[i].seconds = elapsed;
        pids[i] = -1;
        --left;
      }
    }
    usleep(2000);
  }
  return out;
}

std::string describeFailures(const std::vector<RankOutcome>& outcomes) {
  std::string text;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (!outcomes[r].report.empty() || !outcomes[r].exited || outcomes[r].exitCode != 0) {
      text += "rank " + std::to_string(r) + ": " + outcomes[r].report + "\n";
    }
  }
  return text;
}

std::string check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return "";
  return std::string(what) + " returned " + std::to_string(result) + " (" + ncclGetErrorString(result) +
         "): " + ncclGetLastError(nullptr);
}

ScopedTempDir::ScopedTempDir(const std::string& prefix) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

}  // namespace braid::test
