// Communicators over real processes and sockets: init, queries, the
// bootstrap's collectives, split, non-blocking init, scalable init, and
// every failure the ranks must survive without hanging.
#include "core/comm.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "core/nccl_device_abi.h"
#include "harness.h"
#include "nccl.h"
#include "platform/socket.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid::test {
namespace {

// These tests exercise the host backend (many ranks per GPU would be refused
// on a GPU machine); BRAID_BACKEND set by the caller still wins. Set before
// main, so forked ranks inherit it.
const bool kHostBackend = (setenv("BRAID_BACKEND", "host", /*overwrite=*/0), true);

// Short timeouts so that failure tests finish quickly.
const std::vector<std::string> kFastEnv = {"BRAID_BOOTSTRAP_TIMEOUT=5", "NCCL_DEBUG=WARN"};

bootstrap::Bootstrap* bootstrapOf(ncclComm_t comm) { return static_cast<Communicator*>(comm)->bootstrap(); }

// Checks the bootstrap's all-gather, barrier and tagged send/recv.
std::string exerciseBootstrap(ncclComm_t comm, int rank, int nranks) {
  bootstrap::Bootstrap* bs = bootstrapOf(comm);
  std::vector<int64_t> data(static_cast<size_t>(nranks), -1);
  data[static_cast<size_t>(rank)] = (rank + 1) * 1000003LL + 7;
  Status s = bs->allGather(data.data(), sizeof(int64_t));
  if (!s.ok()) return "allGather: " + s.message();
  for (int r = 0; r < nranks; ++r) {
    if (data[static_cast<size_t>(r)] != (r + 1) * 1000003LL + 7) return "allGather: wrong slot " + std::to_string(r);
  }
  // A large all-gather: slots bigger than socket buffers must not deadlock the ring.
  const size_t big = 1 << 20;
  std::vector<uint8_t> blob(big * static_cast<size_t>(nranks));
  for (size_t i = 0; i < big; ++i) blob[static_cast<size_t>(rank) * big + i] = static_cast<uint8_t>((i * 31 + rank) % 251);
  s = bs->allGather(blob.data(), big);
  if (!s.ok()) return "big allGather: " + s.message();
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < big; i += 4099) {
      if (blob[static_cast<size_t>(r) * big + i] != static_cast<uint8_t>((i * 31 + r) % 251)) return "big allGather data";
    }
  }
  s = bs->barrier();
  if (!s.ok()) return "barrier: " + s.message();
  if (nranks > 1) {
    int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
    int64_t out = rank * 17, in = -1;
    s = bs->send(next, 42, &out, sizeof(out));
    if (!s.ok()) return "send: " + s.message();
    s = bs->recv(prev, 42, &in, sizeof(in));
    if (!s.ok()) return "recv: " + s.message();
    if (in != prev * 17) return "recv: wrong value";
  }
  return "";
}

std::string initAndCheck(const ncclUniqueId& id, int rank, int nranks) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  if (!err.empty()) return err;
  int count = -1, me = -1, dev = -2;
  if (ncclCommCount(comm, &count) != ncclSuccess || count != nranks) return "ncclCommCount";
  if (ncclCommUserRank(comm, &me) != ncclSuccess || me != rank) return "ncclCommUserRank";
  if (ncclCommCuDevice(comm, &dev) != ncclSuccess || dev != -1) return "ncclCommCuDevice on the host backend";
  ncclResult_t async = ncclInternalError;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) return "async error";
  err = exerciseBootstrap(comm, rank, nranks);
  if (!err.empty()) return err;
  // Peer info: every rank saw every other with this host's id.
  for (const PeerInfo& p : static_cast<Communicator*>(comm)->peers()) {
    if (std::string(p.hostId) != localHostId()) return "peer info host id";
  }
  if (ncclCommFinalize(comm) != ncclSuccess) return "finalize";
  float x = 0;
  if (ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidUsage) return "collective after finalize";
  return check(ncclCommDestroy(comm), "ncclCommDestroy");
}

class CommRanks : public ::testing::TestWithParam<int> {};

