// Every collective x type x op x in-place/out-of-place x count on the host
// backend, over forked ranks, checked against an independent reference (the
// sweep itself is in coll_sweep.cc, shared with the mpirun program); the same
// on teams made by ncclCommSplit; send/recv and the collectives made of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "braid.h"
#include "coll_sweep.h"
#include "harness.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid::test {

// Test names and parameters print as the shape's name.
void PrintTo(SplitShape shape, std::ostream* os) {
  *os << splitShapeName(shape);
}

namespace {

const bool kHostBackend = (setenv("BRAID_BACKEND", "host", 0), true);
// Small FIFOs, so that every count above a few thousand spans many steps.
const std::vector<std::string> kEnv = {"BRAID_BUFFSIZE=64K", "BRAID_BOOTSTRAP_TIMEOUT=20",
                                       "BRAID_STALL_TIMEOUT=30"};

std::string sweep(const ncclUniqueId& id, int rank, int n, SweepCounts counts = sweepCountsFromEnv()) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  std::string fail = collSweep(comm, rank, n, counts);
  return fail + check(ncclCommDestroy(comm), "destroy");
}

class CollSweep : public ::testing::TestWithParam<int> {};

TEST_P(CollSweep, EveryCollectiveTypeOpAndCount) {
  int n = GetParam();
  RootProcess root = startRootProcess(kEnv);
  auto out = runRanks(
      n, [&](int rank, int nranks) { return sweep(root.id, rank, nranks); }, 600, kEnv);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollSweep, ::testing::Values(1, 2, 3, 4, 8));

// The sweep with each algorithm, protocol and channel count forced through
// the environment, as a user would (the selector alone would pick Direct
// for small all-reduces, Ring for the rest, one channel on this machine).
struct AlgoCase {
  const char* name;
  int nranks;
  std::vector<std::string> env;
  bool full;  // full counts (else quick: 0, 1, 7, 4099)
};
void PrintTo(const AlgoCase& c, std::ostream* os) {
  *os << c.name;
}

class CollAlgos : public ::testing::TestWithParam<AlgoCase> {};

