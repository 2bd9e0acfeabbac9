// Collectives that go wrong, over forked ranks: ranks that disagree
// (BRAID_CHECK_COLL=1 names them), a rank that never arrives (the stall
// timeout names the collective, channel and peer; BRAID_DUMP_ON_STALL=1 logs
// the FIFO state), a rank killed mid-collective or gone before the
// connectors to it were made, ncclCommAbort from
// another thread while a collective waits, ncclCommShrink leaving
// ranks out, planned or after one died, and ncclCommRevoke releasing a
// collective that waits, then splitting and shrinking the revoked
// communicator.
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
#include "util/param.h"
#include "util/strings.h"

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
                 } else if (rank == 3) {  // count 0 is compared too, not skipped as it is unchecked
                   r = ncclAllReduce(buf.data(), buf.data(), 0, ncclFloat, ncclSum, comm, nullptr);
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
                 return expect(text.find("rank 3 called ncclAllReduce #2 (count 0,") != std::string::npos,
                               "no mention of rank 3's count: " + text);
               },
               60, {"BRAID_CHECK_COLL=1", "BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

// With BRAID_CHECK_COLL=1 a rank that stays alive but never makes the call
// fails the others' comparison within the stall timeout, as the collective
// itself would; the comparison's exchange once waited for the bootstrap
// timeout instead (300 s by default).
TEST(CollFaults, CheckCollWaitsNoLongerThanTheStallTimeout) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      3,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1024, 1.0f);
        if (rank == 1) {
          sleep(20);  // alive, never calls
          ncclCommAbort(comm);
          return "";
        }
        const auto t0 = std::chrono::steady_clock::now();
        ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
        const double took = secondsSince(t0);
        const std::string text = ncclGetLastError(comm);
        ncclCommAbort(comm);
        if (r == ncclSuccess) return "the all-reduce succeeded without rank 1";
        if (text.find("BRAID_CHECK_COLL") == std::string::npos) return "not the comparison's failure: " + text;
        return expect(took < 10, strCat("the comparison waited ", took, " s: ", text));
      },
      60, {"BRAID_CHECK_COLL=1", "BRAID_STALL_TIMEOUT=3", "BRAID_BOOTSTRAP_TIMEOUT=40"});
  EXPECT_EQ(describeFailures(out), "");
}

