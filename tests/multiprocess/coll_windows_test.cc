// Zero-copy collectives on windows (ncclCommWindowRegister) on the host
// backend: ranks as forked processes map each other's ncclMemAlloc memory
// (core/symmetric.h). The whole collective sweep runs on buffers carved
// from one registered window per rank, and the log proves the all-reduces,
// all-gathers and reduce-scatters ran zero-copy; ranks that disagree about
// windows get an error, not a hang; a window on memory a peer cannot map
// falls back to the FIFOs; each rank knows where its peers mapped its
// window.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coll_sweep.h"
#include "core/comm.h"
#include "harness.h"
#include "util/strings.h"
#include "window_memory.h"

namespace braid::test {
namespace {

const bool kHostBackend = (setenv("BRAID_BACKEND", "host", 0), true);

using HostWindowMemory = WindowMemory<HostMemory>;

std::vector<std::string> windowEnv(const std::string& logDir) {
  std::vector<std::string> env = {"BRAID_BOOTSTRAP_TIMEOUT=20", "BRAID_STALL_TIMEOUT=30"};
  for (const std::string& e : windowLogEnv(logDir)) env.push_back(e);
  return env;
}

// One rank: init, window, the sweep on it, and proof from the log that
// all-reduces ran zero-copy.
std::string sweepOnWindow(const ncclUniqueId& id, int rank, int n, SweepCounts counts,
                          const std::string& logDir) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  HostWindowMemory memory;
  err = memory.open(comm, 64u << 20);
  if (err.empty()) err = collSweep(comm, rank, n, counts, memory);
  err += memory.close();
  err += check(ncclCommDestroy(comm), "destroy");
  if (err.empty() && logLines(logDir, {"zero-copy, mapped from all"}) != 1)
    err = "the window was not zero-copy";
  return err.empty() ? ranZeroCopy(logDir) : err;
}

struct WindowCase {
  int nranks;
  bool full;
};

class CollWindows : public ::testing::TestWithParam<WindowCase> {};

TEST_P(CollWindows, SweepOnWindowsRunsZeroCopy) {
  const WindowCase c = GetParam();
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string& logDir = dir.path();
  const std::vector<std::string> env = windowEnv(logDir);
  RootProcess root = startRootProcess(env);
  const SweepCounts counts = c.full ? sweepCountsFromEnv() : SweepCounts::kQuick;
  auto out = runRanks(
      c.nranks, [&](int rank, int n) { return sweepOnWindow(root.id, rank, n, counts, logDir); }, 600, env);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollWindows,
                         ::testing::Values(WindowCase{2, true}, WindowCase{3, true}, WindowCase{4, false},
                                           WindowCase{8, false}),
                         [](const ::testing::TestParamInfo<WindowCase>& p) {
                           return strCat(p.param.nranks, p.param.full ? "Full" : "Quick");
                         });

// Ranks that are threads of one process (ncclCommInitAll) use each other's
// windows directly, on any memory.
TEST(CollWindowsThreads, ThreadsOfOneProcessShareWindows) {
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string& logDir = dir.path();
  auto out = runRanks(
      1,
      [&](int, int) -> std::string {
        const int n = 3;
        std::vector<ncclComm_t> comms(n);
        std::string err = check(ncclCommInitAll(comms.data(), n, nullptr), "ncclCommInitAll");
        if (!err.empty()) return err;
        std::vector<std::string> errs(n);
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            HostWindowMemory memory;
            errs[r] = memory.open(comms[r], 16u << 20);
            if (errs[r].empty()) errs[r] = collSweep(comms[r], r, n, SweepCounts::kQuick, memory);
            errs[r] += memory.close();
          });
        }
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < n; ++r) {
          err += errs[r] + check(ncclCommDestroy(comms[r]), "destroy");
        }
        if (err.empty() && logLines(logDir, {"zero-copy, mapped from all"}) != n)
          err = "a window was not zero-copy";
        return err.empty() ? ranZeroCopy(logDir) : err;
      },
      300, windowEnv(logDir));
  EXPECT_EQ(describeFailures(out), "");
}