TEST_P(CommRanks, InitQueriesBootstrapDestroy) {
  int nranks = GetParam();
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(nranks, [&](int r, int n) { return initAndCheck(root.id, r, n); }, 60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Sizes, CommRanks, ::testing::Values(1, 2, 3, 4, 8));

TEST(Comm, SplitWithReversedKeysAndNoColor) {
  const int n = 6;
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(n, [&](int rank, int nranks) -> std::string {
    ncclComm_t comm = nullptr;
    std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
    if (!err.empty()) return err;
    // Rank 5 opts out; the others split by parity, ordered by descending rank.
    int color = rank == 5 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    ncclComm_t sub = reinterpret_cast<ncclComm_t>(1);
    err = check(ncclCommSplit(comm, color, -rank, &sub, nullptr), "split");
    if (!err.empty()) return err;
    if (rank == 5) {
      if (sub != nullptr) return "NOCOLOR must give NULL";
      return check(ncclCommDestroy(comm), "destroy");
    }
    // Members: even {4,2,0} or odd {3,1}, in that order.
    std::vector<int> members = rank % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
    int size = -1, newRank = -1;
    ncclCommCount(sub, &size);
    ncclCommUserRank(sub, &newRank);
    if (size != static_cast<int>(members.size())) return "split size " + std::to_string(size);
    if (members[static_cast<size_t>(newRank)] != rank) return "split order: new rank " + std::to_string(newRank);
    std::vector<int32_t> seen(members.size());
    seen[static_cast<size_t>(newRank)] = rank;
    Status s = bootstrapOf(sub)->allGather(seen.data(), sizeof(int32_t));
    if (!s.ok()) return "sub allGather: " + s.message();
    for (size_t i = 0; i < members.size(); ++i) {
      if (seen[i] != members[i]) return "sub allGather membership";
    }
    err = check(ncclCommDestroy(sub), "destroy sub");
    if (!err.empty()) return err;
    return check(ncclCommDestroy(comm), "destroy");
  }, 60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

std::string teamText(const ncclTeam& t) {
  return strCat("{", t.nRanks, ", ", t.rank, ", ", t.stride, "}");
}

// The device API's teams on 4 ranks over two hosts (BRAID_HOSTID): the
// world; the load-store team, which is the ranks of one host when each host
// holds a block of consecutive ranks (0 1 | 2 3) and the rank alone when
// the hosts interleave (0 2 | 1 3); the rail, one rank per load-store team;
// and the translations of their members to world and load-store ranks. The
// LSA barrier's requirement is sized for its team, GIN's is refused; a bad
// communicator gives an empty team and a last error naming it.
TEST(CommTeams, LoadStoreTeamIsTheHostsBlockOfRanks) {
  for (bool blocks : {true, false}) {
    RootProcess root = startRootProcess(kFastEnv);
    auto out = runRanks(
        4,
        [&](int rank, int nranks) -> std::string {
          setenv("BRAID_HOSTID", (blocks ? rank / 2 : rank % 2) == 0 ? "host-a" : "host-b", 1);
          ParamRegistry::instance().reload();
          ncclComm_t comm = nullptr;
          std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
          if (!err.empty()) return err;
          const int lsaSize = blocks ? 2 : 1, base = rank - rank % lsaSize;
          const ncclTeam world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
          if (teamText(world) != teamText({nranks, rank, 1})) return "world team " + teamText(world);
          if (teamText(lsa) != teamText({lsaSize, rank % lsaSize, 1})) return "LSA team " + teamText(lsa);
          if (teamText(rail) != teamText({nranks / lsaSize, rank / lsaSize, lsaSize}))
            return "rail " + teamText(rail);
          for (int i = 0; i < lsa.nRanks; ++i) {
            if (ncclTeamRankToWorld(comm, lsa, i) != base + i)
              return strCat("LSA member ", i, " in the world");
            if (ncclTeamRankToLsa(comm, lsa, i) != i) return strCat("LSA member ", i, " in the LSA team");
          }
          for (int i = 0; i < rail.nRanks; ++i) {
            if (ncclTeamRankToWorld(comm, rail, i) != rank % lsaSize + i * lsaSize)
              return strCat("rail member ", i);
          }
          if (ncclTeamRankToLsa(comm, world, base) != 0) return "world rank of the LSA team's first member";
          ncclLsaBarrierHandle barrier{};
          ncclDevResourceRequirements req{};
          if (ncclLsaBarrierCreateRequirement(lsa, 1, &barrier, &req) != ncclSuccess ||
              req.bufferSize != (3u + static_cast<size_t>(lsaSize)) * 4u || barrier.nBarriers != 1) {
            return "LSA barrier requirement: " + std::string(ncclGetLastError(nullptr));
          }
          ncclGinBarrierHandle gin{};
          if (ncclGinBarrierCreateRequirement(comm, rail, 1, &gin, &req) != ncclInvalidUsage ||
              std::string(ncclGetLastError(nullptr)).find("GIN") == std::string::npos)
            return "GIN barrier requirement: " + std::string(ncclGetLastError(nullptr));
          ncclLLA2AHandle a2a{};
          if (ncclLLA2ACreateRequirement(1, ncclLLA2ACalcSlots(8, 12), &a2a, nullptr) !=
                  ncclInvalidArgument ||
              std::string(ncclGetLastError(nullptr)).find("outReq") == std::string::npos) {
            return "LL all-to-all requirement without outReq: " + std::string(ncclGetLastError(nullptr));
          }
          if (ncclLLA2ACalcSlots(8, 12) != 16 || ncclLLA2ACalcSlots(8, 8) != 8) return "LL all-to-all slots";
          return check(ncclCommDestroy(comm), "destroy");
        },
        60, kFastEnv);
    EXPECT_EQ(describeFailures(out), "") << (blocks ? "hosts hold blocks of ranks" : "hosts interleave");
  }
  const ncclTeam none = ncclTeamWorld(nullptr);
  EXPECT_EQ(teamText(none), teamText({0, 0, 1}));
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("comm"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclTeamRankToWorld(nullptr, none, 0), -1);
}

// Both ends of a GPU connector must take the same path, so the direct-write
// thresholds are one value for every rank, whatever each rank set: 0 (never)
// if any rank sets 0, else the largest any rank sets (the default where a
// rank sets nothing). Checked on the host backend, which exchanges them too.
TEST(Comm, DirectWriteThresholdsAreAgreedByEveryRank) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(
      3,
      [&](int rank, int nranks) -> std::string {
        const char* ring[] = {"64K", "1M", nullptr};  // rank 2: the default (128 KiB)
        const char* p2p[] = {"4K", "0", "8M"};
        if (ring[rank] != nullptr) setenv("BRAID_GPU_RING_DIRECT_MIN_BYTES", ring[rank], 1);
        setenv("BRAID_GPU_P2P_DIRECT_MIN_BYTES", p2p[rank], 1);
        ParamRegistry::instance().reload();
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
        if (!err.empty()) return err;
        const Communicator* c = static_cast<Communicator*>(comm);
        if (c->gpuRingDirectMinBytes() != (size_t(1) << 20)) {
          err = strCat("ring threshold ", c->gpuRingDirectMinBytes(), " where every rank should use 1 MiB");
        } else if (c->gpuP2pDirectMinBytes() != 0) {
          err = strCat("send threshold ", c->gpuP2pDirectMinBytes(), " where rank 1's 0 should turn it off");
        }
        return err + check(ncclCommDestroy(comm), "destroy");
      },
      60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(Comm, NonBlockingInitPollsToCompletion) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(3, [&](int rank, int nranks) -> std::string {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, root.id, rank, &config);
    if (r != ncclInProgress && r != ncclSuccess) return check(r, "init");
    if (comm == nullptr) return "no handle from non-blocking init";
    ncclResult_t state = ncclInProgress;
    for (int i = 0; i < 2000 && state == ncclInProgress; ++i) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return "GetAsyncError failed";
      if (state == ncclInProgress) usleep(5000);
    }
    if (state != ncclSuccess) return "async state " + std::to_string(state);
    std::string err = exerciseBootstrap(comm, rank, nranks);
    if (!err.empty()) return err;
    return check(ncclCommDestroy(comm), "destroy");
  }, 60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(Comm, ScalableInitWithThreeRoots) {
  RootProcess a = startRootProcess(kFastEnv), b = startRootProcess(kFastEnv), c = startRootProcess(kFastEnv);
  ncclUniqueId ids[3] = {a.id, b.id, c.id};
  auto out = runRanks(7, [&](int rank, int nranks) -> std::string {
    ncclComm_t comm = nullptr;
    std::string err = check(ncclCommInitRankScalable(&comm, nranks, rank, 3, ids, nullptr), "scalable init");
    if (!err.empty()) return err;
    err = exerciseBootstrap(comm, rank, nranks);
    if (!err.empty()) return err;
    return check(ncclCommDestroy(comm), "destroy");
  }, 60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(Comm, CommIdLetsRankZeroHostTheRoot) {
  // Every process makes the id itself from NCCL_COMM_ID; rank 0 hosts the root.
  int port = 20000 + getpid() % 20000;
  std::vector<std::string> env = kFastEnv;
  env.push_back("NCCL_COMM_ID=127.0.0.1:" + std::to_string(port));
  auto out = runRanks(4, [&](int rank, int nranks) -> std::string {
    ncclUniqueId id;
    std::string err = check(ncclGetUniqueId(&id), "unique id");
    if (!err.empty()) return err;
    return initAndCheck(id, rank, nranks);
  }, 60, env);
  EXPECT_EQ(describeFailures(out), "");
}

// ---------------------------------------------------------------- faults

// A thread the system refuses (a thread limit, no memory for its stack: here
// an address-space cap) fails the call that needed it with ncclSystemError
// naming the thread, and leaves the process able to try again. Before, the
// exception std::thread throws became ncclInternalError, killed the
// process from a non-blocking init's thread, or left a blocking init's
// handle behind with a destroy that hung.
TEST(CommFaults, AThreadTheSystemRefusesFailsTheCallCleanly) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers reserve address space that a cap would break";
#endif
  auto out = runRanks(
      1,
      [&](int, int) -> std::string {
        ncclUniqueId id;
        std::string err = check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        if (!err.empty()) return err;
        long pages = 0;
        FILE* statm = fopen("/proc/self/statm", "r");
        if (statm == nullptr || fscanf(statm, "%ld", &pages) != 1) return "reading /proc/self/statm";
        fclose(statm);
        rlimit old{};
        getrlimit(RLIMIT_AS, &old);
        rlimit capped = old;  // room for small allocations, not for a thread's stack
        capped.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (2 << 20);
        if (setrlimit(RLIMIT_AS, &capped) != 0) return "setrlimit";
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = reinterpret_cast<ncclComm_t>(&config);
        ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
        const std::string initText = ncclGetLastError(nullptr);
        ncclUniqueId other;
        ncclResult_t r2 = ncclGetUniqueId(&other);
        const std::string idText = ncclGetLastError(nullptr);
        setrlimit(RLIMIT_AS, &old);
        if (r != ncclSystemError)
          return "non-blocking init under the cap returned " + std::to_string(r) + ": " + initText;
        if (initText.find("cannot start the communicator's init thread") == std::string::npos)
          return "init: " + initText;
        if (comm != nullptr) return "the refused init left a handle";
        if (r2 != ncclSystemError ||
            idText.find("cannot start the bootstrap root's thread") == std::string::npos) {
          return "ncclGetUniqueId under the cap returned " + std::to_string(r2) + ": " + idText;
        }
        err = check(ncclCommInitRank(&comm, 1, id, 0), "init after the cap was lifted");
        if (!err.empty()) return err;
        float x = 2;
        err = check(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr), "all-reduce");
        if (err.empty() && x != 2) err = "all-reduce result";
        std::string destroyed = check(ncclCommDestroy(comm), "destroy");
        return err.empty() ? destroyed : err;
      },
      60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

// A forked child inherits its parent's communicators but not their job:
// their shared memory, sockets and threads are the parent's. A collective or
// split there once went through the parent's FIFOs and bootstrap ring and
// broke the parent's job; now it is refused, and the parent goes on.
TEST(CommFaults, ACommunicatorUsedAfterForkIsRefusedAndTheParentGoesOn) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
        if (!err.empty()) return err;
        std::vector<float> x(1000, 1.0f);
        if (rank == 0) {
          const pid_t child = fork();
          if (child == 0) {
            int code = 0;
            ncclResult_t r = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr);
            if (r != ncclInvalidUsage ||
                std::string(ncclGetLastError(comm)).find("fork") == std::string::npos)
              code |= 1;
            ncclComm_t sub = nullptr;
            if (ncclCommSplit(comm, 0, 0, &sub, nullptr) != ncclInvalidUsage || sub != nullptr) code |= 2;
            _exit(code);
          }
          int status = 0;
          if (child < 0 || waitpid(child, &status, 0) != child) return "fork/waitpid";
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            return "the child's use of the inherited communicator was not refused (status " +
                   std::to_string(status) + ")";
          }
        }
        for (int round = 0; round < 3; ++round) {
          err = check(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr),
                      "all-reduce");
          if (!err.empty()) return err;
        }
        for (float v : x) {
          if (v != 8.0f) return "the parent's all-reduce gave " + std::to_string(v);
        }
        return check(ncclCommDestroy(comm), "destroy");
      },
      60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, RankKilledDuringInitFailsTheOthersInTime) {
  RootProcess root = startRootProcess(kFastEnv);
  // Rank 3 leaves this file just before it dies; the others wait for it, so
  // they arrive after its death however long its start took.
  std::string marker = ::testing::TempDir() + "braid-rank3-" + std::to_string(getpid());
  std::remove(marker.c_str());
  auto out = runRanks(4, [&](int rank, int nranks) -> std::string {
    ncclComm_t comm = nullptr;
    if (rank == 3) {
      // Join (non-blocking, so the hello goes out) and die without a word
      // while the others have not arrived yet.
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclCommInitRankConfig(&comm, nranks, root.id, rank, &config);
      usleep(300000);
      std::fclose(std::fopen(marker.c_str(), "w"));
      kill(getpid(), SIGKILL);
    }
    for (int i = 0; i < 1000 && access(marker.c_str(), F_OK) != 0; ++i) usleep(10000);
    usleep(200000);
    ncclResult_t r = ncclCommInitRank(&comm, nranks, root.id, rank);
    if (r == ncclSuccess) return "init succeeded although rank 3 died";
    std::string text = ncclGetLastError(nullptr);
    if (text.find('3') == std::string::npos) return "error does not name rank 3: " + text;
    if (comm != nullptr) return "failed init left a handle";
    return "";
  }, 30, kFastEnv);
  std::remove(marker.c_str());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)].report, "") << "rank " << r;
    EXPECT_LT(out[static_cast<size_t>(r)].seconds, 15.0) << "rank " << r << " took too long";
  }
  EXPECT_FALSE(out[3].exited);  // SIGKILLed
}

