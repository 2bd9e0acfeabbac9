// Collectives that go wrong, over forked ranks: ranks that disagree
// (BRAID_CHECK_COLL=1 names them), a rank that never arrives (the stall
// timeout names the collective, channel and peer; BRAID_DUMP_ON_STALL=1 logs
// the FIFO state), a rank killed mid-collective, ncclCommAbort from
// another thread while a collective waits, and ncclCommShrink leaving
// ranks out, planned or after one died.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "harness.h"
#include "nccl.h"

namespace braid::test {
namespace {

const bool kHostBackend = (setenv("BRAID_BACKEND", "host", 0), true);

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string expect(bool ok, const std::string& what) {
  return ok ? "" : what;
}

TEST(CollFaults, CheckCollNamesTheRanksThatDisagree) {
  RootProcess root = startRootProcess();
  auto out =
      runRanks(4,
               [&](int rank, int n) -> std::string {
                 ncclComm_t comm = nullptr;
                 std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
                 if (!err.empty()) return err;
                 std::vector<float> buf(1024, 1.0f);
                 // A matching collective first: the check passes and costs nothing else.
                 err = check(ncclAllReduce(buf.data(), buf.data(), 1024, ncclFloat, ncclSum, comm, nullptr),
                             "first allreduce");
                 if (!err.empty()) return err;
                 ncclResult_t r;
                 if (rank == 2) {
                   r = ncclBroadcast(buf.data(), buf.data(), 1024, ncclFloat, 1, comm, nullptr);
                 } else if (rank == 3) {
                   r = ncclAllReduce(buf.data(), buf.data(), 1000, ncclFloat, ncclSum, comm, nullptr);
                 } else {
                   r = ncclAllReduce(buf.data(), buf.data(), 1024, ncclFloat, ncclSum, comm, nullptr);
                 }
                 std::string text = ncclGetLastError(comm);
                 ncclResult_t async = ncclSuccess;
                 (void)ncclCommGetAsyncError(comm, &async);
                 ncclCommAbort(comm);
                 if (r != ncclInvalidUsage)
                   return "expected ncclInvalidUsage, got " + std::to_string(r) + ": " + text;
                 if (async != ncclInvalidUsage) return "async error not set";
                 // Every rank reports the same thing, naming both culprits.
                 err = expect(text.find("rank 2 called ncclBroadcast #2 (count 1024, ncclFloat32, root 1)") !=
                                  std::string::npos,
                              "no mention of rank 2's broadcast: " + text);
                 if (!err.empty()) return err;
                 return expect(text.find("rank 3 called ncclAllReduce #2 (count 1000") != std::string::npos,
                               "no mention of rank 3's count: " + text);
               },
               60, {"BRAID_CHECK_COLL=1", "BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CollFaults, AMissingRankStallsWithAnErrorNamingItAndDumpsFifos) {
  RootProcess root = startRootProcess();
  const ScopedTempDir tmp("braid-stall-");
  ASSERT_FALSE(tmp.path().empty());
  const std::string& dir = tmp.path();
  const std::string logPattern = dir + "/log.%p";
  auto out = runRanks(
      3,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1 << 18, 1.0f);
        err = check(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
                    "first");
        if (!err.empty()) return err;
        if (rank == 2) {  // never calls the second collective
          std::this_thread::sleep_for(std::chrono::seconds(4));
          ncclCommAbort(comm);
          return "";
        }
        auto start = std::chrono::steady_clock::now();
        ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
        double took = secondsSince(start);
        std::string text = ncclGetLastError(comm);
        ncclCommAbort(comm);
        if (r != ncclRemoteError) return "expected ncclRemoteError, got " + std::to_string(r) + ": " + text;
        if (took > 10) return "took " + std::to_string(took) + " s";
        err = expect(text.find("ncclAllReduce #2") != std::string::npos &&
                         text.find("channel 0") != std::string::npos &&
                         text.find("waiting for rank") != std::string::npos,
                     "message lacks collective, channel or peer: " + text);
        if (!err.empty()) return err;
        std::ifstream log(dir + "/log." + std::to_string(getpid()));
        std::stringstream content;
        content << log.rdbuf();
        return expect(content.str().find("collectives issued 2 completed 1") != std::string::npos &&
                          content.str().find("[tail ") != std::string::npos,
                      "no FIFO dump in the log: " + content.str());
      },
      60,
      {"BRAID_STALL_TIMEOUT=2", "BRAID_DUMP_ON_STALL=1", "NCCL_DEBUG=WARN", "NCCL_DEBUG_FILE=" + logPattern,
       "NCCL_ALGO=Ring"});
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CollFaults, KilledRankFailsTheOthersWithinTheTimeout) {
  RootProcess root = startRootProcess();
  auto out = runRanks(4,
                      [&](int rank, int n) -> std::string {
                        ncclComm_t comm = nullptr;
                        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
                        if (!err.empty()) return err;
                        std::vector<float> buf(1 << 20, 1.0f);
                        for (int i = 0; i < 1000; ++i) {
                          if (rank == 1 && i == 3) raise(SIGKILL);  // dies mid-job
                          ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat,
                                                         ncclSum, comm, nullptr);
                          if (r != ncclSuccess) {
                            std::string text = ncclGetLastError(comm);
                            ncclCommAbort(comm);
                            return expect(r == ncclRemoteError && text.find("rank") != std::string::npos,
                                          "unexpected error: " + text);
                          }
                        }
                        ncclCommAbort(comm);
                        return "never noticed the dead rank";
                      },
                      60, {"BRAID_STALL_TIMEOUT=3", "NCCL_MIN_NCHANNELS=2"});
  for (int r = 0; r < 4; ++r) {
    if (r == 1) continue;
    EXPECT_TRUE(out[static_cast<size_t>(r)].exited) << "rank " << r << " hung or crashed";
    EXPECT_EQ(out[static_cast<size_t>(r)].report, "") << "rank " << r;
  }
}

TEST(CollFaults, AbortFromAnotherThreadReleasesAWaitingCollective) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      2,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1 << 20, 1.0f);
        err = check(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
                    "first");
        if (!err.empty()) return err;
        if (rank == 1) {  // absent from the second collective
          std::this_thread::sleep_for(std::chrono::seconds(3));
          ncclCommAbort(comm);
          return "";
        }
        std::chrono::steady_clock::time_point aborted;
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          aborted = std::chrono::steady_clock::now();
          ncclCommAbort(comm);  // returns once the collective has let go of the communicator
        });
        ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
        aborter.join();
        double took = secondsSince(aborted);
        if (r == ncclSuccess) return "the collective succeeded without its peer";
        return expect(took < 1.0, "abort took " + std::to_string(took) + " s");
      },
      60, {"BRAID_STALL_TIMEOUT=60", "NCCL_MIN_NCHANNELS=2"});
  EXPECT_EQ(describeFailures(out), "");
}