// One sender of a receive batch sends all it has and leaves (a rank may end
// right after its last operation); the batch goes on waiting for its other,
// slower sender. It once failed with "send/receive stopped" once the
// departed rank's data had all come in.
TEST(CollFaults, AReceiveBatchOutlivesASenderThatSentAllAndLeft) {
  for (int round = 0; round < 3; ++round) {
    RootProcess root = startRootProcess();
    auto out = runRanks(
        3,
        [&](int rank, int n) -> std::string {
          ncclComm_t comm = nullptr;
          std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
          if (!err.empty()) return err;
          const size_t big = 200000;
          std::vector<char> small(1000, static_cast<char>(rank + 1)), fromBig(big, 0), fromSmall(1000, 0);
          // Connect 1 -> 0 and 2 -> 0 first.
          ncclGroupStart();
          if (rank == 0) {
            ncclRecv(fromBig.data(), 1000, ncclInt8, 1, comm, nullptr);
            ncclRecv(fromSmall.data(), 1000, ncclInt8, 2, comm, nullptr);
          } else {
            ncclSend(small.data(), 1000, ncclInt8, 0, comm, nullptr);
          }
          err = check(ncclGroupEnd(), "connecting");
          if (!err.empty()) return err;
          if (rank == 1) {
            std::vector<char> data(big, 7);
            err = check(ncclSend(data.data(), big, ncclInt8, 0, comm, nullptr), "the big send");
            ncclCommDestroy(comm);
            _exit(err.empty() ? 0 : 1);
          }
          if (rank == 2) {
            usleep(300000);
            err = check(ncclSend(small.data(), 1000, ncclInt8, 0, comm, nullptr), "the late send");
          } else {
            ncclGroupStart();
            ncclRecv(fromBig.data(), big, ncclInt8, 1, comm, nullptr);
            ncclRecv(fromSmall.data(), 1000, ncclInt8, 2, comm, nullptr);
            err = check(ncclGroupEnd(), "the receive batch");
            if (err.empty() && (fromBig[big - 1] != 7 || fromSmall[999] != 3)) err = "wrong data";
          }
          std::string destroyed = check(ncclCommDestroy(comm), "destroy");
          return err.empty() ? destroyed : err;
        },
        60, {"NCCL_BUFFSIZE=4096"});
    ASSERT_EQ(describeFailures(out), "") << "round " << round;
  }
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
        // A later call on the communicator in error gets the failure's code,
        // as NCCL's (ncclCommEnsureReady), and says so.
        ncclResult_t later = ncclAllReduce(buf.data(), buf.data(), 1, ncclFloat, ncclSum, comm, nullptr);
        std::string laterText = ncclGetLastError(comm);
        // Stay until the other waiter has timed out too: a rank whose
        // process ends fails the waits on it at once instead.
        std::this_thread::sleep_for(std::chrono::seconds(2));
        ncclCommAbort(comm);
        if (r != ncclRemoteError) return "expected ncclRemoteError, got " + std::to_string(r) + ": " + text;
        if (later != ncclRemoteError || laterText.find("in error") == std::string::npos) {
          return "a call after the failure gave " + std::to_string(later) + ": " + laterText;
        }
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

// The same for sends and receives: the error numbers the send/receive batch
// (the communicator's fourth here; the collective count is left alone) and
// names the peer and the bytes moved, and the dump has the point-to-point
// connectors.
TEST(CollFaults, AMissingSendStallsWithAnErrorNamingTheBatchAndDumpsFifos) {
  RootProcess root = startRootProcess();
  const ScopedTempDir tmp("braid-p2p-stall-");
  ASSERT_FALSE(tmp.path().empty());
  const std::string& dir = tmp.path();
  auto out = runRanks(
      2,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> send(1024, 1.0f), recv(1024);
        err = check(ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat, ncclSum, comm, nullptr),
                    "all-reduce");
        for (int i = 0; i < 3 && err.empty(); ++i) {
          ncclGroupStart();
          ncclSend(send.data(), send.size(), ncclFloat, 1 - rank, comm, nullptr);
          ncclRecv(recv.data(), recv.size(), ncclFloat, 1 - rank, comm, nullptr);
          err = check(ncclGroupEnd(), "exchange");
        }
        if (!err.empty()) return err;
        if (rank == 1) {  // never sends the fourth time
          std::this_thread::sleep_for(std::chrono::seconds(4));
          ncclCommAbort(comm);
          return "";
        }
        ncclResult_t r = ncclRecv(recv.data(), recv.size(), ncclFloat, 1, comm, nullptr);
        std::string text = ncclGetLastError(comm);
        ncclCommAbort(comm);
        if (r != ncclRemoteError) return "expected ncclRemoteError, got " + std::to_string(r) + ": " + text;
        err = expect(text.find("point-to-point #4:") != std::string::npos &&
                         text.find("receive from rank 1 (0/4096 bytes)") != std::string::npos,
                     "message lacks the batch or the peer: " + text);
        if (!err.empty()) return err;
        std::ifstream log(dir + "/log." + std::to_string(getpid()));
        std::stringstream content;
        content << log.rdbuf();
        return expect(
            content.str().find("collectives issued 1, point-to-point batches 4") != std::string::npos &&
                content.str().find("point-to-point: send to rank 1") != std::string::npos,
            "no point-to-point dump in the log: " + content.str());
      },
      60,
      {"BRAID_STALL_TIMEOUT=2", "BRAID_DUMP_ON_STALL=1", "NCCL_DEBUG=WARN",
       "NCCL_DEBUG_FILE=" + dir + "/log.%p"});
  EXPECT_EQ(describeFailures(out), "");
}