// A rank that never arrives is named to every rank that did, by the root at
// its deadline: no rank times out first and gets blamed for leaving.
TEST(CommFaults, ARankThatNeverArrivesIsNamedToEveryRank) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(
      3,
      [&](int rank, int) -> std::string {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, 4, root.id, rank) == ncclSuccess) return "init succeeded without rank 3";
        const std::string text = ncclGetLastError(nullptr);
        return text.find("3 of 4 joined; missing: 3") != std::string::npos
                   ? ""
                   : "not told who is missing: " + text;
      },
      30, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, RootGoneBeforeRanksArrive) {
  RootProcess root = startRootProcess(kFastEnv);
  ncclUniqueId id = root.id;
  root.kill();
  // The dead root's port stays bound here (not listening), so connecting
  // to it is refused: with tests running in parallel, another process
  // could otherwise take the port and hang up on the ranks' hello.
  bootstrap::UniqueIdData data;
  ASSERT_TRUE(bootstrap::decodeUniqueId(id, &data).ok());
  const int holder = socket(data.root.family(), SOCK_STREAM, 0);
  ASSERT_GE(holder, 0) << std::strerror(errno);
  const int one = 1;
  (void)setsockopt(holder, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_EQ(bind(holder, reinterpret_cast<const sockaddr*>(&data.root.storage), data.root.length), 0)
      << "the dead root's port " << data.root.toString() << ": " << std::strerror(errno);
  std::vector<std::string> env = {"BRAID_BOOTSTRAP_TIMEOUT=2"};
  auto out = runRanks(2, [&](int rank, int nranks) -> std::string {
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    std::string text = ncclGetLastError(nullptr);
    if (r != ncclRemoteError) return "expected ncclRemoteError, got " + std::to_string(r) + ": " + text;
    if (text.find("could not reach the bootstrap root") == std::string::npos) return "message: " + text;
    return "";
  }, 30, env);
  close(holder);
  EXPECT_EQ(describeFailures(out), "");
  for (const RankOutcome& o : out) EXPECT_LT(o.seconds, 10.0);
}

// ---------------------------------------------------------------- sockets

// Refused attempts until the deadline say so, not "timed out".
TEST(Sockets, ARefusedConnectionSaysRefused) {
  SocketAddress addr;
  {
    Socket listener;
    ASSERT_TRUE(SocketAddress::parse("127.0.0.1:1", &addr).ok());
    addr.setPort(0);
    ASSERT_TRUE(Socket::listen(addr, &listener).ok());
    ASSERT_TRUE(listener.localAddress(&addr).ok());
  }  // closed: connecting is refused
  Socket s;
  Status st = Socket::connect(addr, deadlineIn(0.3), nullptr, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Connection refused"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("timed out"), std::string::npos) << st.message();
}

// A link-local IPv6 root ("[fe80::1%eth0]:port" in NCCL_COMM_ID) keeps its
// scope through the unique id; ids without one read as before.
TEST(Sockets, TheUniqueIdCarriesAnIpv6Scope) {
  bootstrap::UniqueIdData data;
  ASSERT_TRUE(SocketAddress::parse("[fe80::1]:4000", &data.root).ok());
  reinterpret_cast<sockaddr_in6*>(&data.root.storage)->sin6_scope_id = 3;
  data.secret.fill(7);
  ncclUniqueId id;
  bootstrap::encodeUniqueId(data, &id);
  bootstrap::UniqueIdData back;
  ASSERT_TRUE(bootstrap::decodeUniqueId(id, &back).ok());
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&back.root.storage)->sin6_scope_id, 3u);
  EXPECT_EQ(back.root.port(), 4000);
  ASSERT_TRUE(SocketAddress::parse("10.1.2.3:4000", &data.root).ok());
  bootstrap::encodeUniqueId(data, &id);
  ASSERT_TRUE(bootstrap::decodeUniqueId(id, &back).ok());
  EXPECT_TRUE(sameHostAddress(back.root, data.root));
}