// Ranks as threads that destroy their communicators straight after a
// zero-copy collective: a fast rank's teardown once unmapped the flags a
// slower thread of the same process still read to leave the collective
// (a segfault in nearly every run).
TEST(CollWindowsThreads, DestroyingRightAfterAZeroCopyCollectiveIsSafe) {
  auto out = runRanks(
      1,
      [&](int, int) -> std::string {
        const int n = 3;
        const size_t count = 1000;
        for (int round = 0; round < 20; ++round) {
          std::vector<ncclComm_t> comms(n);
          std::string err = check(ncclCommInitAll(comms.data(), n, nullptr), "ncclCommInitAll");
          if (!err.empty()) return err;
          std::vector<std::string> errs(n);
          std::vector<std::thread> threads;
          for (int r = 0; r < n; ++r) {
            threads.emplace_back([&, r] {
              const size_t bytes = 1 << 20;
              void* mem = nullptr;
              ncclWindow_t win = nullptr;
              errs[r] = check(ncclMemAlloc(&mem, bytes), "ncclMemAlloc");
              if (errs[r].empty()) {
                errs[r] = check(ncclCommWindowRegister(comms[r], mem, bytes, &win, NCCL_WIN_COLL_SYMMETRIC),
                                "ncclCommWindowRegister");
              }
              if (!errs[r].empty()) return;
              int64_t* send = static_cast<int64_t*>(mem);
              int64_t* recv = send + count;
              for (size_t i = 0; i < count; ++i) send[i] = r * 100000 + static_cast<int64_t>(i);
              errs[r] = check(ncclAllGather(send, recv, count, ncclInt64, comms[r], nullptr), "ncclAllGather");
              for (size_t i = 0; i < count * n && errs[r].empty(); ++i) {
                if (recv[i] != static_cast<int64_t>((i / count) * 100000 + i % count)) errs[r] = "wrong data";
              }
              errs[r] += check(ncclCommDestroy(comms[r]), "destroy");  // releases the window
              errs[r] += check(ncclMemFree(mem), "ncclMemFree");
            });
          }
          for (std::thread& t : threads) t.join();
          for (int r = 0; r < n; ++r) err += errs[r];
          if (!err.empty()) return strCat("round ", round, ": ", err);
        }
        return std::string();
      },
      120);
  EXPECT_EQ(describeFailures(out), "");
}

// One thread registers every rank's windows (two each) inside a group, as
// NCCL allows: the handles are filled at ncclGroupEnd, every window is
// zero-copy, and a grouped all-reduce on them is right.
TEST(CollWindowsGroup, OneThreadRegistersEveryRanksWindowsInAGroup) {
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string& logDir = dir.path();
  auto out = runRanks(
      1,
      [&](int, int) -> std::string {
        const int n = 3;
        const size_t count = 1u << 16;
        std::vector<ncclComm_t> comms(n);
        std::string err = check(ncclCommInitAll(comms.data(), n, nullptr), "ncclCommInitAll");
        if (!err.empty()) return err;
        std::vector<std::vector<float>> data(n, std::vector<float>(2 * count)),
            spare(n, std::vector<float>(count));
        std::vector<ncclWindow_t> wins(n), spareWins(n);
        err = check(ncclGroupStart(), "group start");
        for (int r = 0; r < n && err.empty(); ++r) {
          err = check(ncclCommWindowRegister(comms[r], data[r].data(), 2 * count * sizeof(float), &wins[r],
                                             NCCL_WIN_DEFAULT),
                      "register");
          err += check(ncclCommWindowRegister(comms[r], spare[r].data(), count * sizeof(float), &spareWins[r],
                                              NCCL_WIN_DEFAULT),
                       "register the spare");
          if (wins[r] != nullptr) err += "a handle was filled before ncclGroupEnd";
        }
        err += check(ncclGroupEnd(), "group end");
        for (int r = 0; r < n && err.empty(); ++r) {
          if (wins[r] == nullptr || spareWins[r] == nullptr)
            err = strCat("rank ", r, "'s window handles are null");
        }
        if (!err.empty()) return err;
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
        }
        err = check(ncclGroupStart(), "group start");
        for (int r = 0; r < n; ++r) {
          err += check(ncclAllReduce(data[r].data(), data[r].data() + count, count, ncclFloat, ncclSum,
                                     comms[r], nullptr),
                       "all-reduce");
        }
        err += check(ncclGroupEnd(), "group end");
        for (int r = 0; r < n && err.empty(); ++r) {
          for (size_t i = 0; i < count && err.empty(); ++i) {
            const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
            if (data[r][count + i] != want)
              err = strCat("rank ", r, " element ", i, ": ", data[r][count + i]);
          }
        }
        for (int r = 0; r < n; ++r) {
          err += check(ncclCommWindowDeregister(comms[r], wins[r]), "deregister");
          err += check(ncclCommWindowDeregister(comms[r], spareWins[r]), "deregister the spare");
          err += check(ncclCommDestroy(comms[r]), "destroy");
        }
        if (err.empty() && logLines(logDir, {"zero-copy, mapped from all"}) != 2 * n)
          err = "a window was not zero-copy";
        return err;
      },
      120, windowEnv(logDir));
  EXPECT_EQ(describeFailures(out), "");
}