TEST_P(CollAlgos, SweepWithForcedChoice) {
  const AlgoCase& c = GetParam();
  std::vector<std::string> env = kEnv;
  env.insert(env.end(), c.env.begin(), c.env.end());
  env.push_back("NCCL_DEBUG=WARN");
  RootProcess root = startRootProcess(env);
  SweepCounts counts = c.full ? sweepCountsFromEnv() : SweepCounts::kQuick;
  auto out = runRanks(
      c.nranks, [&](int rank, int nranks) { return sweep(root.id, rank, nranks, counts); }, 600, env);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(
    Forced, CollAlgos,
    ::testing::Values(AlgoCase{"Tree3", 3, {"NCCL_ALGO=Tree"}, true},
                      AlgoCase{"TreeLL8", 8, {"NCCL_ALGO=Tree", "NCCL_PROTO=LL"}, false},
                      AlgoCase{"TreeTwoChannels4", 4, {"NCCL_ALGO=Tree", "NCCL_MIN_NCHANNELS=2"}, false},
                      AlgoCase{"RingLL4", 4, {"NCCL_ALGO=Ring", "NCCL_PROTO=LL"}, false},
                      AlgoCase{"RingThreeChannels4", 4, {"NCCL_ALGO=Ring", "NCCL_MIN_NCHANNELS=3"}, true},
                      AlgoCase{"DirectSimple3", 3, {"NCCL_ALGO=Direct", "NCCL_PROTO=Simple"}, false},
                      AlgoCase{"DirectLL5", 5, {"NCCL_ALGO=Direct", "NCCL_PROTO=LL"}, false},
                      AlgoCase{"TwoShot3", 3, {"NCCL_ALGO=TwoShot", "NCCL_PROTO=Simple"}, true},
                      AlgoCase{"TwoShotLL4", 4, {"NCCL_ALGO=TwoShot", "NCCL_PROTO=LL"}, false},
                      AlgoCase{"TwoShot8", 8, {"NCCL_ALGO=TwoShot", "NCCL_PROTO=Simple"}, false},
                      // Streaming stores for every output (normally from 32 MiB): every
                      // step shape writes the user's buffer through them.
                      AlgoCase{"RingStreaming3", 3, {"NCCL_ALGO=Ring", "BRAID_HOST_STREAM_BYTES=1"}, true},
                      AlgoCase{"TreeStreaming4", 4, {"NCCL_ALGO=Tree", "BRAID_HOST_STREAM_BYTES=1"}, false},
                      // One rank: every collective is a copy, streamed here.
                      AlgoCase{"Streaming1", 1, {"BRAID_HOST_STREAM_BYTES=1"}, true}),
    [](const ::testing::TestParamInfo<AlgoCase>& p) { return std::string(p.param.name); });

// 64 ranks on this machine's few cores: every wait must hand the core over
// (yield, then sleep) for the ranks it waits on to run, or a collective
// would take scheduler ticks per step. All-reduce in and out of place,
// all-gather, broadcast from the last rank, reduce-scatter and a
// send/receive around the ring, each result checked exactly (int32).
std::string oversubscribed(const ncclUniqueId& id, int rank, int n) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  auto value = [](int r, size_t i) {
    return static_cast<int32_t>((r * 13 + static_cast<int>(i % 1000) * 7) % 101);
  };
  auto bad = [&](const char* what, size_t i, int32_t got, int32_t want) {
    return strCat(what, " element ", i, ": ", got, " instead of ", want);
  };
  for (size_t count : {size_t{1}, size_t{4099}}) {
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
    err = check(ncclAllReduce(in.data(), out.data(), count, ncclInt32, ncclSum, comm, nullptr), "all-reduce");
    if (err.empty())
      err = check(ncclAllReduce(in.data(), in.data(), count, ncclInt32, ncclSum, comm, nullptr), "in place");
    for (size_t i = 0; i < count && err.empty(); ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += value(r, i);
      if (out[i] != want) err = bad("all-reduce", i, out[i], want);
      if (in[i] != want) err = bad("in-place all-reduce", i, in[i], want);
    }
    if (!err.empty()) break;
  }
  const size_t block = 1000;
  std::vector<int32_t> mine(block * static_cast<size_t>(n)), all(block * static_cast<size_t>(n), -1);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(rank, i + 3);
  if (err.empty())
    err = check(ncclAllGather(mine.data(), all.data(), block, ncclInt32, comm, nullptr), "all-gather");
  for (size_t i = 0; i < all.size() && err.empty(); ++i) {
    const int32_t want = value(static_cast<int>(i / block), i % block + 3);
    if (all[i] != want) err = bad("all-gather", i, all[i], want);
  }
  std::vector<int32_t> bcast(block);
  for (size_t i = 0; i < block; ++i) bcast[i] = rank == n - 1 ? value(n - 1, i + 5) : -1;
  if (err.empty())
    err =
        check(ncclBroadcast(bcast.data(), bcast.data(), block, ncclInt32, n - 1, comm, nullptr), "broadcast");
  for (size_t i = 0; i < block && err.empty(); ++i) {
    if (bcast[i] != value(n - 1, i + 5)) err = bad("broadcast", i, bcast[i], value(n - 1, i + 5));
  }
  std::vector<int32_t> part(block, -1);
  if (err.empty()) {
    err = check(ncclReduceScatter(mine.data(), part.data(), block, ncclInt32, ncclSum, comm, nullptr),
                "reduce-scatter");
  }
  for (size_t i = 0; i < block && err.empty(); ++i) {
    int32_t want = 0;
    for (int r = 0; r < n; ++r) want += value(r, static_cast<size_t>(rank) * block + i + 3);
    if (part[i] != want) err = bad("reduce-scatter", i, part[i], want);
  }
  std::vector<int32_t> got(block, -1);
  if (err.empty()) {
    err = check(ncclGroupStart(), "group start");
    if (err.empty())
      err = check(ncclSend(mine.data(), block, ncclInt32, (rank + 1) % n, comm, nullptr), "send");
    if (err.empty())
      err = check(ncclRecv(got.data(), block, ncclInt32, (rank + n - 1) % n, comm, nullptr), "recv");
    if (err.empty()) err = check(ncclGroupEnd(), "group end");
  }
  for (size_t i = 0; i < block && err.empty(); ++i) {
    const int32_t want = value((rank + n - 1) % n, i + 3);
    if (got[i] != want) err = bad("recv", i, got[i], want);
  }
  if (!err.empty()) {
    (void)ncclCommAbort(comm);
    return err;
  }
  return check(ncclCommDestroy(comm), "destroy");
}

TEST(CollOversubscribed, SixtyFourRanksOnTheCoresProgress) {
  std::vector<std::string> env = kEnv;
  env.push_back("NCCL_DEBUG=WARN");
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      64, [&](int rank, int nranks) { return oversubscribed(root.id, rank, nranks); }, 240, env);
  EXPECT_EQ(describeFailures(out), "");
  double slowest = 0;
  for (const RankOutcome& o : out) slowest = std::max(slowest, o.seconds);
  std::printf("64 ranks on %ld cores: the slowest rank took %.1f s\n", sysconf(_SC_NPROCESSORS_ONLN),
              slowest);
}