// NCCL_SOCKET_IFNAME of one character ("^", "=") counts as unset, as NCCL's.
TEST(Sockets, AOneCharacterIfnameCountsAsUnset) {
  std::vector<NetInterface> unset, caret;
  ASSERT_TRUE(findInterfaces(&unset).ok());
  setenv("NCCL_SOCKET_IFNAME", "^", 1);
  ParamRegistry::instance().reload();
  Status s = findInterfaces(&caret);
  unsetenv("NCCL_SOCKET_IFNAME");
  ParamRegistry::instance().reload();
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(caret.size(), unset.size());
  for (size_t i = 0; i < unset.size(); ++i) EXPECT_EQ(caret[i].name, unset[i].name);
}

TEST(CommFaults, StrayGarbageAndWrongSecretDoNotDisturbTheJob) {
  RootProcess root = startRootProcess(kFastEnv);
  bootstrap::UniqueIdData data;
  ASSERT_TRUE(bootstrap::decodeUniqueId(root.id, &data).ok());
  // Strays in this (test) process: a silent client, garbage, a port scan
  // (connect and close), a truncated hello, and a well-formed hello from
  // another job (wrong secret).
  std::vector<Socket> strays(5);
  for (Socket& s : strays) ASSERT_TRUE(Socket::connect(data.root, deadlineIn(5), nullptr, &s).ok());
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_TRUE(strays[1].sendAll(garbage, sizeof(garbage), deadlineIn(5), nullptr).ok());
  strays[2].close();
  bootstrap::Hello other;
  other.nranks = 2;
  other.ranks.push_back({0, data.root});
  std::vector<uint8_t> bytes = bootstrap::encodeHello(other);
  ASSERT_TRUE(strays[3].sendAll(bytes.data(), 20, deadlineIn(5), nullptr).ok());  // truncated
  ASSERT_TRUE(strays[4].sendAll(bytes.data(), bytes.size(), deadlineIn(5), nullptr).ok());  // wrong secret
  bootstrap::RootReply reply;
  ASSERT_TRUE(bootstrap::receiveRootReply(strays[4], deadlineIn(5), nullptr, &reply).ok());
  EXPECT_EQ(reply.result, ncclInvalidArgument);
  EXPECT_NE(reply.message.find("secret"), std::string::npos);

  auto out = runRanks(3, [&](int rank, int nranks) { return initAndCheck(root.id, rank, nranks); }, 60, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, WrongSecretRankIsRejectedWithAClearError) {
  RootProcess root = startRootProcess(kFastEnv);
  bootstrap::UniqueIdData data;
  ASSERT_TRUE(bootstrap::decodeUniqueId(root.id, &data).ok());
  data.secret[0] ^= 0xff;
  ncclUniqueId forged;
  bootstrap::encodeUniqueId(data, &forged);
  // Process 1 holds another job's id and arrives while the real job (ranks
  // 0 and 1, in processes 0 and 2) is still gathering.
  auto out = runRanks(3, [&](int proc, int) -> std::string {
    ncclComm_t comm = nullptr;
    if (proc == 1) {
      ncclResult_t r = ncclCommInitRank(&comm, 2, forged, 1);
      std::string text = ncclGetLastError(nullptr);
      if (r != ncclInvalidArgument || text.find("secret") == std::string::npos) return "forged: " + text;
      return "";
    }
    if (proc == 2) usleep(500000);
    return initAndCheck(root.id, proc == 0 ? 0 : 1, 2);
  }, 30, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, TwoRanksClaimingOneRankBothFail) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(2, [&](int, int) -> std::string {
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, 2, root.id, 0);  // both say rank 0
    std::string text = ncclGetLastError(nullptr);
    if (r != ncclInvalidArgument || text.find("claim rank 0") == std::string::npos) {
      return "got " + std::to_string(r) + ": " + text;
    }
    return "";
  }, 30, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, DisagreeingRankCountsFail) {
  RootProcess root = startRootProcess(kFastEnv);
  auto out = runRanks(2, [&](int rank, int) -> std::string {
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, rank == 0 ? 2 : 3, root.id, rank);
    std::string text = ncclGetLastError(nullptr);
    if (r == ncclSuccess || text.find("nranks") == std::string::npos) return "got " + std::to_string(r) + ": " + text;
    return "";
  }, 30, kFastEnv);
  EXPECT_EQ(describeFailures(out), "");
}

