// Every collective x type x op x in-place/out-of-place x count on the host
// backend, over forked ranks, checked against an independent reference (the
// sweep itself is in coll_sweep.cc, shared with the mpirun program); the same
// on teams made by ncclCommSplit; send/recv and the collectives made of them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "braid.h"
#include "coll_sweep.h"
#include "harness.h"
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
void PrintTo(const AlgoCase& c, std::ostream* os) { *os << c.name; }

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
                      AlgoCase{"DirectLL5", 5, {"NCCL_ALGO=Direct", "NCCL_PROTO=LL"}, false}),
    [](const ::testing::TestParamInfo<AlgoCase>& p) { return std::string(p.param.name); });

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

// Sends, receives and the collectives made of them.
std::string p2pChecks(const ncclUniqueId& id, int rank, int n) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  auto val = [](int from, int to, size_t i) { return static_cast<int32_t>(from * 1000003 + to * 7919 + i); };
  for (size_t count : {size_t(0), size_t(1), size_t(1001), size_t(300000)}) {
    std::string tag = strCat(" count ", count);
    // Every rank sends to every rank (itself included) in one group, and
    // both directions of each pair at once: large messages must not deadlock.
    {
      std::vector<std::vector<int32_t>> out(n), in(n);
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {
        out[p].resize(count);
        in[p].assign(count, -1);
        for (size_t i = 0; i < count; ++i) out[p][i] = val(rank, p, i);
        ncclSend(out[p].data(), count, ncclInt32, p, comm, nullptr);
        ncclRecv(in[p].data(), count, ncclInt32, p, comm, nullptr);
      }
      err = check(ncclGroupEnd(), "send/recv group");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (in[p][i] != val(p, rank, i)) return strCat("send/recv from ", p, " at ", i, tag);
        }
      }
    }
    // Two messages to the same peer in one group arrive in call order.
    if (n > 1) {
      int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
      std::vector<int32_t> a(count, rank), b(count / 2 + 1, rank + 100), ra(count, -1), rb(count / 2 + 1, -1);
      ncclGroupStart();
      ncclSend(a.data(), a.size(), ncclInt32, next, comm, nullptr);
      ncclSend(b.data(), b.size(), ncclInt32, next, comm, nullptr);
      ncclRecv(ra.data(), ra.size(), ncclInt32, prev, comm, nullptr);
      ncclRecv(rb.data(), rb.size(), ncclInt32, prev, comm, nullptr);
      err = check(ncclGroupEnd(), "ordered sends");
      if (!err.empty()) return err + tag;
      for (int32_t v : ra) {
        if (v != prev) return "ordered sends: first message" + tag;
      }
      for (int32_t v : rb) {
        if (v != prev + 100) return "ordered sends: second message" + tag;
      }
    }
    // All-to-all.
    {
      std::vector<int32_t> in(count * n), out(count * n, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) in[p * count + i] = val(rank, p, i);
      }
      err = check(ncclAlltoAll(in.data(), out.data(), count, ncclInt32, comm, nullptr), "alltoall");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (out[p * count + i] != val(p, rank, i)) return strCat("alltoall from ", p, " at ", i, tag);
        }
      }
      // In place (as nccl-tests runs it): Braid stages the outgoing blocks.
      err = check(ncclAlltoAll(in.data(), in.data(), count, ncclInt32, comm, nullptr), "in-place alltoall");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (in[p * count + i] != val(p, rank, i)) return strCat("in-place alltoall from ", p, " at ", i, tag);
        }
      }
    }
    // All-to-allv, uneven: rank r sends (r + p) % 3 * count / 2 elements to p.
    {
      auto cnt = [&](int from, int to) { return static_cast<size_t>((from + to) % 3) * count / 2; };
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t stotal = 0, rtotal = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = cnt(rank, p);
        sd[p] = stotal;
        stotal += sc[p];
        rc[p] = cnt(p, rank);
        rd[p] = rtotal;
        rtotal += rc[p];
      }
      std::vector<int32_t> in(stotal + 1), out(rtotal + 1, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = val(rank, p, i);
      }
      err = check(ncclAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), ncclInt32,
                                comm, nullptr),
                  "alltoallv");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < rc[p]; ++i) {
          if (out[rd[p] + i] != val(p, rank, i)) return strCat("alltoallv from ", p, " at ", i, tag);
        }
      }
    }
    // Gather and scatter at every root.
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> mine(count), all(count * n, -1);
      for (size_t i = 0; i < count; ++i) mine[i] = val(rank, root, i);
      err = check(ncclGather(mine.data(), all.data(), count, ncclInt32, root, comm, nullptr), "gather");
      if (!err.empty()) return err + tag;
      if (rank == root) {
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            if (all[p * count + i] != val(p, root, i)) return strCat("gather root ", root, " from ", p, tag);
          }
        }
      }
      std::vector<int32_t> src(count * n), got(count, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) src[p * count + i] = val(root, p, i);
      }
      err = check(ncclScatter(src.data(), got.data(), count, ncclInt32, root, comm, nullptr), "scatter");
      if (!err.empty()) return err + tag;
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != val(root, rank, i)) return strCat("scatter root ", root, " at ", i, tag);
      }
    }
  }
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

}  // namespace
}  // namespace braid::test