// Ranks placed round-robin on two hosts (BRAID_HOSTID; peers on the other
// "host" go over the net transport): the channels' rings visit each host's
// ranks together (0 2 1 3), so ring positions differ from ranks, and every
// collective must still put each rank's block where it belongs.
TEST(CollPlacement, RoundRobinHostsSweep) {
  std::vector<std::string> env = kEnv;
  env.push_back("NCCL_DEBUG=WARN");
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      4,
      [&](int rank, int nranks) {
        setenv("BRAID_HOSTID", rank % 2 == 0 ? "even-host" : "odd-host", 1);
        ParamRegistry::instance().reload();
        return sweep(root.id, rank, nranks, SweepCounts::kQuick);
      },
      600, env);
  EXPECT_EQ(describeFailures(out), "");
}

// Hosts holding different numbers of ranks (2 + 1): each rank sees its own
// host's rank count, yet all must choose alike for every collective (before,
// the lone rank chose Tree where the others chose Ring, and the first
// all-reduce hung), by default and with the tree forced.
TEST(CollPlacement, UnevenHostsSweep) {
  for (const char* algo : {"NCCL_ALGO=", "NCCL_ALGO=allreduce:Tree"}) {
    SCOPED_TRACE(algo);
    std::vector<std::string> env = kEnv;
    env.insert(env.end(), {"NCCL_DEBUG=WARN", algo});
    RootProcess root = startRootProcess(env);
    auto out = runRanks(
        3,
        [&](int rank, int nranks) {
          setenv("BRAID_HOSTID", rank < 2 ? "host-of-two" : "host-of-one", 1);
          ParamRegistry::instance().reload();
          return sweep(root.id, rank, nranks, SweepCounts::kQuick);
        },
        300, env);
    EXPECT_EQ(describeFailures(out), "");
  }
}

// Teams made by ncclCommSplit from a parent of n ranks: each runs the sweep
// (quick counts) with its new ranks, the odd and even teams at the same time.
class CollSplit : public ::testing::TestWithParam<std::tuple<int, SplitShape>> {};

TEST_P(CollSplit, SweepOnEachTeam) {
  const auto [n, shape] = GetParam();
  RootProcess root = startRootProcess(kEnv);
  auto body = [&, shape = shape](int rank, int nranks) {
    ncclComm_t parent = nullptr;
    std::string err = check(ncclCommInitRank(&parent, nranks, root.id, rank), "init");
    if (!err.empty()) return err;
    err = splitSweep(parent, rank, nranks, shape, SweepCounts::kQuick);
    return err + check(ncclCommDestroy(parent), "destroy parent");
  };
  EXPECT_EQ(describeFailures(runRanks(n, body, 300, kEnv)), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollSplit,
                         ::testing::Combine(::testing::Values(8, 5),
                                            ::testing::Values(SplitShape::kReversed, SplitShape::kOddEven,
                                                              SplitShape::kLeaveLastOut)),
                         [](const ::testing::TestParamInfo<CollSplit::ParamType>& p) {
                           return strCat(std::get<0>(p.param), "Ranks", splitShapeName(std::get<1>(p.param)));
                         });

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// Sends, receives and the collectives made of them (p2pSweep, coll_sweep.cc),
// then many collectives and a send/receive in one group (groupSweep).
std::string p2pChecks(const ncclUniqueId& id, int rank, int n) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  err = p2pSweep(comm, rank, n);
  if (err.empty()) err = groupSweep(comm, rank, n);
  if (!err.empty()) return err;
  return check(ncclCommDestroy(comm), "destroy");
}

class P2pSweep : public ::testing::TestWithParam<int> {};

TEST_P(P2pSweep, SendRecvAllToAllGatherScatter) {
  int n = GetParam();
  RootProcess root = startRootProcess(kEnv);
  auto out = runRanks(
      n, [&](int rank, int nranks) { return p2pChecks(root.id, rank, nranks); }, 300, kEnv);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, P2pSweep, ::testing::Values(1, 2, 3, 5));