// Settings each rank lays its collectives out from must match: a rank with
// another NCCL_BUFFSIZE (or chunk size, algorithm filter, ...) fails init on
// every rank naming the variable. Before, the job ran until some later
// collective stalled or blamed the user's calls ("rank 0 sent 8192 bytes at
// step 10 where this rank expected 131072").
TEST(CommFaults, RanksWithDifferentLayoutSettingsFailAtInit) {
  for (const char* var : {"NCCL_BUFFSIZE", "NCCL_ALGO"}) {
    RootProcess root = startRootProcess(kFastEnv);
    auto out = runRanks(
        2,
        [&](int rank, int nranks) -> std::string {
          if (rank == 1) setenv(var, std::strcmp(var, "NCCL_ALGO") == 0 ? "Ring" : "65536", 1);
          ParamRegistry::instance().reload();
          ncclComm_t comm = nullptr;
          ncclResult_t r = ncclCommInitRank(&comm, nranks, root.id, rank);
          std::string text = ncclGetLastError(nullptr);
          if (r != ncclInvalidUsage || text.find(strCat("ranks disagree on ", var)) == std::string::npos)
            return strCat(var, ": got ", r, ": ", text);
          return "";
        },
        30, kFastEnv);
    EXPECT_EQ(describeFailures(out), "") << var;
  }
}