// The others notice at once (their host's peer processes are watched), not
// at the stall timeout (300 s here): a wait on a rank whose process ended
// fails.
TEST(CollFaults, KilledRankFailsTheOthersAtOnce) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      4,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1 << 20, 1.0f);
        for (int i = 0; i < 1000; ++i) {
          if (rank == 1 && i == 3) raise(SIGKILL);  // dies mid-job
          ncclResult_t r =
              ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
          if (r != ncclSuccess) {
            std::string text = ncclGetLastError(comm);
            ncclCommAbort(comm);
            // Rank 1's neighbours wait on it; the others on a neighbour that
            // failed and left in turn.
            return expect(r == ncclRemoteError && text.find("the process of rank ") != std::string::npos &&
                              text.find(" ended while channel ") != std::string::npos,
                          "unexpected error: " + text);
          }
        }
        ncclCommAbort(comm);
        return "never noticed the dead rank";
      },
      60, {"NCCL_MIN_NCHANNELS=2"});
  for (int r = 0; r < 4; ++r) {
    if (r == 1) continue;
    EXPECT_TRUE(out[static_cast<size_t>(r)].exited) << "rank " << r << " hung or crashed";
    EXPECT_EQ(out[static_cast<size_t>(r)].report, "") << "rank " << r;
    EXPECT_LT(out[static_cast<size_t>(r)].seconds, 20.0) << "rank " << r;
  }
}

// A rank whose process ends right after its last collective fails no one:
// what it sent before it ended is still taken, by collectives and by
// receives posted after it is gone; only a receive nothing will come to
// fails, at once.
TEST(CollFaults, WhatARankSentBeforeItEndedIsStillReceived) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      4,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1024);
        for (int i = 0; i < 50 && err.empty(); ++i) {
          std::fill(buf.begin(), buf.end(), static_cast<float>(rank + i));
          err = check(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
                      "allreduce");
          if (err.empty() && buf[7] != static_cast<float>(6 + 4 * i)) err = "allreduce: wrong sum";
        }
        if (!err.empty()) return err;
        // Ranks 0 and 2 exchange one message each way (connectors made),
        // then rank 0 sends one more and leaves.
        if (rank == 0 || rank == 2) {
          std::vector<float> mine(256, static_cast<float>(rank)), theirs(256);
          ncclGroupStart();
          ncclSend(mine.data(), mine.size(), ncclFloat, 2 - rank, comm, nullptr);
          ncclRecv(theirs.data(), theirs.size(), ncclFloat, 2 - rank, comm, nullptr);
          err = check(ncclGroupEnd(), "first send/recv");
          if (!err.empty()) return err;
          if (rank == 0) {
            mine.assign(mine.size(), 42.0f);
            err = check(ncclSend(mine.data(), mine.size(), ncclFloat, 2, comm, nullptr), "last send");
            _exit(err.empty() ? 0 : 1);
          }
          usleep(500000);  // rank 0 is gone by now
          err = check(ncclRecv(theirs.data(), theirs.size(), ncclFloat, 0, comm, nullptr),
                      "recv after it left");
          if (!err.empty()) return err;
          if (theirs[255] != 42.0f) return "the last message's data is wrong";
          const auto t0 = std::chrono::steady_clock::now();
          ncclResult_t r = ncclRecv(theirs.data(), theirs.size(), ncclFloat, 0, comm, nullptr);
          const std::string text = ncclGetLastError(comm);
          ncclCommAbort(comm);
          if (r != ncclRemoteError || text.find("the process of rank 0 ended") == std::string::npos) {
            return "a receive from the rank that left: " + std::to_string(r) + ": " + text;
          }
          return expect(secondsSince(t0) < 5, "a receive from the rank that left took too long to fail");
        }
        ncclCommAbort(comm);
        return "";
      },
      60);
  EXPECT_EQ(describeFailures(out), "");
  for (const RankOutcome& o : out) EXPECT_TRUE(o.exited && o.exitCode == 0);
}