// A group's sends and receives may sit anywhere among its collectives, each
// rank placing them differently, as NCCL allows: rank 0 {send to 1, send to
// itself, all-reduce, receive from itself, receive from 1}, rank 1
// {all-reduce, receive from 0, send to 0}. Before, the all-reduce (one-shot
// at the smaller sizes) took rank 0's message as its input (wrong results
// and ncclSuccess), at 100000 elements the ranks waited for each other's
// connections until the bootstrap timeout, and the send to itself was
// refused as unmatched.
TEST(CollGroups, SendRecvAnywhereAmongTheCollectives) {
  RootProcess root = startRootProcess(kEnv);
  auto body = [&](int rank, int nranks) -> std::string {
    ncclComm_t comm = nullptr;
    std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
    if (!err.empty()) return err;
    for (size_t count : {256, 1000, 100000}) {
      if (!err.empty()) break;
      std::vector<float> sum(count), msg(count), got(count, -1), self(count, -1);
      for (size_t i = 0; i < count; ++i) {
        sum[i] = static_cast<float>(rank * 1000 + i % 997);
        msg[i] = static_cast<float>(5000000 + rank * 100000 + i % 4099);
      }
      const int peer = 1 - rank;
      auto allReduce = [&] {
        return ncclAllReduce(sum.data(), sum.data(), count, ncclFloat, ncclSum, comm, nullptr);
      };
      err += check(ncclGroupStart(), "group start");
      if (rank == 0) {  // {send, all-reduce, receive}, a send to itself split by the collective
        err += check(ncclSend(msg.data(), count, ncclFloat, peer, comm, nullptr), "send");
        err += check(ncclSend(msg.data(), count, ncclFloat, rank, comm, nullptr), "self send");
        err += check(allReduce(), "all-reduce");
        err += check(ncclRecv(self.data(), count, ncclFloat, rank, comm, nullptr), "self recv");
        err += check(ncclRecv(got.data(), count, ncclFloat, peer, comm, nullptr), "recv");
      } else {  // {all-reduce, receive, send}
        err += check(allReduce(), "all-reduce");
        err += check(ncclRecv(got.data(), count, ncclFloat, peer, comm, nullptr), "recv");
        err += check(ncclSend(msg.data(), count, ncclFloat, peer, comm, nullptr), "send");
      }
      err += check(ncclGroupEnd(), strCat("group end, count ", count).c_str());
      for (size_t i = 0; i < count && err.empty(); ++i) {
        if (sum[i] != static_cast<float>(1000 + 2 * (i % 997)))
          err = strCat("count ", count, ": all-reduce element ", i, " is ", sum[i]);
        else if (got[i] != static_cast<float>(5000000 + peer * 100000 + i % 4099))
          err = strCat("count ", count, ": received element ", i, " is ", got[i]);
        else if (rank == 0 && self[i] != msg[i])
          err = strCat("count ", count, ": element ", i, " sent to itself is ", self[i]);
      }
    }
    return err + check(ncclCommDestroy(comm), "destroy");
  };
  EXPECT_EQ(describeFailures(runRanks(2, body, 120, kEnv)), "");
}

// One thread drives several communicators in one group, as a single process
// with several devices does.
TEST(CollThreads, OneThreadDrivesAllCommunicatorsInAGroup) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  const size_t count = 100003;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) bufs[r][i] = static_cast<float>((r + 1) * (i % 13));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), count, ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; i += 997) ASSERT_EQ(bufs[r][i], 10.0f * (i % 13)) << r << " " << i;
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A collective of count 0 moves nothing and is not matched across ranks: it
// returns at once on the rank that calls it, as in NCCL, whether or not the
// others call it too (here only one rank of two does, from one thread).
TEST(CollEmpty, CountZeroCallsReturnWithoutThePeers) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  float x = 1, y = 2;
  ncclComm_t c = comms[1];
  EXPECT_EQ(ncclAllReduce(&x, &y, 0, ncclFloat, ncclSum, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclBroadcast(&x, &y, 0, ncclFloat, 0, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclReduce(&x, &y, 0, ncclFloat, ncclMax, 0, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclAllGather(&x, &y, 0, ncclFloat, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclReduceScatter(&x, &y, 0, ncclFloat, ncclSum, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclAllToAll(&x, &y, 0, ncclFloat, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclGather(&x, &y, 0, ncclFloat, 0, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclScatter(&x, &y, 0, ncclFloat, 0, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(y, 2.0f);
  // Arguments are still checked: a bad root or type is an error at count 0 too.
  EXPECT_EQ(ncclBroadcast(&x, &y, 0, ncclFloat, n, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &y, 0, static_cast<ncclDataType_t>(99), ncclSum, c, nullptr),
            ncclInvalidArgument);
  // The communicators are still in step: a real all-reduce of both.
  std::vector<float> bufs[n] = {std::vector<float>(1000, 1.0f), std::vector<float>(1000, 2.0f)};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(bufs[r][999], 3.0f) << r;
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

}  // namespace
}  // namespace braid::test