// config.netName chooses the net for ranks on other hosts over NCCL_NET:
// here NCCL_NET=IB (no RDMA port on a CI machine: init would fail) and the
// config's Socket, so the ranks, on two "hosts", talk over TCP.
TEST(Comm, ConfigNetNameOverridesNcclNet) {
  std::vector<std::string> env = kFastEnv;
  env.push_back("NCCL_NET=IB");
  RootProcess root = startRootProcess(env);
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        setenv("BRAID_HOSTID", rank == 0 ? "host-a" : "host-b", 1);
        ParamRegistry::instance().reload();
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.netName = "Socket";
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitRankConfig(&comm, nranks, root.id, rank, &config), "init");
        if (!err.empty()) return err;
        float x = static_cast<float>(rank + 1);
        err = check(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr), "all-reduce");
        if (err.empty() && x != 3.0f) err = strCat("all-reduce gave ", x);
        return err + check(ncclCommDestroy(comm), "destroy");
      },
      60, env);
  EXPECT_EQ(describeFailures(out), "");
}

TEST(CommFaults, AbortFromAnotherThreadReleasesInit) {
  RootProcess root = startRootProcess({"BRAID_BOOTSTRAP_TIMEOUT=60"});
  auto out = runRanks(1, [&](int, int) -> std::string {
    // Rank 0 of 2; rank 1 never comes, so init would wait 60 s.
    std::atomic<ncclComm_t> published{nullptr};
    ncclResult_t blockingResult = ncclSuccess;
    ncclComm_t handle = nullptr;
    std::thread initThread([&] {
      blockingResult = ncclCommInitRank(&handle, 2, root.id, 0);
    });
    // The blocking init publishes its handle before it waits; find it.
    auto t0 = std::chrono::steady_clock::now();
    while (published.load() == nullptr) {
      ncclComm_t h = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
      if (h != nullptr) published.store(h);
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
        initThread.detach();
        return "blocking init never published its handle";
      }
      usleep(1000);
    }
    usleep(300000);
    auto a0 = std::chrono::steady_clock::now();
    std::string err = check(ncclCommAbort(published.load()), "abort");
    initThread.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
    if (!err.empty()) return err;
    if (secs > 1.0) return "abort took " + std::to_string(secs) + " s";
    if (blockingResult == ncclSuccess) return "aborted init reported success";

    // Non-blocking: abort while it waits.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nb = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&nb, 2, root.id, 0, &config);
    if (r != ncclInProgress) return check(r, "non-blocking init");
    usleep(300000);
    a0 = std::chrono::steady_clock::now();
    err = check(ncclCommAbort(nb), "abort non-blocking");
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
    if (!err.empty()) return err;
    if (secs > 1.0) return "non-blocking abort took " + std::to_string(secs) + " s";
    return "";
  }, 30);
  EXPECT_EQ(describeFailures(out), "");
}