// Ranks on another "host" (BRAID_HOSTID) talk over the socket Net. One that
// aborts its communicator (its process lives on) says goodbye on its
// connections: a rank waiting for its data fails at once, naming it, rather
// than at the stall timeout (before, the goodbye only stopped the connection).
TEST(CollFaults, ARankOnAnotherHostThatAbortsFailsItsPeerAtOnce) {
  const std::vector<std::string> env = {"BRAID_STALL_TIMEOUT=60", "BRAID_BOOTSTRAP_TIMEOUT=20"};
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      2,
      [&](int rank, int n) -> std::string {
        setenv("BRAID_HOSTID", rank == 0 ? "host-a" : "host-b", 1);
        ParamRegistry::instance().reload();
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(1 << 18, 1.0f);
        for (int i = 0; i < 100000; ++i) {
          if (rank == 1 && i == 3) {
            ncclCommAbort(comm);
            sleep(8);  // alive: its connections said goodbye but never break
            return "";
          }
          // Rank 0 only receives (from the root), so only the goodbye can
          // tell it that rank 1 left (no send of its own fails).
          const auto t0 = std::chrono::steady_clock::now();
          ncclResult_t r = ncclBroadcast(buf.data(), buf.data(), buf.size(), ncclFloat, 1, comm, nullptr);
          if (r != ncclSuccess) {
            const std::string text = ncclGetLastError(comm);
            const double waited = secondsSince(t0);
            ncclCommAbort(comm);
            err = expect(r == ncclRemoteError &&
                             text.find("net connection from rank 1 ") != std::string::npos &&
                             text.find("rank 1 closed its communicator") != std::string::npos,
                         "unexpected error: " + text);
            if (!err.empty()) return err;
            return expect(waited < 5, strCat("failed after ", waited, " s: ", text));
          }
        }
        ncclCommAbort(comm);
        return "never noticed the aborted rank";
      },
      120, env);
  EXPECT_EQ(describeFailures(out), "");
}

// A goodbye when nothing is expected of the rank (the end of its job) fails
// no one: the other host's ranks go on with each other, their communicator
// not in error; only a receive from the rank that left fails, at once.
TEST(CollFaults, AGoodbyeFromAnotherHostFailsOnlyWhatWaitsForTheRank) {
  const std::vector<std::string> env = {"BRAID_STALL_TIMEOUT=60", "BRAID_BOOTSTRAP_TIMEOUT=20"};
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      4,
      [&](int rank, int n) -> std::string {
        setenv("BRAID_HOSTID", rank < 2 ? "host-a" : "host-b", 1);
        ParamRegistry::instance().reload();
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> buf(4096);
        for (int i = 0; i < 20 && err.empty(); ++i) {
          std::fill(buf.begin(), buf.end(), static_cast<float>(rank + i));
          err = check(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
                      "allreduce");
          if (err.empty() && buf[7] != static_cast<float>(6 + 4 * i)) err = "allreduce: wrong sum";
        }
        if (!err.empty()) return err;
        std::vector<float> mine(256, static_cast<float>(rank)), theirs(256);
        if (rank == 0 || rank == 2) {  // a point-to-point connector across the hosts
          ncclGroupStart();
          ncclSend(mine.data(), mine.size(), ncclFloat, 2 - rank, comm, nullptr);
          ncclRecv(theirs.data(), theirs.size(), ncclFloat, 2 - rank, comm, nullptr);
          err = check(ncclGroupEnd(), "send/recv across the hosts");
          if (!err.empty()) return err;
        }
        if (rank < 2) return check(ncclCommDestroy(comm), "destroy");
        usleep(500000);  // host-a's goodbyes have come
        ncclGroupStart();
        ncclSend(mine.data(), mine.size(), ncclFloat, 5 - rank, comm, nullptr);
        ncclRecv(theirs.data(), theirs.size(), ncclFloat, 5 - rank, comm, nullptr);
        err = check(ncclGroupEnd(), "send/recv on host-b after host-a left");
        if (!err.empty()) return err;
        if (theirs[0] != static_cast<float>(5 - rank)) return "send/recv on host-b: wrong data";
        ncclResult_t async = ncclInProgress;
        (void)ncclCommGetAsyncError(comm, &async);
        if (async != ncclSuccess)
          return "in error after the goodbyes: " + std::string(ncclGetLastError(comm));
        if (rank == 3) return check(ncclCommDestroy(comm), "destroy");
        const auto t0 = std::chrono::steady_clock::now();
        ncclResult_t r = ncclRecv(theirs.data(), theirs.size(), ncclFloat, 0, comm, nullptr);
        const std::string text = ncclGetLastError(comm);
        ncclCommAbort(comm);
        if (r != ncclRemoteError || text.find("rank 0 closed its communicator") == std::string::npos) {
          return "a receive from the rank that left: " + std::to_string(r) + ": " + text;
        }
        return expect(secondsSince(t0) < 5, "a receive from the rank that left took too long to fail");
      },
      120, env);
  EXPECT_EQ(describeFailures(out), "");
}