// An all-reduce over `comm` whose every rank contributes (parent rank + 1)
// at each position; checks the sum of `expected`.
std::string allReduceOf(ncclComm_t comm, int parentRank, float expected, const char* what) {
  std::vector<float> in(4099, static_cast<float>(parentRank + 1)), out(in.size(), -1.0f);
  std::string err =
      check(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr), what);
  if (!err.empty()) return err;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != expected)
      return std::string(what) + ": got " + std::to_string(out[i]) + " at " + std::to_string(i);
  }
  return "";
}

TEST(CollFaults, ShrinkLeavesRanksOutInParentOrder) {
  RootProcess root = startRootProcess();
  auto out = runRanks(5,
                      [&](int rank, int n) -> std::string {
                        ncclComm_t comm = nullptr;
                        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
                        if (!err.empty()) return err;
                        err = allReduceOf(comm, rank, 15.0f, "parent allreduce");
                        if (!err.empty()) return err;
                        int exclude[] = {3, 1};
                        if (rank == 1 || rank == 3) {  // left out: they take no part
                          ncclCommAbort(comm);
                          return "";
                        }
                        ncclComm_t small = nullptr;
                        err = check(ncclCommShrink(comm, exclude, 2, &small, nullptr, NCCL_SHRINK_DEFAULT),
                                    "shrink");
                        if (!err.empty()) return err;
                        int count = -1, me = -1;
                        ncclCommCount(small, &count);
                        ncclCommUserRank(small, &me);
                        const int want = rank == 0 ? 0 : rank == 2 ? 1 : 2;
                        if (count != 3 || me != want) {
                          return "shrunk to " + std::to_string(count) + " ranks, rank " + std::to_string(me);
                        }
                        err = allReduceOf(small, rank, 1.0f + 3.0f + 5.0f, "shrunk allreduce");
                        ncclCommDestroy(small);
                        ncclCommAbort(comm);
                        return err;
                      },
                      60, {"BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CollFaults, ShrinkAbortRecoversFromAKilledRank) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      4,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        err = allReduceOf(comm, rank, 10.0f, "first allreduce");
        if (!err.empty()) return err;
        if (rank == 2) raise(SIGKILL);
        std::vector<float> buf(4099, 1.0f);  // as above: connected already, so the stall timeout ends it
        ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
        if (r == ncclSuccess) return "an all-reduce succeeded without rank 2";
        ncclResult_t async = ncclSuccess;
        (void)ncclCommGetAsyncError(comm, &async);
        if (async == ncclSuccess) return "the failed all-reduce left no async error";
        // The parent is in error; shrinking it is how a job goes on.
        int exclude[] = {2};
        ncclComm_t small = nullptr;
        err = check(ncclCommShrink(comm, exclude, 1, &small, nullptr, NCCL_SHRINK_ABORT), "shrink");
        if (!err.empty()) return err;
        err = allReduceOf(small, rank, 1.0f + 2.0f + 4.0f, "shrunk allreduce");
        // NCCL_SHRINK_ABORT ended the parent's operations: it now fails at once.
        if (err.empty() && ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm,
                                         nullptr) == ncclSuccess) {
          err = "the aborted parent still ran an all-reduce";
        }
        ncclCommDestroy(small);
        ncclCommAbort(comm);
        return err;
      },
      60, {"BRAID_STALL_TIMEOUT=3", "BRAID_BOOTSTRAP_TIMEOUT=20"});
  for (int r = 0; r < 4; ++r) {
    if (r == 2) continue;
    EXPECT_TRUE(out[static_cast<size_t>(r)].exited) << "rank " << r << " hung or crashed";
    EXPECT_EQ(out[static_cast<size_t>(r)].report, "") << "rank " << r;
  }
}

}  // namespace
}  // namespace braid::test