// The blocking calls that wait on peers besides collectives (split, window
// registration, shrink) hold the communicator while they run: an abort from
// another thread releases them and frees the communicator only after they
// returned (it freed it under them before). Rank 0 sits each one out.
TEST(CommFaults, AbortFromAnotherThreadReleasesSplitWindowAndShrink) {
  RootProcess root = startRootProcess({"BRAID_BOOTSTRAP_TIMEOUT=60"});
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        ncclComm_t base = nullptr;
        std::string err = check(ncclCommInitRank(&base, nranks, root.id, rank), "init");
        if (!err.empty()) return err;
        void* mem = nullptr;
        if (ncclMemAlloc(&mem, 4096) != ncclSuccess) return "ncclMemAlloc";
        for (const char* call : {"split", "window", "shrink"}) {
          ncclComm_t c = nullptr;
          err = check(ncclCommSplit(base, 0, rank, &c, nullptr), "split of the base");
          if (!err.empty()) return err;
          if (rank == 1) {
            double abortSecs = -1;
            std::thread aborter([&] {
              usleep(300000);
              auto a0 = std::chrono::steady_clock::now();
              (void)ncclCommAbort(c);
              abortSecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
            });
            auto t0 = std::chrono::steady_clock::now();
            ncclResult_t r = ncclSuccess;
            ncclComm_t child = nullptr;
            ncclWindow_t win = nullptr;
            if (std::string(call) == "split") r = ncclCommSplit(c, 0, 0, &child, nullptr);
            if (std::string(call) == "window")
              r = ncclCommWindowRegister(c, mem, 4096, &win, NCCL_WIN_DEFAULT);
            if (std::string(call) == "shrink")
              r = ncclCommShrink(c, nullptr, 0, &child, nullptr, NCCL_SHRINK_DEFAULT);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const std::string text = ncclGetLastError(nullptr);
            aborter.join();
            if (r == ncclSuccess) return strCat(call, " succeeded without rank 0");
            if (text.find("aborted") == std::string::npos)
              return strCat(call, ": not reported as aborted: ", text);
            if (secs > 5 || abortSecs > 1)
              return strCat(call, " took ", secs, " s, the abort ", abortSecs, " s");
          }
          float x = 1;  // rank 0 waits here until rank 1 is done
          err = check(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, base, nullptr), "all-reduce on the base");
          if (!err.empty()) return err;
          if (rank == 0) (void)ncclCommDestroy(c);
        }
        (void)ncclMemFree(mem);
        return check(ncclCommDestroy(base), "destroy");
      },
      60);
  EXPECT_EQ(describeFailures(out), "");
}

// ---------------------------------------------------------------- threads