// One byte through a pipe the test made before forking the ranks: one rank
// waits until another reached a point.
void signalPipe(int fd) {
  const char c = 1;
  (void)!write(fd, &c, 1);
}
void awaitPipe(int fd) {
  char c;
  (void)!read(fd, &c, 1);
}

// A group of one send and one receive with rank 1 (p2p), else an
// all-reduce of `count` floats; `took` is how long it ran.
ncclResult_t firstCallWithRankOne(ncclComm_t comm, bool p2p, size_t count, double* took) {
  std::vector<float> a(count, 1.0f), b(count);
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t r;
  if (p2p) {
    ncclGroupStart();
    ncclSend(a.data(), count, ncclFloat, 1, comm, nullptr);
    ncclRecv(b.data(), count, ncclFloat, 1, comm, nullptr);
    r = ncclGroupEnd();
  } else {
    r = ncclAllReduce(a.data(), b.data(), count, ncclFloat, ncclSum, comm, nullptr);
  }
  *took = secondsSince(t0);
  return r;
}

// Connectors are made on first use. The first call that needs one to a rank
// whose process ended after init fails at once, naming it, not at the
// bootstrap timeout (60 s here, as the stall timeout).
TEST(CollFaults, ARankThatEndedBeforeItsConnectorsWereMadeFailsTheFirstCallAtOnce) {
  const struct {
    const char* name;
    bool p2p;
    size_t count;
  } calls[] = {
      {"send/recv", true, 1024}, {"1 MiB all-reduce", false, 1 << 18}, {"64-byte all-reduce", false, 16}};
  for (const auto& call : calls) {
    SCOPED_TRACE(call.name);
    RootProcess root = startRootProcess();
    int initDone[2];
    ASSERT_EQ(pipe(initDone), 0);
    auto out =
        runRanks(2,
                 [&](int rank, int n) -> std::string {
                   ncclComm_t comm = nullptr;
                   std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
                   if (!err.empty()) return err;
                   // Rank 1 ends once rank 0 watches its process (init done), before any connector.
                   if (rank == 1) {
                     awaitPipe(initDone[0]);
                     _exit(0);
                   }
                   signalPipe(initDone[1]);
                   usleep(300000);  // rank 1 has ended by now
                   double took = 0;
                   ncclResult_t r = firstCallWithRankOne(comm, call.p2p, call.count, &took);
                   const std::string text = ncclGetLastError(comm);
                   ncclCommAbort(comm);
                   if (r != ncclRemoteError || text.find("the process of rank 1 ") == std::string::npos) {
                     return "unexpected result " + std::to_string(r) + ": " + text;
                   }
                   return expect(took < 5, "failed after " + std::to_string(took) + " s: " + text);
                 },
                 20, {"BRAID_BOOTSTRAP_TIMEOUT=60", "BRAID_STALL_TIMEOUT=60"});
    close(initDone[0]);
    close(initDone[1]);
    EXPECT_EQ(describeFailures(out), "");
  }
}

