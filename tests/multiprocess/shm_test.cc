// Connector memory in /dev/shm between forked ranks (transports/shm), each
// job in a mount namespace of its own with a fresh /dev/shm (a small tmpfs),
// so what the ranks leave there is seen exactly and nothing else writes to
// it: a full /dev/shm is an error that says how many bytes were needed and
// what to do, on every rank, and ranks killed while a connector is being set
// up leave nothing behind (unless BRAID_SHM_NAMED=1 asked for names, which
// then stay: the test can see a leak). Making the namespace needs root
// (CAP_SYS_ADMIN); elsewhere the tests skip.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "nccl.h"

namespace braid::test {
namespace {

const bool kHostBackend = (setenv("BRAID_BACKEND", "host", 0), true);

constexpr int kNoNamespace = 77;

// The entries of /dev/shm, space-separated ("" when empty).
std::string devShmEntries() {
  std::string names;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return "(cannot list /dev/shm)";
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names += names.empty() ? e->d_name : std::string(" ") + e->d_name;
  }
  closedir(d);
  return names;
}

// Runs `body` in a forked child with its own mount namespace and a tmpfs of
// `size` on /dev/shm. Returns body's text ("" = success), or sets *skipped
// where the namespace cannot be made.
std::string withOwnDevShm(const char* size, const std::function<std::string()>& body, bool* skipped) {
  *skipped = false;
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    close(fds[0]);
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
              (std::string("mode=1777,size=") + size).c_str()) != 0) {
      const std::string why = std::strerror(errno);
      (void)!write(fds[1], why.data(), why.size());
      _exit(kNoNamespace);
    }
    const std::string text = body();
    (void)!write(fds[1], text.data(), text.size());
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kNoNamespace) {
    *skipped = true;
    return "no mount namespace of our own: " + text;
  }
  if (!WIFEXITED(status)) return "the job's process died: " + text;
  return text;
}

// Two ranks whose first collective needs connectors larger than a 1 MiB
// /dev/shm: both fail with the error, and nothing is left there.
std::string fullDevShmJob(const std::vector<std::string>& env) {
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        ncclComm_t comm = nullptr;
        ncclResult_t r = ncclCommInitRank(&comm, nranks, root.id, rank);
        std::vector<float> buf(1024, 1.0f);
        if (r == ncclSuccess)
          r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
        const std::string text = ncclGetLastError(comm);
        if (comm != nullptr) ncclCommAbort(comm);
        if (r == ncclSuccess) return "succeeded in a 1 MiB /dev/shm";
        if (r != ncclSystemError) return "expected ncclSystemError, got " + std::to_string(r) + ": " + text;
        for (const char* part : {"/dev/shm is full", " more bytes for a connector", "--shm-size"}) {
          if (text.find(part) == std::string::npos)
            return std::string("the error lacks '") + part + "': " + text;
        }
        return "";
      },
      60, env);
  std::string failures = describeFailures(out);
  const std::string left = devShmEntries();
  if (!left.empty()) failures += " left in /dev/shm: " + left;
  return failures;
}

TEST(ShmSegments, AFullDevShmIsAnErrorSayingHowMuchAndWhatToDo) {
  for (const char* named : {"0", "1"}) {
    bool skipped = false;
    const std::string text = withOwnDevShm(
        "1m",
        [&] {
          return fullDevShmJob({"BRAID_BOOTSTRAP_TIMEOUT=10", std::string("BRAID_SHM_NAMED=") + named});
        },
        &skipped);
    if (skipped) GTEST_SKIP() << text;
    EXPECT_EQ(text, "") << "BRAID_SHM_NAMED=" << named;
  }
}

// Rank 0 posts a receive from rank 1, which is alive but never sends, so
// rank 0's segment waits for a peer that never maps it; both ranks are then
// SIGKILLed. Returns what /dev/shm holds afterwards.
std::string killedDuringSetupJob(const std::vector<std::string>& env, std::string* failures) {
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1024);
        if (rank == 0) {
          std::thread([] {
            usleep(1000000);
            kill(getpid(), SIGKILL);
          }).detach();
          err = check(ncclRecv(buf.data(), buf.size(), ncclFloat, 1, comm, nullptr), "recv");
          return "still alive after the recv: " + err;
        }
        usleep(2000000);
        kill(getpid(), SIGKILL);
        return "still alive";
      },
      60, env);
  for (const RankOutcome& o : out) {
    if (o.exited || o.timedOut) *failures += "a rank was not SIGKILLed: " + describeFailures(out);
  }
  return devShmEntries();
}

TEST(ShmSegments, RanksKilledDuringConnectorSetupLeaveNothing) {
  const std::vector<std::string> env = {"BRAID_BOOTSTRAP_TIMEOUT=20", "NCCL_DEBUG=WARN"};
  bool skipped = false;
  std::string failures;
  std::string text = withOwnDevShm(
      "64m", [&] { return killedDuringSetupJob(env, &failures) + failures; }, &skipped);
  if (skipped) GTEST_SKIP() << text;
  EXPECT_EQ(text, "");
  // The same with names: the segment's name outlives the ranks, so this
  // test does reach the window that unnamed files close.
  std::vector<std::string> named = env;
  named.push_back("BRAID_SHM_NAMED=1");
  failures.clear();
  text = withOwnDevShm(
      "64m", [&] { return killedDuringSetupJob(named, &failures) + failures; }, &skipped);
  EXPECT_EQ(text.rfind("braid-", 0), 0u) << "expected a leftover name, got '" << text << "'";
}

}  // namespace
}  // namespace braid::test