// One rank passes buffers outside its windows: the others wait for it in
// vain and fail within the stall timeout, naming it; nobody hangs.
TEST(CollWindowsFaults, RanksThatDisagreeAboutWindowsFail) {
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string& logDir = dir.path();
  std::vector<std::string> env = windowEnv(logDir);
  env.push_back("BRAID_STALL_TIMEOUT=3");
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      3,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        const size_t count = 4096;
        void* mem = nullptr;
        err = check(ncclMemAlloc(&mem, 2 * count * sizeof(float)), "ncclMemAlloc");
        ncclWindow_t win = nullptr;
        if (err.empty())
          err = check(
              ncclCommWindowRegister(comm, mem, 2 * count * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC),
              "register");
        if (!err.empty()) return err;
        std::vector<float> plain(2 * count, 1.0f);
        float* buf = rank == 2 ? plain.data() : static_cast<float*>(mem);
        for (size_t i = 0; i < 2 * count; ++i) buf[i] = 1.0f;
        const ncclResult_t r = ncclAllReduce(buf, buf + count, count, ncclFloat, ncclSum, comm, nullptr);
        const std::string text = ncclGetLastError(comm);
        std::string report;
        if (r == ncclSuccess) report = "the all-reduce succeeded";
        if (rank != 2 && text.find("outside its windows") == std::string::npos) report += " error: " + text;
        ncclCommAbort(comm);
        ncclMemFree(mem);
        return report;
      },
      60, env);
  EXPECT_EQ(describeFailures(out), "");
  for (const RankOutcome& o : out) EXPECT_LT(o.seconds, 30) << "a rank took too long to fail";
}

// Windows on memory of each process's own heap (not ncclMemAlloc) cannot be
// mapped by the peers: the window is an ordinary registration, the log says
// why, and collectives on it take the FIFOs and stay correct.
TEST(CollWindowsFallback, WindowsOnPlainMemoryUseTheFifos) {
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string& logDir = dir.path();
  const std::vector<std::string> env = windowEnv(logDir);
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      2,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        const size_t count = 100003;
        std::vector<float> buf(2 * count);
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * (i % 17));
        ncclWindow_t win = nullptr;
        err = check(
            ncclCommWindowRegister(comm, buf.data(), buf.size() * sizeof(float), &win, NCCL_WIN_DEFAULT),
            "register");
        if (err.empty())
          err = check(ncclAllReduce(buf.data(), buf.data() + count, count, ncclFloat, ncclSum, comm, nullptr),
                      "all-reduce");
        for (size_t i = 0; i < count && err.empty(); ++i) {
          if (buf[count + i] != 3.0f * (i % 17)) err = strCat("element ", i, " is ", buf[count + i]);
        }
        err += check(ncclCommWindowDeregister(comm, win), "deregister");
        err += check(ncclCommDestroy(comm), "destroy");
        if (err.empty() && logLines(logDir, {"not memory from ncclMemAlloc"}) != 1)
          err = "no reason was logged";
        if (err.empty() && logLines(logDir, {"zero-copy,"}) != 0) err = "an all-reduce ran zero-copy";
        return err;
      },
      120, env);
  EXPECT_EQ(describeFailures(out), "");
}