TEST(CommThreads, InitAllMakesOneCommunicatorPerDevice) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int i = 0; i < n; ++i) {
    int rank = -1, count = -1;
    ncclCommUserRank(comms[static_cast<size_t>(i)], &rank);
    ncclCommCount(comms[static_cast<size_t>(i)], &count);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(count, n);
    threads.emplace_back([&, i] { errors[static_cast<size_t>(i)] = exerciseBootstrap(comms[static_cast<size_t>(i)], i, n); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) EXPECT_EQ(errors[static_cast<size_t>(i)], "") << "rank " << i;
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// As nccl-tests does for several GPUs per thread: inside a group, each
// ncclCommInitRank returns at once and ncclGroupEnd completes them all; then
// one thread drives both ranks through grouped collectives.
TEST(CommThreads, GroupedInitOfSeveralRanksFromOneThread) {
  const int n = 3;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclCommInitRank(&comms[static_cast<size_t>(r)], n, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    ncclResult_t state = ncclInProgress;
    EXPECT_EQ(ncclCommGetAsyncError(comms[static_cast<size_t>(r)], &state), ncclSuccess);
    EXPECT_EQ(state, ncclSuccess);
  }
  std::vector<std::vector<float>> data(n, std::vector<float>(1000));
  for (int r = 0; r < n; ++r) std::fill(data[static_cast<size_t>(r)].begin(), data[static_cast<size_t>(r)].end(), r + 1.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    float* d = data[static_cast<size_t>(r)].data();
    ASSERT_EQ(ncclAllReduce(d, d, 1000, ncclFloat, ncclSum, comms[static_cast<size_t>(r)], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(data[static_cast<size_t>(r)][999], 6.0f);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);

  // A failing init inside a group: ncclGroupEnd reports it.
  ncclUniqueId bogus;
  std::memset(&bogus, 0, sizeof(bogus));
  ncclComm_t bad = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_NE(ncclCommInitRank(&bad, 2, bogus, 0), ncclSuccess);  // the id is refused at once
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

// As NCCL's and RCCL's own tests do: one thread splits (and shrinks) every
// communicator it drives inside one group; the exchanges run at
// ncclGroupEnd, whatever the order of the calls. Both used to wait for the
// bootstrap timeout.
TEST(CommThreads, GroupedSplitAndShrinkOfSeveralRanksFromOneThread) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n, nullptr), halves(n, nullptr), rest(n - 1, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = n - 1; r >= 0; --r) {  // last rank first: each call returns at once
    const size_t i = static_cast<size_t>(r);
    ASSERT_EQ(ncclCommSplit(comms[i], r % 2, -r, &halves[i], nullptr), ncclSuccess) << ncclGetLastError(nullptr);
    EXPECT_EQ(halves[i], nullptr);  // set when the group ends
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::vector<float>> data(n, std::vector<float>(1000));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    ASSERT_NE(halves[i], nullptr);
    int rank = -1, count = -1;
    EXPECT_EQ(ncclCommUserRank(halves[i], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(halves[i], &count), ncclSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(rank, r < 2 ? 1 : 0) << "keys -r: the higher parent rank comes first";
    std::fill(data[i].begin(), data[i].end(), r + 1.0f);
    ASSERT_EQ(ncclAllReduce(data[i].data(), data[i].data(), 1000, ncclFloat, ncclSum, halves[i], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(data[static_cast<size_t>(r)][999], r % 2 == 0 ? 4.0f : 6.0f) << r;

  // Shrink away rank 0, the calls in reverse order (rank 1, the first that
  // remains, makes the new id).
  int excluded[] = {0};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = n - 1; r >= 1; --r) {
    ASSERT_EQ(ncclCommShrink(comms[static_cast<size_t>(r)], excluded, 1, &rest[static_cast<size_t>(r - 1)], nullptr,
                             NCCL_SHRINK_DEFAULT),
              ncclSuccess)
        << ncclGetLastError(nullptr);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 1; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    ASSERT_NE(rest[i - 1], nullptr);
    std::fill(data[i].begin(), data[i].end(), r + 1.0f);
    ASSERT_EQ(ncclAllReduce(data[i].data(), data[i].data(), 1000, ncclFloat, ncclSum, rest[i - 1], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 1; r < n; ++r) EXPECT_EQ(data[static_cast<size_t>(r)][0], 9.0f) << r;
  for (ncclComm_t c : rest) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  for (ncclComm_t c : halves) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(CommThreads, StrayOnAPeerListenerIsDropped) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  // Garbage and a silent connection to rank 1's bootstrap listener.
  SocketAddress addr = bootstrapOf(comms[0])->address(1);
  Socket silent, noisy;
  ASSERT_TRUE(Socket::connect(addr, deadlineIn(5), nullptr, &silent).ok());
  ASSERT_TRUE(Socket::connect(addr, deadlineIn(5), nullptr, &noisy).ok());
  std::vector<uint8_t> junk(200, 0xab);
  ASSERT_TRUE(noisy.sendAll(junk.data(), junk.size(), deadlineIn(5), nullptr).ok());
  std::string e0, e1;
  std::thread t0([&] {
    int64_t v = 99;
    Status s = bootstrapOf(comms[0])->send(1, 7, &v, sizeof(v));
    if (!s.ok()) e0 = s.message();
  });
  std::thread t1([&] {
    int64_t v = 0;
    Status s = bootstrapOf(comms[1])->recv(0, 7, &v, sizeof(v));
    if (!s.ok()) e1 = s.message();
    if (v != 99) e1 += " wrong value";
  });
  t0.join();
  t1.join();
  EXPECT_EQ(e0, "");
  EXPECT_EQ(e1, "");
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
}  // namespace braid::test