// The same with rank 1 alive: when it destroyed its communicator, its
// bootstrap listener refuses connections, and the call fails within seconds
// saying so; when it never makes the call, within BRAID_STALL_TIMEOUT (2 s
// here), not at the bootstrap timeout (60 s).
TEST(CollFaults, ConnectingToARankThatLeftOrNeverComesFailsWithinSeconds) {
  for (const bool destroyed : {true, false}) {
    SCOPED_TRACE(destroyed ? "rank 1 destroyed its communicator" : "rank 1 never makes the call");
    RootProcess root = startRootProcess();
    int toZero[2], toOne[2];
    ASSERT_EQ(pipe(toZero), 0);
    ASSERT_EQ(pipe(toOne), 0);
    auto out = runRanks(
        2,
        [&](int rank, int n) -> std::string {
          ncclComm_t comm = nullptr;
          std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
          if (!err.empty()) return err;
          if (rank == 1) {
            if (destroyed) err = check(ncclCommDestroy(comm), "destroy");
            signalPipe(toZero[1]);
            awaitPipe(toOne[0]);  // until rank 0's call failed
            if (!destroyed) ncclCommAbort(comm);
            return err;
          }
          awaitPipe(toZero[0]);
          double took = 0;
          ncclResult_t r = firstCallWithRankOne(comm, true, 1024, &took);
          const std::string text = ncclGetLastError(comm);
          signalPipe(toOne[1]);
          ncclCommAbort(comm);
          const char* says = destroyed ? "the bootstrap listener of rank 1 " : "BRAID_STALL_TIMEOUT";
          if (r != ncclRemoteError || text.find(says) == std::string::npos ||
              text.find("point-to-point connector") == std::string::npos) {
            return "unexpected result " + std::to_string(r) + ": " + text;
          }
          return expect(took < 8, "failed after " + std::to_string(took) + " s: " + text);
        },
        20, {"BRAID_BOOTSTRAP_TIMEOUT=60", destroyed ? "BRAID_STALL_TIMEOUT=60" : "BRAID_STALL_TIMEOUT=2"});
    for (int fd : {toZero[0], toZero[1], toOne[0], toOne[1]}) close(fd);
    EXPECT_EQ(describeFailures(out), "");
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

// Ranks 0 and 1 start an all-reduce rank 2 never joins; another thread of
// each revokes its communicator after 300 ms, which must release the call
// within a second. Rank 2 revokes its idle communicator. Then on every
// rank, as NCCL 2.29+ does: the communicator is quiescent (ncclSuccess),
// refuses collectives and sends (ncclInvalidUsage), a second revoke, a
// flag other than 0 and ncclCommFinalize (ncclInvalidArgument), while
// splitting it (all three) and shrinking it (without rank 2) give
// communicators that work. A non-blocking child's revoke is ncclInProgress,
// then settles; revoking NULL is a no-op.
TEST(CollFaults, RevokeReleasesAWaitingCollectiveAndLeavesSplitAndShrink) {
  RootProcess root = startRootProcess();
  auto out = runRanks(
      3,
      [&](int rank, int n) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, n, root.id, rank), "init");
        if (err.empty()) err = allReduceOf(comm, rank, 6.0f, "first allreduce");
        if (!err.empty()) return err;
        std::vector<float> buf(1 << 20, 1.0f);
        if (rank < 2) {
          std::chrono::steady_clock::time_point revokedAt;
          ncclResult_t revoked = ncclInternalError;
          std::thread revoker([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            revokedAt = std::chrono::steady_clock::now();
            revoked = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
          });
          const ncclResult_t r =
              ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
          revoker.join();
          const double took = secondsSince(revokedAt);
          if (revoked != ncclSuccess) return "the revoke gave " + std::string(ncclGetErrorString(revoked));
          if (r == ncclSuccess) return "the all-reduce succeeded without rank 2";
          if (took > 1.0) return "the all-reduce let go " + std::to_string(took) + " s after the revoke";
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(600));
          err = check(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "revoking an idle communicator");
          if (!err.empty()) return err;
        }
        ncclResult_t async = ncclInternalError;
        if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) {
          return "after the revoke the communicator is " + std::string(ncclGetErrorString(async));
        }
        const struct {
          const char* what;
          ncclResult_t got, want;
        } refusals[] = {
            {"an all-reduce", ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat, ncclSum, comm, nullptr),
             ncclInvalidUsage},
            {"a send", ncclSend(buf.data(), 16, ncclFloat, (rank + 1) % n, comm, nullptr), ncclInvalidUsage},
            {"a second revoke", ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclInvalidArgument},
            {"a revoke with flag 1", ncclCommRevoke(comm, 1), ncclInvalidArgument},
            {"ncclCommFinalize", ncclCommFinalize(comm), ncclInvalidArgument},
            {"revoking NULL", ncclCommRevoke(nullptr, NCCL_REVOKE_DEFAULT), ncclSuccess},
        };
        for (const auto& c : refusals) {
          if (c.got != c.want) {
            return std::string(c.what) + " after the revoke gave " + ncclGetErrorString(c.got) + ", not " +
                   ncclGetErrorString(c.want);
          }
        }
        if (std::string(ncclGetLastError(comm)).find("revoked") == std::string::npos) {
          return "the last error does not say revoked: " + std::string(ncclGetLastError(comm));
        }
        ncclComm_t child = nullptr;
        err = check(ncclCommSplit(comm, 0, rank, &child, nullptr), "splitting the revoked communicator");
        if (err.empty()) err = allReduceOf(child, rank, 6.0f, "the split child's allreduce");
        if (!err.empty()) return err;
        // A non-blocking child: its revoke is ncclInProgress, then it settles.
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t nb = nullptr;
        ncclResult_t r = ncclCommSplit(child, 0, rank, &nb, &config);
        if (r != ncclSuccess && r != ncclInProgress) return "non-blocking split: " + check(r, "split");
        ncclResult_t state = ncclInProgress;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
          if (ncclCommGetAsyncError(nb, &state) != ncclSuccess) return "polling the non-blocking child";
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (state != ncclSuccess)
          return "the non-blocking child ended " + std::string(ncclGetErrorString(state));
        r = ncclCommRevoke(nb, NCCL_REVOKE_DEFAULT);
        if (r != ncclInProgress) return "a non-blocking revoke gave " + std::string(ncclGetErrorString(r));
        if (ncclCommGetAsyncError(nb, &state) != ncclSuccess || state != ncclSuccess) {
          return "the non-blocking child did not settle after its revoke: " +
                 std::string(ncclGetErrorString(state));
        }
        ncclCommDestroy(nb);
        ncclCommDestroy(child);
        if (rank < 2) {
          int exclude[] = {2};
          ncclComm_t small = nullptr;
          err = check(ncclCommShrink(comm, exclude, 1, &small, nullptr, NCCL_SHRINK_DEFAULT),
                      "shrinking the revoked communicator");
          if (err.empty()) err = allReduceOf(small, rank, 3.0f, "the shrunk allreduce");
          if (small != nullptr) ncclCommDestroy(small);
        }
        err += check(ncclCommDestroy(comm), "destroying the revoked communicator");
        return err;
      },
      60, {"BRAID_STALL_TIMEOUT=60", "BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

}  // namespace
}  // namespace braid::test
