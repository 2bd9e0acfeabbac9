// Connector memory in /dev/shm between forked ranks (transports/shm), each
// job in a mount namespace of its own with a fresh /dev/shm (a small tmpfs),
// so what the ranks leave there is seen exactly and nothing else writes to
// it: a full /dev/shm is an error that says how many bytes were needed and
// what to do, on every rank, and ranks killed while a connector is being set
// up leave nothing behind (unless BRAID_SHM_NAMED=1 asked for names, which
// then stay: the test can see a leak). A rank in a PID namespace of its own
// (as in a container sharing the host's /dev/shm) still gets its
// connectors, by name. Making the namespaces needs root (CAP_SYS_ADMIN);
// elsewhere the tests skip.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
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

constexpr const char* kSkip = "skip: ";

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

// Runs `body` in a forked child and returns what it returned, or why the
// child died.
std::string inChild(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
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
  return WIFEXITED(status) ? text : "the child process died: " + text;
}

// Runs `body` in a forked child with its own mount namespace and a tmpfs of
// `size` on /dev/shm. Returns body's text ("" = success), or sets *skipped
// where the namespace cannot be made.
std::string withOwnDevShm(const char* size, const std::function<std::string()>& body, bool* skipped) {
  const std::string text = inChild([&]() -> std::string {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
              (std::string("mode=1777,size=") + size).c_str()) != 0) {
      return std::string(kSkip) + "no mount namespace of our own: " + std::strerror(errno);
    }
    return body();
  });
  *skipped = text.rfind(kSkip, 0) == 0;
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

// An all-reduce and a send/recv ring over every rank, checked.
std::string collectivesJob(const ncclUniqueId& id, int rank, int nranks) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, nranks, id, rank), "init");
  if (!err.empty()) return err;
  const size_t count = 1 << 18;
  std::vector<float> buf(count), got(count);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * (i % 97));
  err = check(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr), "allreduce");
  const float ranks = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t i = 0; err.empty() && i < count; ++i) {
    if (buf[i] != ranks * static_cast<float>(i % 97)) err = "allreduce: wrong value at " + std::to_string(i);
  }
  if (err.empty()) {
    ncclGroupStart();
    ncclSend(buf.data(), count, ncclFloat, (rank + 1) % nranks, comm, nullptr);
    ncclRecv(got.data(), count, ncclFloat, (rank + nranks - 1) % nranks, comm, nullptr);
    err = check(ncclGroupEnd(), "send/recv");
    if (err.empty() && got != buf) err = "send/recv: wrong data";
  }
  ncclCommDestroy(comm);
  return err;
}

TEST(ShmSegments, ARankInAnotherPidNamespaceConnectsByName) {
  const std::vector<std::string> env = {"BRAID_BOOTSTRAP_TIMEOUT=10"};
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      3,
      [&](int rank, int nranks) -> std::string {
        if (rank != 1) return collectivesJob(root.id, rank, nranks);
        // Rank 1 runs as process 1 of a new PID namespace: its pid means
        // nothing to the others, nor theirs to it.
        if (unshare(CLONE_NEWPID) != 0) return std::string(kSkip) + std::strerror(errno);
        return inChild(
            [&] { return getpid() == 1 ? collectivesJob(root.id, rank, nranks) : "not process 1"; });
      },
      60, env);
  if (out[1].report.rfind(kSkip, 0) == 0) GTEST_SKIP() << "no PID namespace of our own: " << out[1].report;
  EXPECT_EQ(describeFailures(out), "");
}

}  // namespace
}  // namespace braid::test