// Every rank knows where each peer's process mapped its window
// (SymmetricWindows::peerView, which GPU ranks hand peers for direct
// writes). Checked by use: the ranks all-gather those addresses, each
// writes a mark into every peer's window at the address that peer gave
// it, and each finds every peer's mark in its own memory. Nothing outside
// a zero-copy window has a view.
TEST(CollWindowsViews, EachRankWritesWherePeersSayTheirWindowsAreMapped) {
  const ScopedTempDir dir("braid-windows-");
  ASSERT_FALSE(dir.path().empty());
  RootProcess root = startRootProcess(windowEnv(dir.path()));
  auto out = runRanks(
      3,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        const size_t bytes = 1 << 16, at = 4096;  // the marks: 8 bytes per writer from `at` on
        void* mem = nullptr;
        err = check(ncclMemAlloc(&mem, bytes), "ncclMemAlloc");
        ncclWindow_t win = nullptr;
        if (err.empty())
          err = check(ncclCommWindowRegister(comm, mem, bytes, &win, NCCL_WIN_COLL_SYMMETRIC), "register");
        if (!err.empty()) return err;
        char* mine = static_cast<char*>(mem);
        std::memset(mine, 0, bytes);
        const SymmetricWindows& windows = static_cast<Communicator*>(comm)->windows();
        // views[r * n + p]: rank r's marks area as rank p's process addresses it.
        std::vector<uint64_t> views(static_cast<size_t>(n * n));
        for (int p = 0; p < n; ++p)
          views[static_cast<size_t>(rank * n + p)] =
              reinterpret_cast<uint64_t>(windows.peerView(p, mine + at, 64));
        std::vector<uint64_t> local(views.begin() + rank * n, views.begin() + (rank + 1) * n);
        err = check(
            ncclAllGather(local.data(), views.data(), static_cast<size_t>(n), ncclUint64, comm, nullptr),
            "all-gather of the views");
        for (int r = 0; r < n && err.empty(); ++r) {
          uint64_t* there = reinterpret_cast<uint64_t*>(views[static_cast<size_t>(r * n + rank)]);
          if (there == nullptr) err = strCat("rank ", r, " has no view for this rank");
          if (r != rank && err.empty())
            there[rank] = 1000u * static_cast<unsigned>(rank) + static_cast<unsigned>(r);
        }
        float one = 1.0f;  // a barrier: every mark is written before anyone checks
        if (err.empty())
          err = check(ncclAllReduce(&one, &one, 1, ncclFloat, ncclSum, comm, nullptr), "barrier");
        const uint64_t* marks = reinterpret_cast<const uint64_t*>(mine + at);
        for (int q = 0; q < n && err.empty(); ++q) {
          const uint64_t want =
              q == rank ? 0 : 1000u * static_cast<unsigned>(q) + static_cast<unsigned>(rank);
          if (marks[q] != want) err = strCat("rank ", q, "'s mark reads ", marks[q], ", not ", want);
        }
        std::vector<char> plain(64);
        if (err.empty() && (windows.peerView((rank + 1) % n, plain.data(), 64) != nullptr ||
                            windows.peerView((rank + 1) % n, mine + bytes - 8, 16) != nullptr))
          err = "memory outside the window has a view";
        err += check(ncclCommWindowDeregister(comm, win), "deregister");
        err += check(ncclCommDestroy(comm), "destroy");
        ncclMemFree(mem);
        return err;
      },
      60, windowEnv(dir.path()));
  EXPECT_EQ(describeFailures(out), "");
}

}  // namespace
}  // namespace braid::test
