// The correctness sweeps of tests/multiprocess (coll_sweep.h) on GPUs: the
// same collectives, types, ops (PreMulSum included, its scalar by pointer in
// device memory), in-place and out-of-place, counts and point-to-point
// patterns, on device buffers, asynchronously on a stream, results read only
// after that stream is done (gpu_sweep_memory.h). Launch shapes as users and
// nccl-tests run them:
//   one process per GPU (ncclCommInitRank), a non-blocking stream or the
//   null stream; one process, one thread per GPU (ncclCommInitAll, like
//   nccl-tests -t N); one thread driving every GPU in one group (-g N);
//   teams split from a communicator; algorithm, protocol and channel count
//   forced through the environment; ranks on two hosts (host ids), their
//   connectors through the net proxy.
// Every variant runs in forked children: the GPU runtime is never
// initialized in the gtest process (ranks forked after it could not use the
// GPU). With two or more GPUs every rank has its own; with one, two ranks
// share it (BRAID_SHARE_GPU=1), so the sweeps also run on a one-GPU machine
// (ranks of different processes then time-slice the GPU: slow, and the
// null-stream and full-count variants are cut down). Skips cleanly without
// a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "braid.h"
#include "coll_sweep.h"
#include "core/comm.h"
#include "gpu_sweep_memory.h"
#include "harness.h"
#include "nccl_device.h"
#include "platform/gpu.h"
#include "platform/gpu_runtime.h"
#include "util/strings.h"
#include "window_memory.h"

namespace braid::test {

void PrintTo(SplitShape shape, std::ostream* os) {
  *os << splitShapeName(shape);
}

namespace {

// Every rank on the GPU backend (never silently on the host), bounded waits.
const std::vector<std::string> kEnv = {"BRAID_BACKEND=gpu", "BRAID_BOOTSTRAP_TIMEOUT=30",
                                       "BRAID_STALL_TIMEOUT=60", "NCCL_DEBUG=WARN"};
// A wait for one stream longer than this is reported as a hang.
constexpr double kSyncTimeoutSec = 120;
// Whole-variant limits (the ctest TIMEOUT of gpu_coll_test is 600 s).
constexpr double kQuickTimeoutSec = 300;
constexpr double kFullTimeoutSec = 540;

// Counted in a forked child: the GPU runtime must not be initialized in the
// parent, or the ranks forked after it could not use the GPU.
int gpuCount() {
  static int count = [] {
    auto out = runRanks(
        1,
        [](int, int) {
          int n = 0;
          return std::to_string(gpuDeviceCount(&n).ok() ? n : 0);
        },
        60);
    return std::atoi(out[0].report.c_str());
  }();
  return count;
}

// Where a test's ranks run: one per GPU, or two on one GPU.
struct GpuRanks {
  int ranks = 0;
  int gpus = 0;
  int deviceOf(int rank) const { return rank % gpus; }
  bool shared() const { return ranks > gpus; }
  std::vector<std::string> env() const {
    return shared() ? std::vector<std::string>{"BRAID_SHARE_GPU=1"} : std::vector<std::string>{};
  }
};

GpuRanks gpuRanks() {
  const int n = gpuCount();
  return GpuRanks{n >= 2 ? n : 2, n};
}

#define BRAID_NEED_A_GPU(g)      \
  const GpuRanks g = gpuRanks(); \
  if (g.gpus < 1) GTEST_SKIP() << "needs a GPU (or no driver)"

enum class StreamKind { kNonBlocking, kNull };

std::string hipCheck(hipError_t e, const char* what) {
  return e == hipSuccess ? "" : gpusweep::gpuError(what, e);
}

// What one rank runs once its communicator is up: "" on success.
using GpuWork = std::function<std::string(ncclComm_t comm, int rank, int nranks, SweepMemory& memory)>;

// One rank's process: binds its GPU, makes the stream, joins, runs `work`,
// destroys the communicator (aborts it after a failure: peers may still be
// in a collective) and the stream.
std::string rankOnGpu(const ncclUniqueId& id, const GpuRanks& g, int rank, StreamKind kind,
                      const GpuWork& work) {
  const int nranks = g.ranks;
  std::string err = hipCheck(hipSetDevice(g.deviceOf(rank)), "hipSetDevice");
  hipStream_t stream = nullptr;
  if (err.empty() && kind == StreamKind::kNonBlocking) {
    err = hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
  }
  if (!err.empty()) return err;
  ncclComm_t comm = nullptr;
  err = check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  if (!err.empty()) return err;
  GpuMemory memory(g.deviceOf(rank), stream, kSyncTimeoutSec);
  err = work(comm, rank, nranks, memory);
  if (!err.empty()) {
    ncclCommAbort(comm);
    return err;  // the stream is left: it may hold work that never ends
  }
  err = check(ncclCommDestroy(comm), "ncclCommDestroy");
  if (stream != nullptr) err += hipCheck(hipStreamDestroy(stream), "hipStreamDestroy");
  return err;
}

// `work` in one forked process per rank; `env` on top of kEnv. Returns the failures.
// `hostOf`, when given, names each rank's host (BRAID_HOSTID).
std::string runPerGpu(const GpuRanks& g, StreamKind kind, const std::vector<std::string>& extraEnv,
                      double timeoutSec, const GpuWork& work,
                      const std::function<std::string(int)>& hostOf = nullptr) {
  std::vector<std::string> env = kEnv;
  for (const std::vector<std::string>& more : {g.env(), extraEnv})
    env.insert(env.end(), more.begin(), more.end());
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});  // the id maker needs no GPU
  auto out = runRanks(
      g.ranks,
      [&](int rank, int) {
        if (hostOf) setenv("BRAID_HOSTID", hostOf(rank).c_str(), 1);
        return rankOnGpu(root.id, g, rank, kind, work);
      },
      timeoutSec, env);
  return describeFailures(out);
}

GpuWork sweepWork(SweepCounts counts) {
  return [counts](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return collSweep(comm, rank, nranks, counts, memory);
  };
}

// --- (a), (b): one process per GPU ---------------------------------------------

// The full sweep: every collective, type, op and count up to 2^20+3 floats.
TEST(GpuCollSweep, OneProcessPerGpuNonBlockingStream) {
  BRAID_NEED_A_GPU(g);
  const SweepCounts counts = g.shared() ? SweepCounts::kQuick : SweepCounts::kFull;
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {}, kFullTimeoutSec, sweepWork(counts)), "");
}

// The null stream: the legacy default stream of each device.
TEST(GpuCollSweep, OneProcessPerGpuNullStream) {
  BRAID_NEED_A_GPU(g);
  EXPECT_EQ(runPerGpu(g, StreamKind::kNull, {}, kQuickTimeoutSec, sweepWork(SweepCounts::kQuick)), "");
}

// --- (c): one process, ncclCommInitAll, one thread per GPU ----------------------

// Runs `body` in one forked child (so the GPU runtime starts there) with kEnv
// and what `g` needs.
std::string inOneChild(const GpuRanks& g, const std::function<std::string()>& body, double timeoutSec,
                       const std::vector<std::string>& extraEnv = {}) {
  std::vector<std::string> env = kEnv;
  for (const std::string& e : g.env()) env.push_back(e);
  for (const std::string& e : extraEnv) env.push_back(e);
  auto out = runRanks(
      1, [&](int, int) { return body(); }, timeoutSec, env);
  return describeFailures(out);
}

// ncclCommInitAll over the GPUs of `g` (rank r on g.deviceOf(r)).
std::string initAll(const GpuRanks& g, std::vector<ncclComm_t>* comms) {
  std::vector<int> devices;
  for (int r = 0; r < g.ranks; ++r) devices.push_back(g.deviceOf(r));
  comms->assign(devices.size(), nullptr);
  return check(ncclCommInitAll(comms->data(), g.ranks, devices.data()), "ncclCommInitAll");
}

// Destroys every communicator, or aborts them all after a failure.
std::string endAll(const std::vector<ncclComm_t>& comms, bool failed) {
  std::string err;
  for (ncclComm_t c : comms) {
    if (failed) {
      ncclCommAbort(c);
    } else {
      err += check(ncclCommDestroy(c), "ncclCommDestroy");
    }
  }
  return err;
}

TEST(GpuCollSweep, InitAllOneThreadPerGpu) {
  BRAID_NEED_A_GPU(g);
  if (g.shared()) {
    // hipFree (which the sweep calls between collectives) waits for the whole
    // device: one thread's free would wait for the other thread's kernel, and
    // that kernel for the first thread's next collective.
    GTEST_SKIP() << "ranks sharing one GPU cannot be driven from separate threads of one process";
  }
  auto body = [g]() -> std::string {
    const int n = g.ranks;
    std::vector<ncclComm_t> comms;
    std::string err = initAll(g, &comms);
    if (!err.empty()) return err;
    std::vector<std::string> reports(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        std::string& report = reports[static_cast<size_t>(r)];
        hipStream_t stream = nullptr;
        report = hipCheck(hipSetDevice(g.deviceOf(r)), "hipSetDevice");
        if (report.empty()) {
          report =
              hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
        }
        if (!report.empty()) return;
        GpuMemory memory(g.deviceOf(r), stream, kSyncTimeoutSec);
        report = collSweep(comms[static_cast<size_t>(r)], r, n, SweepCounts::kQuick, memory);
        if (!memory.wedged()) (void)hipStreamDestroy(stream);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      if (!reports[static_cast<size_t>(r)].empty())
        err += strCat("thread ", r, ": ", reports[static_cast<size_t>(r)]);
    }
    return err + endAll(comms, !err.empty());
  };
  EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec), "");
}

// --- (d): one thread drives every GPU in one group ------------------------------

// The group checks of OneThreadDrivesAllGpus, on `comms` (GPU r for comms[r]).
std::string groupChecks(const std::vector<ncclComm_t>& comms, std::vector<std::unique_ptr<GpuMemory>>& mems) {
  const int n = static_cast<int>(comms.size());
  using Buffer = SweepBuffer<float>;
  auto val = [](int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 13)); };
  const float rankSum = static_cast<float>(n * (n + 1) / 2);
  // Ends a group from device 0 (the calls of a group need no current device:
  // each communicator knows its own), then waits for every stream.
  auto endGroup = [&](const char* what) {
    std::string err = check(ncclGroupEnd(), what);
    for (int r = 0; r < n && err.empty(); ++r) err = mems[r]->synchronize(comms[r]);
    return err.empty() ? "" : strCat(what, ": ", err);
  };
  std::vector<float> got;
  for (size_t count : {size_t(1), size_t(1023), size_t(65537), (size_t(1) << 20) + 3}) {
    const std::string tag = strCat(" count ", count);
    std::vector<std::unique_ptr<Buffer>> in(n), out(n), all(n), next(n);
    for (int r = 0; r < n; ++r) {
      std::vector<float> h(count);
      for (size_t i = 0; i < count; ++i) h[i] = val(r, i);
      in[r] = std::make_unique<Buffer>(*mems[r], h);
      out[r] = std::make_unique<Buffer>(*mems[r], std::vector<float>(count, -1.0f));
      all[r] = std::make_unique<Buffer>(*mems[r], std::vector<float>(count * n, -1.0f));
      next[r] = std::make_unique<Buffer>(*mems[r], std::vector<float>(count, -1.0f));
      std::string err = in[r]->error() + out[r]->error() + all[r]->error() + next[r]->error();
      if (!err.empty()) return err + tag;
    }
    (void)hipSetDevice(0);
    // All-reduce out of place.
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclAllReduce(in[r]->data(), out[r]->data(), count, ncclFloat32, ncclSum, comms[r], mems[r]->stream());
    }
    std::string err = endGroup("grouped allreduce");
    for (int r = 0; r < n && err.empty(); ++r) {
      err = out[r]->download(&got);
      for (size_t i = 0; i < count && err.empty(); ++i) {
        if (got[i] != rankSum * static_cast<float>(i % 13))
          err = strCat("grouped allreduce: GPU ", r, " at ", i);
      }
    }
    if (!err.empty()) return err + tag;
    // All-gather, then send/recv around the ring (each GPU to the next).
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclAllGather(in[r]->data(), all[r]->data(), count, ncclFloat32, comms[r], mems[r]->stream());
    }
    err = endGroup("grouped allgather");
    for (int r = 0; r < n && err.empty(); ++r) {
      err = all[r]->download(&got);
      for (size_t j = 0; j < got.size() && err.empty(); ++j) {
        if (got[j] != val(static_cast<int>(j / count), j % count))
          err = strCat("grouped allgather: GPU ", r, " at ", j);
      }
    }
    if (!err.empty()) return err + tag;
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclSend(in[r]->data(), count, ncclFloat32, (r + 1) % n, comms[r], mems[r]->stream());
      ncclRecv(next[r]->data(), count, ncclFloat32, (r - 1 + n) % n, comms[r], mems[r]->stream());
    }
    err = endGroup("grouped send/recv");
    for (int r = 0; r < n && err.empty(); ++r) {
      err = next[r]->download(&got);
      for (size_t i = 0; i < count && err.empty(); ++i) {
        if (got[i] != val((r - 1 + n) % n, i)) err = strCat("grouped send/recv: GPU ", r, " at ", i);
      }
    }
    if (!err.empty()) return err + tag;
    // Two collectives per communicator in one group: an in-place all-reduce
    // of the ring's result and an all-gather into the same output again.
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclAllReduce(next[r]->data(), next[r]->data(), count, ncclFloat32, ncclSum, comms[r],
                    mems[r]->stream());
      ncclAllGather(out[r]->data(), all[r]->data(), count, ncclFloat32, comms[r], mems[r]->stream());
    }
    err = endGroup("mixed group");
    for (int r = 0; r < n && err.empty(); ++r) {
      err = next[r]->download(&got);
      for (size_t i = 0; i < count && err.empty(); ++i) {
        if (got[i] != rankSum * static_cast<float>(i % 13))
          err = strCat("mixed group allreduce: GPU ", r, " at ", i);
      }
      if (err.empty()) err = all[r]->download(&got);
      for (size_t j = 0; j < got.size() && err.empty(); ++j) {
        if (got[j] != rankSum * static_cast<float>(j % count % 13)) {
          err = strCat("mixed group allgather: GPU ", r, " at ", j);
        }
      }
    }
    if (!err.empty()) return err + tag;
  }
  return "";
}

using InProcessWork = std::function<std::string(const std::vector<ncclComm_t>& comms,
                                                std::vector<std::unique_ptr<GpuMemory>>& mems)>;

// Every rank of `g` in this process (ncclCommInitAll, GPU deviceOf(r)
// each), with a non-blocking stream and its GpuMemory, one thread running
// `work` over them; then the streams are destroyed (unless a wait wedged
// one) and the communicators destroyed, or aborted after a failure.
std::string withRanksInProcess(const GpuRanks& g, const InProcessWork& work) {
  const int n = g.ranks;
  std::vector<ncclComm_t> comms;
  std::string err = initAll(g, &comms);
  if (!err.empty()) return err;
  std::vector<hipStream_t> streams(static_cast<size_t>(n), nullptr);
  std::vector<std::unique_ptr<GpuMemory>> mems;
  for (int r = 0; r < n && err.empty(); ++r) {
    err = hipCheck(hipSetDevice(g.deviceOf(r)), "hipSetDevice");
    if (err.empty()) {
      err = hipCheck(hipStreamCreateWithFlags(&streams[static_cast<size_t>(r)], hipStreamNonBlocking),
                     "hipStreamCreateWithFlags");
    }
    mems.push_back(
        std::make_unique<GpuMemory>(g.deviceOf(r), streams[static_cast<size_t>(r)], kSyncTimeoutSec));
  }
  if (err.empty()) err = work(comms, mems);
  bool wedged = false;
  for (auto& m : mems) wedged = wedged || m->wedged();
  for (int r = 0; r < n && !wedged; ++r) {
    if (streams[static_cast<size_t>(r)] != nullptr) (void)hipStreamDestroy(streams[static_cast<size_t>(r)]);
  }
  return err + endAll(comms, !err.empty());
}

// One thread drives `g.ranks` communicators in groups (GPU deviceOf(r) each).
std::string driveInGroups(const GpuRanks& g) {
  return withRanksInProcess(g, groupChecks);
}

TEST(GpuCollGroup, OneThreadDrivesAllGpus) {
  BRAID_NEED_A_GPU(g);
  EXPECT_EQ(inOneChild(
                g, [g] { return driveInGroups(g); }, kQuickTimeoutSec),
            "");
}

// Four ranks (sharing GPUs where there are fewer): the one-shot all-reduce
// over three peers, which small counts take, and rings of four.
TEST(GpuCollGroup, OneThreadDrivesFourRanks) {
  BRAID_NEED_A_GPU(g0);
  const GpuRanks g{4, g0.gpus};
  EXPECT_EQ(inOneChild(
                g, [g] { return driveInGroups(g); }, kQuickTimeoutSec),
            "");
}

// The two-shot all-reduce (a reduce-scatter and an all-gather, each one
// exchange with every peer) forced on four ranks driven from one thread, in
// Simple and LL: groupChecks' all-reduces of 1 to 1M+3 floats take several
// rounds; the log must show them on TwoShot.
TEST(GpuCollGroup, TwoShotOnFourRanks) {
  BRAID_NEED_A_GPU(g0);
  const GpuRanks g{4, g0.gpus};
  for (const char* proto : {"Simple", "LL"}) {
    const ScopedTempDir dir("braid-twoshot-");
    ASSERT_FALSE(dir.path().empty());
    const std::string log = dir.path() + "/twoshot.log";
    auto body = [&g, proto, &log] {
      std::string err = driveInGroups(g);
      std::ifstream in(log);
      int ran = 0;
      for (std::string line; std::getline(in, line);) {
        ran += line.find("ncclAllReduce") != std::string::npos &&
               line.find(strCat(": TwoShot/", proto, ",")) != std::string::npos;
      }
      if (err.empty() && ran < 4 * g.ranks) err = strCat("only ", ran, " all-reduces ran TwoShot/", proto);
      return err;
    };
    const std::vector<std::string> env = {"NCCL_ALGO=allreduce:TwoShot", strCat("NCCL_PROTO=", proto),
                                          "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL",
                                          "NCCL_DEBUG_FILE=" + log};
    EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec, env), "") << proto;
  }
}

// A group of many collectives of several kernels, with a send and a receive
// among them (groupSweep): consecutive collectives of one kernel share a
// launch; then the same with BRAID_GROUP_FUSE=0, one launch each.
TEST(GpuCollGroup, ManyCollectivesInOneGroup) {
  BRAID_NEED_A_GPU(g);
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return groupSweep(comm, rank, nranks, memory);
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, work), "");
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {"BRAID_GROUP_FUSE=0"}, kQuickTimeoutSec, work), "");
}

// --- (e): teams split from a communicator ---------------------------------------

class GpuCollSplit : public ::testing::TestWithParam<SplitShape> {};

TEST_P(GpuCollSplit, SweepOnEachTeam) {
  BRAID_NEED_A_GPU(g);
  const SplitShape shape = GetParam();
  auto work = [shape](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return splitSweep(comm, rank, nranks, shape, SweepCounts::kQuick, memory);
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, work), "");
}
INSTANTIATE_TEST_SUITE_P(Shapes, GpuCollSplit,
                         ::testing::Values(SplitShape::kReversed, SplitShape::kOddEven,
                                           SplitShape::kLeaveLastOut),
                         [](const ::testing::TestParamInfo<SplitShape>& p) {
                           return std::string(splitShapeName(p.param));
                         });

// --- (f): point-to-point and the collectives made of it -------------------------

TEST(GpuP2p, SendRecvAllToAllGatherScatter) {
  BRAID_NEED_A_GPU(g);
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return p2pSweep(comm, rank, nranks, memory);
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, work), "");
}

TEST(GpuP2p, SendRecvAllToAllGatherScatterNullStream) {
  BRAID_NEED_A_GPU(g);
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return p2pSweep(comm, rank, nranks, memory);
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNull, {}, kQuickTimeoutSec, work), "");
}

// --- (f2): connectors through host memory (NCCL_P2P_DISABLE) -------------------

// The P2P TRACE lines of every log in `dir` that describe a connector: ""
// if there are some and every one contains `what`.
std::string everyConnectorSays(const std::string& dir, const char* what) {
  int yes = 0, no = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      const bool connector = line.find("send to rank ") != std::string::npos ||
                             line.find("recv from rank ") != std::string::npos;
      if (!connector) continue;
      (line.find(what) != std::string::npos ? yes : no) += 1;
    }
  }
  if (yes + no == 0) return "no connector was logged";
  return no == 0 ? "" : strCat(no, " connectors do not say \"", what, "\", ", yes, " do");
}

// NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL=LOC): no rank touches another's
// GPU memory. Every connector is in host memory both GPUs map (for ranks in
// separate processes, memory files each maps from the other through /proc
// and pins; for threads of one process, pinned memory), LL128 is off and a
// window of ncclMemAlloc memory registers without being zero-copy. One process per
// rank: the quick sweep and the point-to-point sweep; one thread driving
// every rank, with NCCL_P2P_LEVEL=LOC (never peer-to-peer) instead: the
// group checks. The TRACE log must place every connector in host memory.
TEST(GpuP2pHostMemory, P2pOffMovesEveryConnectorToHostMemory) {
  BRAID_NEED_A_GPU(g);
  auto logEnv = [](const ScopedTempDir& dir, const char* off) {
    return std::vector<std::string>{off, "NCCL_DEBUG=TRACE", "NCCL_DEBUG_SUBSYS=P2P",
                                    "NCCL_DEBUG_FILE=" + dir.path() + "/rank.%p.log"};
  };
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) -> std::string {
    auto* c = static_cast<Communicator*>(comm);
    if (c->ll128()) return "LL128 is on with peer-to-peer off";
    const size_t bytes = size_t(1) << 20;
    void* base = nullptr;
    std::string err = check(ncclMemAlloc(&base, bytes), "ncclMemAlloc");
    ncclWindow_t win = nullptr;
    if (err.empty()) {
      err = check(ncclCommWindowRegister(comm, base, bytes, &win, NCCL_WIN_COLL_SYMMETRIC),
                  "ncclCommWindowRegister");
    }
    if (!err.empty()) return err;
    uint64_t number = 0, offset = 0;
    if (c->windows().find(base, bytes, &number, &offset))
      return "a window is zero-copy with peer-to-peer off";
    err = collSweep(comm, rank, nranks, SweepCounts::kQuick, memory);
    if (err.empty()) err = p2pSweep(comm, rank, nranks, memory);
    if (err.empty()) err = check(ncclCommWindowDeregister(comm, win), "ncclCommWindowDeregister");
    if (err.empty()) err = check(ncclMemFree(base), "ncclMemFree");
    return err;
  };
  const ScopedTempDir processes("braid-nop2p-");
  ASSERT_FALSE(processes.path().empty());
  EXPECT_EQ(
      runPerGpu(g, StreamKind::kNonBlocking, logEnv(processes, "NCCL_P2P_DISABLE=1"), kQuickTimeoutSec, work),
      "");
  EXPECT_EQ(everyConnectorSays(processes.path(), ": host memory"), "") << "ranks in separate processes";
  const ScopedTempDir threads("braid-nop2p-");
  ASSERT_FALSE(threads.path().empty());
  EXPECT_EQ(inOneChild(
                g, [g] { return driveInGroups(g); }, kQuickTimeoutSec, logEnv(threads, "NCCL_P2P_LEVEL=LOC")),
            "");
  EXPECT_EQ(everyConnectorSays(threads.path(), ": host memory"), "") << "ranks in one process";
}

// --- (f3): read mode -----------------------------------------------------------

// NCCL_P2P_READ_ENABLE=1: every connector between the GPUs keeps its Simple
// slots in the sender's memory and the receiver reads them across the link
// (on sm_90 the default is write mode, as NCCL's). One process per rank:
// the quick sweep and the point-to-point sweep; one thread driving every
// rank: the group checks (direct writes included). The TRACE log must show
// every connector in read mode.
TEST(GpuP2pRead, SweepsRunInReadMode) {
  BRAID_NEED_A_GPU(g);
  auto logEnv = [](const ScopedTempDir& dir) {
    return std::vector<std::string>{"NCCL_P2P_READ_ENABLE=1", "NCCL_DEBUG=TRACE", "NCCL_DEBUG_SUBSYS=P2P",
                                    "NCCL_DEBUG_FILE=" + dir.path() + "/rank.%p.log"};
  };
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) -> std::string {
    std::string err = collSweep(comm, rank, nranks, SweepCounts::kQuick, memory);
    return err.empty() ? p2pSweep(comm, rank, nranks, memory) : err;
  };
  const ScopedTempDir processes("braid-read-");
  ASSERT_FALSE(processes.path().empty());
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, logEnv(processes), kQuickTimeoutSec, work), "");
  EXPECT_EQ(everyConnectorSays(processes.path(), ", read mode"), "") << "ranks in separate processes";
  const ScopedTempDir threads("braid-read-");
  ASSERT_FALSE(threads.path().empty());
  EXPECT_EQ(inOneChild(
                g, [g] { return driveInGroups(g); }, kQuickTimeoutSec, logEnv(threads)),
            "");
  EXPECT_EQ(everyConnectorSays(threads.path(), ", read mode"), "") << "ranks in one process";
}

// --- (f4): direct writes between GPUs of one process --------------------------

// Receives of `kind` memory from the previous rank, `count` floats each, one
// thread driving every rank in one group: "" if every receive holds what
// its sender sent.
enum class RecvMemory { kMalloc, kInterior, kPool, kPinnedHost };
// `bytes` of `kind` memory on the current GPU (its stream `s` for pool
// memory) at *p, and back.
std::string allocOf(RecvMemory kind, size_t bytes, hipStream_t s, void** p) {
  switch (kind) {
    case RecvMemory::kMalloc:
    case RecvMemory::kInterior: return hipCheck(hipMalloc(p, bytes), "hipMalloc");
    case RecvMemory::kPool: return hipCheck(hipMallocAsync(p, bytes, s), "hipMallocAsync");
    case RecvMemory::kPinnedHost: return hipCheck(hipHostMalloc(p, bytes, 0), "hipHostMalloc");
  }
  return "unknown memory kind";
}
void freeOf(RecvMemory kind, void* p, hipStream_t s) {
  if (p == nullptr) return;
  if (kind == RecvMemory::kPool) {
    (void)hipFreeAsync(p, s);
    (void)hipStreamSynchronize(s);
  } else {
    (void)(kind == RecvMemory::kPinnedHost ? hipHostFree(p) : hipFree(p));
  }
}
std::string sendAroundInto(const std::vector<ncclComm_t>& comms,
                           std::vector<std::unique_ptr<GpuMemory>>& mems, RecvMemory kind, size_t count) {
  const int n = static_cast<int>(comms.size());
  const size_t bytes = count * sizeof(float);
  const size_t skip = kind == RecvMemory::kInterior ? 4096 + 64 : 0;  // bytes before the receive buffer
  auto val = [](int r, size_t i) { return static_cast<float>(r * 1000 + static_cast<int>(i % 977)); };
  std::vector<char*> sends(n, nullptr), allocs(n, nullptr);
  std::string err;
  for (int r = 0; r < n && err.empty(); ++r) {
    hipStream_t s = static_cast<hipStream_t>(mems[r]->stream());
    err = hipCheck(hipSetDevice(mems[r]->device()), "hipSetDevice");
    if (err.empty()) err = hipCheck(hipMalloc(reinterpret_cast<void**>(&sends[r]), bytes), "hipMalloc");
    void* a = nullptr;
    if (err.empty()) err = allocOf(kind, skip + bytes, s, &a);
    allocs[r] = static_cast<char*>(a);
    std::vector<float> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = val(r, i);
    if (err.empty())
      err = hipCheck(hipMemcpyAsync(sends[r], h.data(), bytes, hipMemcpyHostToDevice, s), "upload");
    if (err.empty()) err = hipCheck(hipMemsetAsync(allocs[r] + skip, 0xff, bytes, s), "hipMemsetAsync");
    if (err.empty()) err = hipCheck(hipStreamSynchronize(s), "hipStreamSynchronize");
  }
  if (err.empty()) {
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclSend(sends[r], count, ncclFloat32, (r + 1) % n, comms[r], mems[r]->stream());
      ncclRecv(allocs[r] + skip, count, ncclFloat32, (r - 1 + n) % n, comms[r], mems[r]->stream());
    }
    err = check(ncclGroupEnd(), "ncclGroupEnd");
    for (int r = 0; r < n && err.empty(); ++r) err = mems[r]->synchronize(comms[r]);
  }
  std::vector<float> got(count);
  for (int r = 0; r < n && err.empty(); ++r) {
    (void)hipSetDevice(mems[r]->device());
    err = hipCheck(hipMemcpy(got.data(), allocs[r] + skip, bytes, hipMemcpyDefault), "download");
    for (size_t i = 0; i < count && err.empty(); ++i) {
      if (got[i] != val((r - 1 + n) % n, i)) err = strCat("GPU ", r, " received ", got[i], " at ", i);
    }
  }
  for (int r = 0; r < n; ++r) {
    (void)hipSetDevice(mems[r]->device());
    if (sends[r] != nullptr) (void)hipFree(sends[r]);
    freeOf(kind, allocs[r], static_cast<hipStream_t>(mems[r]->stream()));
  }
  return err;
}

// Ranks of one process (one thread driving every GPU): sends whose channel
// parts reach BRAID_GPU_P2P_DIRECT_MIN_BYTES (4 KiB here) are written
// straight into the receiver's buffer, where the sender's GPU may write it
// (the runtime allocator's memory, at any offset); pool and pinned host
// memory are received through the FIFO instead. The group checks (sends of
// 1 to 1M+3 floats among collectives) and sends into each kind of memory
// must deliver every element; the TRACE log must show connectors set up
// for direct writes and each receive taking the path its memory allows.
TEST(GpuP2pDirect, LargeSendsOfOneProcessWriteTheReceiveBuffer) {
  BRAID_NEED_A_GPU(g);
  const ScopedTempDir dir("braid-direct-");
  ASSERT_FALSE(dir.path().empty());
  auto body = [g, &dir]() -> std::string {
    std::string err = driveInGroups(g);
    if (!err.empty()) return "group checks: " + err;
    const size_t count = (size_t(8) << 20) / sizeof(float) + 3;
    err = withRanksInProcess(g,
                             [count](const std::vector<ncclComm_t>& comms,
                                     std::vector<std::unique_ptr<GpuMemory>>& mems) -> std::string {
                               const std::pair<RecvMemory, const char*> kinds[] = {
                                   {RecvMemory::kMalloc, "hipMalloc"},
                                   {RecvMemory::kInterior, "inside a hipMalloc"},
                                   {RecvMemory::kPool, "hipMallocAsync"},
                                   {RecvMemory::kPinnedHost, "pinned host memory"}};
                               for (const auto& [kind, name] : kinds) {
                                 std::string e = sendAroundInto(comms, mems, kind, count);
                                 if (!e.empty()) return strCat(name, ": ", e);
                               }
                               return "";
                             });
    if (!err.empty()) return err;
    // Every rank sets up its connectors for direct writes; each receive of
    // the four kinds logs its path (the group checks' 65537 and 1M+3 float
    // sends add two direct ones per rank).
    const int ranks = g.ranks;
    const int connectors = logLines(dir.path(), {"direct pointer, direct writes"});
    const std::string recvOf = strCat("receive of ", count * sizeof(float), " bytes");
    const int direct = logLines(dir.path(), {recvOf, ": direct writes"});
    const int fifo = logLines(dir.path(), {recvOf, ": through the FIFO"});
    const int groupDirect = logLines(dir.path(), {"receive of", ": direct writes"}) - direct;
    if (connectors < 2 * ranks) return strCat("only ", connectors, " connectors set up for direct writes");
    if (direct != 2 * ranks || fifo != 2 * ranks || groupDirect < 2 * ranks) {
      return strCat("receives of 8 MiB: ", direct, " direct and ", fifo, " through the FIFO, where ",
                    2 * ranks, " of each were expected; group checks: ", groupDirect, " direct");
    }
    return "";
  };
  const std::vector<std::string> env = {"BRAID_GPU_P2P_DIRECT_MIN_BYTES=4096", "NCCL_DEBUG=TRACE",
                                        "NCCL_DEBUG_SUBSYS=P2P", "NCCL_DEBUG_FILE=" + dir.path() + "/%p.log"};
  EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec, env), "");
}

// A large send whose receiver never posts its buffer: the sender's kernel
// waits for the receiver's mailbox, and must end at the stall timeout with
// an error that names the wait, never hang. (The connectors are made by a
// matched send first: making them needs both ranks.)
TEST(GpuP2pDirect, ASendNobodyReceivesFailsAtTheStallTimeout) {
  BRAID_NEED_A_GPU(g);
  auto body = [g]() -> std::string {
    std::vector<ncclComm_t> comms;
    std::string err = initAll(g, &comms);
    if (!err.empty()) return err;
    std::vector<std::unique_ptr<GpuMemory>> mems;
    std::vector<hipStream_t> streams(static_cast<size_t>(g.ranks), nullptr);
    std::vector<void*> bufs(static_cast<size_t>(g.ranks), nullptr);
    const size_t count = (size_t(8) << 20) / sizeof(float);
    for (int r = 0; r < g.ranks && err.empty(); ++r) {
      err = hipCheck(hipSetDevice(g.deviceOf(r)), "hipSetDevice");
      if (err.empty()) err = hipCheck(hipStreamCreateWithFlags(&streams[r], hipStreamNonBlocking), "stream");
      if (err.empty()) err = hipCheck(hipMalloc(&bufs[r], count * sizeof(float)), "hipMalloc");
      mems.push_back(std::make_unique<GpuMemory>(g.deviceOf(r), streams[r], kSyncTimeoutSec));
    }
    if (err.empty()) {
      ncclGroupStart();
      ncclSend(bufs[0], count, ncclFloat32, 1, comms[0], streams[0]);
      ncclRecv(bufs[1], count, ncclFloat32, 0, comms[1], streams[1]);
      err = check(ncclGroupEnd(), "the matched send");
      for (int r = 0; r < 2 && err.empty(); ++r) err = mems[r]->synchronize(comms[r]);
    }
    if (!err.empty()) return err + endAll(comms, true);
    const auto t0 = std::chrono::steady_clock::now();
    err = check(ncclSend(bufs[0], count, ncclFloat32, 1, comms[0], streams[0]), "the lone send");
    const std::string got = err.empty() ? mems[0]->synchronize(comms[0]) : err;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[ stall ] the lone send failed after %.1f s: %s\n", waited, got.c_str());
    ncclResult_t async = ncclSuccess;
    (void)ncclCommGetAsyncError(comms[0], &async);
    if (async != ncclRemoteError || got.find("to post the receive") == std::string::npos) {
      err = strCat("the lone send did not fail (ncclRemoteError) with the mailbox wait: ", got);
    }
    return err + endAll(comms, true);
  };
  EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec, {"BRAID_STALL_TIMEOUT=3"}), "");
}

// --- (f5): ring collectives writing results into the next rank's output -------

// Ring collectives of `count` floats, one thread driving every rank in
// groups, each rank's output in memory of kinds[r]: an all-reduce sum out
// of place (output 4 bytes into its allocation: element by element), an
// average in place, an all-gather in place, broadcasts from the last rank
// out of place and from rank 0 in place. "" if every result is exact.
std::string ringCollectivesInto(const std::vector<ncclComm_t>& comms,
                                std::vector<std::unique_ptr<GpuMemory>>& mems,
                                const std::vector<RecvMemory>& kinds, size_t count) {
  const int n = static_cast<int>(comms.size());
  auto val = [](int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 13)); };
  const float rankSum = static_cast<float>(n * (n + 1) / 2);
  const size_t outBytes = count * static_cast<size_t>(n) * sizeof(float) + 16;
  std::vector<float*> in(n, nullptr);
  std::vector<char*> out(n, nullptr);
  auto stream = [&](int r) { return static_cast<hipStream_t>(mems[r]->stream()); };
  // Rank r's values at `at` (`count` floats, or every rank's block).
  auto upload = [&](int r, void* at, bool allRanks) {
    std::vector<float> h(allRanks ? count * n : count);
    for (size_t j = 0; j < h.size(); ++j) h[j] = val(allRanks ? static_cast<int>(j / count) : r, j % count);
    std::string err = hipCheck(
        hipMemcpyAsync(at, h.data(), h.size() * sizeof(float), hipMemcpyHostToDevice, stream(r)), "upload");
    return err.empty() ? hipCheck(hipStreamSynchronize(stream(r)), "hipStreamSynchronize") : err;
  };
  std::string err;
  for (int r = 0; r < n && err.empty(); ++r) {
    err = hipCheck(hipSetDevice(mems[r]->device()), "hipSetDevice");
    if (err.empty())
      err = hipCheck(hipMalloc(reinterpret_cast<void**>(&in[r]), count * sizeof(float)), "hipMalloc");
    void* a = nullptr;
    if (err.empty()) err = allocOf(kinds[r], outBytes, stream(r), &a);
    out[r] = static_cast<char*>(a);
    if (err.empty()) err = upload(r, in[r], false);
  }
  // Runs one collective per rank in a group, then checks `got(r)` (floats
  // at `at(r)`) against `want(r, j)`.
  auto run = [&](const char* what, const std::function<void(int)>& call, const std::function<float*(int)>& at,
                 size_t floats, const std::function<float(int, size_t)>& want) {
    if (!err.empty()) return;
    ncclGroupStart();
    for (int r = 0; r < n; ++r) call(r);
    err = check(ncclGroupEnd(), what);
    for (int r = 0; r < n && err.empty(); ++r) err = mems[r]->synchronize(comms[r]);
    std::vector<float> got(floats);
    for (int r = 0; r < n && err.empty(); ++r) {
      (void)hipSetDevice(mems[r]->device());
      err = hipCheck(hipMemcpy(got.data(), at(r), floats * sizeof(float), hipMemcpyDefault), "download");
      for (size_t j = 0; j < floats && err.empty(); ++j) {
        if (got[j] != want(r, j))
          err = strCat(what, ": rank ", r, " has ", got[j], " at ", j, ", not ", want(r, j));
      }
    }
  };
  auto outAt = [&](size_t offsetBytes) {
    return [&, offsetBytes](int r) { return reinterpret_cast<float*>(out[r] + offsetBytes); };
  };
  run(
      "all-reduce out of place",
      [&](int r) {
        ncclAllReduce(in[r], outAt(4)(r), count, ncclFloat32, ncclSum, comms[r], mems[r]->stream());
      },
      outAt(4), count, [&](int, size_t j) { return rankSum * static_cast<float>(j % 13); });
  for (int r = 0; r < n && err.empty(); ++r) err = upload(r, out[r], false);
  run(
      "average in place",
      [&](int r) { ncclAllReduce(out[r], out[r], count, ncclFloat32, ncclAvg, comms[r], mems[r]->stream()); },
      outAt(0), count,
      [&](int, size_t j) { return rankSum * static_cast<float>(j % 13) / static_cast<float>(n); });
  for (int r = 0; r < n && err.empty(); ++r) err = upload(r, out[r] + r * count * sizeof(float), false);
  run(
      "all-gather in place",
      [&](int r) {
        ncclAllGather(out[r] + r * count * sizeof(float), out[r], count, ncclFloat32, comms[r],
                      mems[r]->stream());
      },
      outAt(0), count * n, [&](int, size_t j) { return val(static_cast<int>(j / count), j % count); });
  run(
      "broadcast from the last rank",
      [&](int r) { ncclBroadcast(in[r], out[r], count, ncclFloat32, n - 1, comms[r], mems[r]->stream()); },
      outAt(0), count, [&](int, size_t j) { return val(n - 1, j); });
  for (int r = 0; r < n && err.empty(); ++r) err = upload(r, out[r], false);
  run(
      "broadcast from rank 0 in place",
      [&](int r) { ncclBroadcast(out[r], out[r], count, ncclFloat32, 0, comms[r], mems[r]->stream()); },
      outAt(0), count, [&](int, size_t j) { return val(0, j); });
  for (int r = 0; r < n; ++r) {
    (void)hipSetDevice(mems[r]->device());
    if (in[r] != nullptr) (void)hipFree(in[r]);
    freeOf(kinds[r], out[r], stream(r));
  }
  return err;
}
constexpr int kRingCollectivesInto = 5;  // collectives per rank of ringCollectivesInto

// Ranks of one process (one thread driving them): ring collectives in
// Simple whose channel parts reach BRAID_GPU_RING_DIRECT_MIN_BYTES (4 KiB
// here) write their results straight into the next rank's output where its
// GPU may write it, and through the FIFO where the output is pool memory
// (every rank's, or rank 0's only), with rings of 2 and of 4 ranks (whose
// middle steps pass on what landed in the output). The group checks and
// ringCollectivesInto must give exact results; the TRACE log must show
// each collective's path.
TEST(GpuRingDirect, RingsOfOneProcessWriteIntoTheNextRanksOutput) {
  BRAID_NEED_A_GPU(g0);
  for (int ranks : {g0.ranks, 4}) {
    const GpuRanks g{ranks, g0.gpus};
    const ScopedTempDir dir("braid-ringdirect-");
    ASSERT_FALSE(dir.path().empty());
    const std::vector<std::vector<RecvMemory>> kindSets = {
        std::vector<RecvMemory>(static_cast<size_t>(ranks), RecvMemory::kMalloc),
        std::vector<RecvMemory>(static_cast<size_t>(ranks), RecvMemory::kPool), [ranks] {
          std::vector<RecvMemory> k(static_cast<size_t>(ranks), RecvMemory::kMalloc);
          k[0] = RecvMemory::kPool;
          return k;
        }()};
    const std::vector<size_t> counts = {65537, (size_t(1) << 20) + 3};
    auto body = [g, &kindSets, &counts, &dir]() -> std::string {
      std::string err = driveInGroups(g);
      if (!err.empty()) return "group checks: " + err;
      err = withRanksInProcess(g,
                               [&](const std::vector<ncclComm_t>& comms,
                                   std::vector<std::unique_ptr<GpuMemory>>& mems) -> std::string {
                                 for (size_t k = 0; k < kindSets.size(); ++k) {
                                   for (size_t count : counts) {
                                     std::string e = ringCollectivesInto(comms, mems, kindSets[k], count);
                                     if (!e.empty())
                                       return strCat("memory set ", k, ", count ", count, ": ", e);
                                   }
                                 }
                                 return "";
                               });
      if (!err.empty()) return err;
      // Per count: every rank's collectives direct in the first set, through
      // the FIFO in the second, rank 0's through the FIFO in the third; the
      // group checks add direct ones. (The log is this process's.)
      const int direct = logLines(dir.path(), {"the ring writes results straight into this rank's output"});
      const int fifo = logLines(dir.path(), {"the ring brings results through the FIFO"});
      const int per = kRingCollectivesInto * static_cast<int>(counts.size());
      if (fifo != per * (g.ranks + 1) || direct < per * (2 * g.ranks - 1)) {
        return strCat(direct, " collectives logged direct writes and ", fifo, " the FIFO, where at least ",
                      per * (2 * g.ranks - 1), " and exactly ", per * (g.ranks + 1), " were expected");
      }
      return "";
    };
    const std::vector<std::string> env = {
        "NCCL_ALGO=Ring",   "NCCL_PROTO=Simple",      "BRAID_GPU_RING_DIRECT_MIN_BYTES=4096",
        "NCCL_DEBUG=TRACE", "NCCL_DEBUG_SUBSYS=COLL", "NCCL_DEBUG_FILE=" + dir.path() + "/%p.log"};
    EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec, env), "") << ranks << " ranks";
  }
}

// --- (g): algorithm, protocol, channels and buffers forced through the environment

struct ForcedCase {
  const char* name;
  std::vector<std::string> env;
};
void PrintTo(const ForcedCase& c, std::ostream* os) {
  *os << c.name;
}

class GpuCollForced : public ::testing::TestWithParam<ForcedCase> {};

TEST_P(GpuCollForced, SweepWithForcedChoice) {
  BRAID_NEED_A_GPU(g);
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, GetParam().env, kQuickTimeoutSec,
                      sweepWork(SweepCounts::kQuick)),
            "");
}
INSTANTIATE_TEST_SUITE_P(
    Forced, GpuCollForced,
    ::testing::Values(ForcedCase{"RingSimple", {"NCCL_ALGO=Ring", "NCCL_PROTO=Simple"}},
                      ForcedCase{"RingLL", {"NCCL_ALGO=Ring", "NCCL_PROTO=LL"}},
                      ForcedCase{"TreeSimple", {"NCCL_ALGO=Tree", "NCCL_PROTO=Simple"}},
                      ForcedCase{"TreeLL", {"NCCL_ALGO=Tree", "NCCL_PROTO=LL"}},
                      ForcedCase{"RingTwoChannels", {"NCCL_ALGO=Ring", "NCCL_MIN_NCHANNELS=2"}},
                      ForcedCase{"TreeFourChannels", {"NCCL_ALGO=Tree", "NCCL_MIN_NCHANNELS=4"}},
                      // Small FIFOs: every count above a few thousand spans many steps.
                      ForcedCase{"SmallBuffers", {"BRAID_BUFFSIZE=64K"}}),
    [](const ::testing::TestParamInfo<ForcedCase>& p) { return std::string(p.param.name); });

// LL128 on rings: the sweep and a group of collectives (fused launches)
// with NCCL_PROTO=LL128 (sum, average and the data movers run it; the other
// operators fall back, as the selector notes). On one sm_90 (ranks sharing
// it) the communicator must say LL128 is on, or the sweep would pass on
// another protocol; with several GPUs it depends on NVLink between them.
TEST(GpuLL128, SweepAndGroupOnRings) {
  BRAID_NEED_A_GPU(g);
  auto work = [g](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    GpuInfo info;
    Status s = gpuDeviceInfo(g.deviceOf(rank), &info);
    if (!s.ok()) return s.message();
    const bool sm90 = std::string(gpuFlavorName()) == "cuda" && info.arch.rfind("sm_90", 0) == 0;
    const bool on = static_cast<Communicator*>(comm)->ll128();
    if (on && !sm90)
      return strCat("LL128 is on with a GPU of ", info.arch, " in the ", gpuFlavorName(), " flavor");
    if (!on && sm90 && g.gpus == 1) return std::string("LL128 is off with ranks sharing one sm_90");
    std::string err = collSweep(comm, rank, nranks, SweepCounts::kQuick, memory);
    return err.empty() ? groupSweep(comm, rank, nranks, memory) : err;
  };
  EXPECT_EQ(
      runPerGpu(g, StreamKind::kNonBlocking, {"NCCL_ALGO=Ring", "NCCL_PROTO=LL128"}, kFullTimeoutSec, work),
      "");
}

// --- (h): collectives captured into a graph and replayed ------------------------

// Captures the rank's first collectives (so the connectors are made while
// the stream is being captured, in the strictest capture mode): an
// all-reduce, an all-gather, a reduce-scatter of its result, a broadcast
// from the last rank, a send/receive around the ring and an in-place
// all-to-all (which stages through a buffer the capture grows). Then
// replays the graph with new inputs, checking every output after each
// replay. Counts span the LL and Simple protocols and several channels.
std::string graphWork(ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
  using Buffer = SweepBuffer<float>;
  hipStream_t stream = static_cast<hipStream_t>(memory.stream());
  const int prev = (rank - 1 + nranks) % nranks, next = (rank + 1) % nranks;
  auto val = [](int r, size_t i, int iter) {
    return static_cast<float>((r + 1) * static_cast<int>((i + 3 * iter) % 17));
  };
  auto a2a = [nranks](int src, int dst, size_t i, int iter) {
    return static_cast<float>((src * nranks + dst + 1) * static_cast<int>((i + iter) % 11));
  };
  const float rankSum = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t count : {size_t(7), size_t(65537), (size_t(1) << 20) + 3}) {
    const std::string tag = strCat(" (count ", count, ")");
    const size_t n = static_cast<size_t>(nranks);
    Buffer in(memory, count), sum(memory, count), all(memory, count * n), part(memory, count),
        bcast(memory, count), from(memory, count), x(memory, count * n);
    for (const Buffer* b : {&in, &sum, &all, &part, &bcast, &from, &x})
      if (!b->error().empty()) return b->error() + tag;
    std::string err = memory.synchronize(comm);  // allocation done before the capture begins
    if (!err.empty()) return err + tag;
    hipGraph_t graph = nullptr;
    err = hipCheck(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal), "hipStreamBeginCapture");
    if (!err.empty()) return err + tag;
    err +=
        check(ncclAllReduce(in.data(), sum.data(), count, ncclFloat32, ncclSum, comm, stream), "allreduce");
    err += check(ncclAllGather(in.data(), all.data(), count, ncclFloat32, comm, stream), "allgather");
    err += check(ncclReduceScatter(all.data(), part.data(), count, ncclFloat32, ncclSum, comm, stream),
                 "reducescatter");
    err += check(ncclBroadcast(in.data(), bcast.data(), count, ncclFloat32, nranks - 1, comm, stream),
                 "broadcast");
    err += check(ncclGroupStart(), "group start");
    err += check(ncclSend(in.data(), count, ncclFloat32, next, comm, stream), "send");
    err += check(ncclRecv(from.data(), count, ncclFloat32, prev, comm, stream), "recv");
    err += check(ncclGroupEnd(), "group end");
    err += check(ncclAllToAll(x.data(), x.data(), count, ncclFloat32, comm, stream), "in-place alltoall");
    err += hipCheck(hipStreamEndCapture(stream, &graph), "hipStreamEndCapture");
    hipGraphExec_t exec = nullptr;
    if (err.empty())
      err = hipCheck(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "hipGraphInstantiate");
    if (!err.empty()) return "while capturing: " + err + tag;
    std::vector<float> h(count), hx(count * n), got;
    for (int iter = 0; iter < 3 && err.empty(); ++iter) {
      const std::string at = strCat(" after replay ", iter, tag);
      for (size_t i = 0; i < count; ++i) h[i] = val(rank, i, iter);
      for (size_t j = 0; j < count * n; ++j) hx[j] = a2a(rank, static_cast<int>(j / count), j % count, iter);
      err = in.upload(h) + x.upload(hx);
      if (err.empty()) err = hipCheck(hipGraphLaunch(exec, stream), "hipGraphLaunch");
      if (err.empty()) err = memory.synchronize(comm);
      if (!err.empty()) return err + at;
      auto expect = [&](Buffer& b, const char* what,
                        const std::function<float(size_t)>& want) -> std::string {
        std::string e = b.download(&got);
        for (size_t j = 0; j < got.size() && e.empty(); ++j) {
          if (got[j] != want(j))
            e = strCat(what, " at ", j, ": ", got[j], " where ", want(j), " was expected");
        }
        return e;
      };
      err = expect(sum, "allreduce", [&](size_t i) { return rankSum * val(0, i, iter); });
      if (err.empty())
        err = expect(all, "allgather",
                     [&](size_t j) { return val(static_cast<int>(j / count), j % count, iter); });
      if (err.empty())
        err = expect(part, "reducescatter",
                     [&](size_t i) { return static_cast<float>(nranks) * val(rank, i, iter); });
      if (err.empty()) err = expect(bcast, "broadcast", [&](size_t i) { return val(nranks - 1, i, iter); });
      if (err.empty()) err = expect(from, "recv", [&](size_t i) { return val(prev, i, iter); });
      if (err.empty())
        err = expect(x, "alltoall",
                     [&](size_t j) { return a2a(static_cast<int>(j / count), rank, j % count, iter); });
      if (!err.empty()) err += at;
    }
    (void)hipGraphExecDestroy(exec);
    (void)hipGraphDestroy(graph);
    if (!err.empty()) return err;
  }
  return "";
}

TEST(GpuGraph, CaptureOnFirstUseAndReplay) {
  BRAID_NEED_A_GPU(g);
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, graphWork), "");
}

// --- (j): zero-copy collectives on symmetric windows ---------------------------

// With zero-copy asked for (BRAID_GPU_ZERO_COPY_MAX_BYTES; off by default),
// every rank registers one ncclMemAlloc window and runs all-reduce (sum and
// average; float, bf16 and int32), all-gather and reduce-scatter in it, in
// place and out of place, eagerly and captured into a graph replayed three
// times (the barrier's call counters live on the GPU). The communicator must
// hold the window as zero-copy (mapped from every rank) for sizes the
// selector runs zero-copy. Then rank 0 passes its buffers 4 KiB further into
// the window than the others: every rank's kernel must end with an error
// naming the mismatch, not hang or corrupt.
std::string windowWork(ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
  hipStream_t stream = static_cast<hipStream_t>(memory.stream());
  const size_t maxCount = (size_t(1) << 20) + 3, n = static_cast<size_t>(nranks);
  const size_t bytes = (maxCount * n + 4096) * sizeof(float) * 2;
  void* base = nullptr;
  std::string err = check(ncclMemAlloc(&base, bytes), "ncclMemAlloc");
  if (!err.empty()) return err;
  ncclWindow_t win = nullptr;
  err = check(ncclCommWindowRegister(comm, base, bytes, &win, NCCL_WIN_COLL_SYMMETRIC),
              "ncclCommWindowRegister");
  if (!err.empty()) return err;
  Communicator* c = static_cast<Communicator*>(comm);
  uint64_t number = 0, offset = 0;
  if (!c->windows().find(base, bytes, &number, &offset)) return "the window is not zero-copy";
  char* in = static_cast<char*>(base);
  char* out = in + (maxCount * n + 4096) * sizeof(float);
  auto val = [](int r, size_t i, int iter) {
    return static_cast<float>((r + 1) * static_cast<int>((i + iter) % 13));
  };
  std::vector<float> h, got;
  auto upload = [&](void* dst, const auto& v) {
    // The null stream's copy finishes before the user stream's kernels read it.
    std::string e =
        hipCheck(hipMemcpy(dst, v.data(), v.size() * sizeof(v[0]), hipMemcpyHostToDevice), "upload");
    return e.empty() ? hipCheck(hipDeviceSynchronize(), "synchronize after upload") : e;
  };
  auto download = [&](const void* src, size_t count) {
    got.assign(count, -1.0f);
    return hipCheck(hipMemcpy(got.data(), src, count * sizeof(float), hipMemcpyDeviceToHost), "download");
  };
  const float rankSum = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t count : {size_t(1), size_t(7), size_t(1023), size_t(65537), maxCount}) {
    for (bool inPlace : {false, true}) {
      const std::string tag = strCat(" (count ", count, inPlace ? ", in place)" : ")");
      // all-reduce, sum then average
      for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
        h.resize(count);
        for (size_t i = 0; i < count; ++i) h[i] = val(rank, i, 0);
        void* dst = inPlace ? in : out;
        err = upload(in, h);
        if (err.empty())
          err = check(ncclAllReduce(in, dst, count, ncclFloat32, op, comm, stream), "allreduce");
        if (err.empty()) err = memory.synchronize(comm);
        if (err.empty()) err = download(dst, count);
        for (size_t i = 0; i < count && err.empty(); ++i) {
          const float want = op == ncclSum ? rankSum * val(0, i, 0) : rankSum * val(0, i, 0) / nranks;
          if (got[i] != want)
            err = strCat("allreduce op ", op, " at ", i, ": ", got[i], " where ", want, " was expected");
        }
        if (!err.empty()) return err + tag;
      }
      // all-gather: rank r's block lands at r * count
      h.resize(count);
      for (size_t i = 0; i < count; ++i) h[i] = val(rank, i, 1);
      char* agIn = inPlace ? out + static_cast<size_t>(rank) * count * sizeof(float) : in;
      err = upload(agIn, h);
      if (err.empty()) err = check(ncclAllGather(agIn, out, count, ncclFloat32, comm, stream), "allgather");
      if (err.empty()) err = memory.synchronize(comm);
      if (err.empty()) err = download(out, count * n);
      for (size_t j = 0; j < count * n && err.empty(); ++j) {
        const float want = val(static_cast<int>(j / count), j % count, 1);
        if (got[j] != want) err = strCat("allgather at ", j, ": ", got[j], " where ", want, " was expected");
      }
      if (!err.empty()) return err + tag;
      // reduce-scatter of nranks blocks
      h.resize(count * n);
      for (size_t j = 0; j < count * n; ++j) h[j] = val(rank, j, 2);
      err = upload(in, h);
      char* rsOut = inPlace ? in + static_cast<size_t>(rank) * count * sizeof(float) : out;
      if (err.empty())
        err = check(ncclReduceScatter(in, rsOut, count, ncclFloat32, ncclSum, comm, stream), "reducescatter");
      if (err.empty()) err = memory.synchronize(comm);
      if (err.empty()) err = download(rsOut, count);
      for (size_t i = 0; i < count && err.empty(); ++i) {
        const float want = rankSum * val(0, static_cast<size_t>(rank) * count + i, 2);
        if (got[i] != want)
          err = strCat("reducescatter at ", i, ": ", got[i], " where ", want, " was expected");
      }
      if (!err.empty()) return err + tag;
    }
  }
  // bf16 and int32 sums (bf16 values exact: small integers).
  {
    const size_t count = 4099;
    std::vector<uint16_t> hb(count);
    std::vector<int32_t> hi(count);
    for (size_t i = 0; i < count; ++i) {
      const float f = static_cast<float>((rank + 1) * static_cast<int>(i % 7));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      hb[i] = static_cast<uint16_t>(bits >> 16);
      hi[i] = (rank + 1) * static_cast<int32_t>(i % 1000) - 300;
    }
    err = upload(in, hb);
    if (err.empty())
      err = check(ncclAllReduce(in, out, count, ncclBfloat16, ncclSum, comm, stream), "bf16 allreduce");
    if (err.empty()) err = memory.synchronize(comm);
    if (err.empty())
      err = hipCheck(hipMemcpy(hb.data(), out, count * 2, hipMemcpyDeviceToHost), "download bf16");
    for (size_t i = 0; i < count && err.empty(); ++i) {
      const uint32_t bits = static_cast<uint32_t>(hb[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      if (f != rankSum * static_cast<float>(i % 7)) err = strCat("bf16 allreduce at ", i, ": ", f);
    }
    if (err.empty()) err = upload(in, hi);
    if (err.empty())
      err = check(ncclAllReduce(in, in, count, ncclInt32, ncclSum, comm, stream), "i32 allreduce");
    if (err.empty()) err = memory.synchronize(comm);
    if (err.empty())
      err = hipCheck(hipMemcpy(hi.data(), in, count * 4, hipMemcpyDeviceToHost), "download i32");
    for (size_t i = 0; i < count && err.empty(); ++i) {
      const int32_t want = static_cast<int32_t>(rankSum) * static_cast<int32_t>(i % 1000) - 300 * nranks;
      if (hi[i] != want)
        err = strCat("int32 allreduce at ", i, ": ", hi[i], " where ", want, " was expected");
    }
    if (!err.empty()) return err;
  }
  // Captured once, replayed three times with new inputs.
  {
    const size_t count = 65537;
    hipGraph_t graph = nullptr;
    hipGraphExec_t exec = nullptr;
    err = hipCheck(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal), "hipStreamBeginCapture");
    if (err.empty())
      err = check(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, stream), "captured allreduce");
    err += hipCheck(hipStreamEndCapture(stream, &graph), "hipStreamEndCapture");
    if (err.empty())
      err = hipCheck(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "hipGraphInstantiate");
    for (int iter = 0; iter < 3 && err.empty(); ++iter) {
      h.resize(count);
      for (size_t i = 0; i < count; ++i) h[i] = val(rank, i, 10 + iter);
      err = upload(in, h);
      if (err.empty()) err = hipCheck(hipGraphLaunch(exec, stream), "hipGraphLaunch");
      if (err.empty()) err = memory.synchronize(comm);
      if (err.empty()) err = download(out, count);
      for (size_t i = 0; i < count && err.empty(); ++i) {
        if (got[i] != rankSum * val(0, i, 10 + iter)) err = strCat("replay ", iter, " at ", i, ": ", got[i]);
      }
    }
    if (exec != nullptr) (void)hipGraphExecDestroy(exec);
    if (graph != nullptr) (void)hipGraphDestroy(graph);
    if (!err.empty()) return err;
  }
  // Rank 0 passes its buffers 4 KiB further in: every rank fails, naming it.
  {
    const size_t count = 65537, shift = rank == 0 ? 4096 : 0;
    const std::vector<float> sentinel(count + 1024, -7.0f);  // every rank's output, shifted or not
    err = upload(out, sentinel);
    if (err.empty())
      err = check(ncclAllReduce(in + shift, out + shift, count, ncclFloat32, ncclSum, comm, stream),
                  "shifted allreduce");
    if (!err.empty()) return err;
    (void)memory.synchronize(comm);
    ncclResult_t async = ncclSuccess;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (async == ncclSuccess && std::chrono::steady_clock::now() < until) {
      (void)ncclCommGetAsyncError(comm, &async);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::string text = ncclGetLastError(comm);
    if (async != ncclInvalidUsage || text.find("same offsets") == std::string::npos)
      return strCat("shifted buffers gave ", async, ": ", text);
    // Nothing was written: the kernels stop at the mismatch.
    err = download(out, sentinel.size());
    for (size_t i = 0; i < got.size() && err.empty(); ++i) {
      if (got[i] != -7.0f) err = strCat("a shifted all-reduce wrote ", got[i], " at output element ", i);
    }
    if (!err.empty()) return err;
  }
  return "";  // rankOnGpu destroys the failed communicator, which releases the window
}

TEST(GpuWindows, ZeroCopyOnSymmetricWindows) {
  BRAID_NEED_A_GPU(g);
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, {"BRAID_GPU_ZERO_COPY_MAX_BYTES=16M"}, kQuickTimeoutSec,
                      windowWork),
            "");
}

// The whole quick sweep with its buffers in one window: every all-reduce and
// reduce-scatter operator (prod, min, max and PreMulSum, whose scalar may
// differ between ranks, included) and the all-gathers run the zero-copy
// kernel, as the log proves, and every result is exact.
TEST(GpuWindows, SweepOnAWindowRunsEveryOperatorZeroCopy) {
  BRAID_NEED_A_GPU(g);
  const ScopedTempDir dir("braid-gpu-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string logDir = dir.path();
  std::vector<std::string> env = windowLogEnv(logDir);
  env.push_back("BRAID_GPU_ZERO_COPY_MAX_BYTES=16M");
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, env, kQuickTimeoutSec,
                      [&](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
                        auto& gpu = static_cast<GpuMemory&>(memory);
                        WindowMemory<GpuMemory> window(gpu.device(), gpu.stream(), kSyncTimeoutSec);
                        std::string err = window.open(comm, 64u << 20);
                        if (err.empty()) err = collSweep(comm, rank, nranks, SweepCounts::kQuick, window);
                        if (!err.empty()) return err;  // the window goes with the aborted communicator
                        err = window.close();
                        if (err.empty() && logLines(logDir, {"zero-copy, mapped from all"}) != 1)
                          err = "the window was not zero-copy";
                        return err.empty() ? ranZeroCopy(logDir) : err;
                      }),
            "");
}

// One thread registers every rank's windows (two each, ncclMemAlloc
// memory) inside a group, as NCCL allows and as a single-process framework
// driving several GPUs does: the handles are filled at ncclGroupEnd, each is
// a device descriptor with the LSA team's flat view, every window is mapped
// for zero-copy, and a grouped all-reduce on them is exact.
TEST(GpuWindowsGroup, OneThreadRegistersEveryRanksWindows) {
  BRAID_NEED_A_GPU(g);
  const ScopedTempDir dir("braid-gpu-windows-");
  ASSERT_FALSE(dir.path().empty());
  const std::string logDir = dir.path();
  std::vector<std::string> env = windowLogEnv(logDir);
  env.push_back("BRAID_GPU_ZERO_COPY_MAX_BYTES=16M");
  auto work = [&](const std::vector<ncclComm_t>& comms, std::vector<std::unique_ptr<GpuMemory>>& mems) {
    const int n = static_cast<int>(comms.size());
    const size_t count = (1u << 20) + 3;
    std::vector<void*> data(n, nullptr), spare(n, nullptr);
    std::vector<ncclWindow_t> wins(n, nullptr), spareWins(n, nullptr);
    std::string err;
    for (int r = 0; r < n && err.empty(); ++r) {
      err = hipCheck(hipSetDevice(mems[r]->device()), "hipSetDevice");
      if (err.empty()) err = check(ncclMemAlloc(&data[r], 2 * count * sizeof(float)), "ncclMemAlloc");
      if (err.empty()) err = check(ncclMemAlloc(&spare[r], count * sizeof(float)), "ncclMemAlloc (spare)");
    }
    if (err.empty()) {
      err = check(ncclGroupStart(), "group start");
      for (int r = 0; r < n && err.empty(); ++r) {
        err = check(ncclCommWindowRegister(comms[r], data[r], 2 * count * sizeof(float), &wins[r],
                                           NCCL_WIN_COLL_SYMMETRIC),
                    "register");
        err += check(ncclCommWindowRegister(comms[r], spare[r], count * sizeof(float), &spareWins[r],
                                            NCCL_WIN_COLL_SYMMETRIC),
                     "register the spare");
        if (wins[r] != nullptr || spareWins[r] != nullptr) err += "a handle was filled before ncclGroupEnd";
      }
      err += check(ncclGroupEnd(), "group end");
    }
    for (int r = 0; r < n && err.empty(); ++r) {
      if (wins[r] == nullptr || spareWins[r] == nullptr) {
        err = strCat("rank ", r, "'s window handles are null");
        break;
      }
      ncclWindow_vidmem desc{};
      err = hipCheck(hipSetDevice(mems[r]->device()), "hipSetDevice");
      if (err.empty())
        err = hipCheck(hipMemcpy(&desc, wins[r], sizeof(desc), hipMemcpyDeviceToHost), "reading a window");
      if (err.empty() && (desc.lsaFlatBase == nullptr || desc.lsaRank != r))
        err = strCat("rank ", r, "'s window descriptor: flat base ", static_cast<void*>(desc.lsaFlatBase),
                     ", LSA rank ", desc.lsaRank);
    }
    std::vector<float> h(count);
    for (int r = 0; r < n && err.empty(); ++r) {
      for (size_t i = 0; i < count; ++i) h[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
      err = hipCheck(hipSetDevice(mems[r]->device()), "hipSetDevice");
      if (err.empty())
        err = hipCheck(hipMemcpy(data[r], h.data(), count * sizeof(float), hipMemcpyHostToDevice), "upload");
    }
    if (err.empty()) {
      err = check(ncclGroupStart(), "group start");
      for (int r = 0; r < n; ++r) {
        float* in = static_cast<float*>(data[r]);
        err += check(ncclAllReduce(in, in + count, count, ncclFloat, ncclSum, comms[r], mems[r]->stream()),
                     "all-reduce");
      }
      err += check(ncclGroupEnd(), "group end");
    }
    for (int r = 0; r < n && err.empty(); ++r) {
      err = mems[r]->synchronize(comms[r]);
      if (err.empty())
        err = hipCheck(hipMemcpy(h.data(), static_cast<float*>(data[r]) + count, count * sizeof(float),
                                 hipMemcpyDeviceToHost),
                       "download");
      for (size_t i = 0; i < count && err.empty(); ++i) {
        const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
        if (h[i] != want)
          err = strCat("rank ", r, " element ", i, ": ", h[i], " where ", want, " was expected");
      }
    }
    if (!err.empty()) return err;  // the windows go with the aborted communicators
    for (int r = 0; r < n; ++r) {
      err += check(ncclCommWindowDeregister(comms[r], wins[r]), "deregister");
      err += check(ncclCommWindowDeregister(comms[r], spareWins[r]), "deregister the spare");
      err += check(ncclMemFree(data[r]), "ncclMemFree") + check(ncclMemFree(spare[r]), "ncclMemFree (spare)");
    }
    if (err.empty() && logLines(logDir, {"zero-copy, mapped from all"}) != 2 * n)
      err = "a window was not mapped for zero-copy";
    if (err.empty() && logLines(logDir, {"ncclAllReduce", "Direct/Simple zero-copy,"}) != n)
      err = "the grouped all-reduce did not run zero-copy";
    return err;
  };
  EXPECT_EQ(inOneChild(
                g, [&] { return withRanksInProcess(g, work); }, kQuickTimeoutSec, env),
            "");
}

// Ranks in separate processes (one host) write results straight into each
// other's windows and registered buffers: with both direct-write thresholds
// at 4 KiB and rings in Simple forced, the point-to-point sweep and the
// group sweep first on plain hipMalloc buffers (which the peer's process
// has not mapped: every receive and ring collective through the FIFO),
// then those sweeps and the quick collective sweep on buffers carved from
// an ncclMemAlloc arena registered as a window (mapped by every rank at
// registration), then as a buffer (ncclCommRegister: each peer maps it as
// it next enqueues work, which two all-reduces after registering ensure),
// then on a hipMalloc arena registered as a buffer, then on a virtual-memory
// allocation of the program's own (not ncclMemAlloc's; made exportable as a
// POSIX descriptor, as PyTorch's expandable segments are) registered as a
// buffer. ncclMemAlloc memory and the program's virtual memory reach the
// peer as descriptors lent over a Unix socket (platform/fd_lending.h),
// hipMalloc memory as an IPC handle.
// Every result must be exact, and this rank's log must show its IPC
// connectors set up for direct writes, no direct write on plain buffers,
// and on each arena ring collectives and receives written directly and
// none through the FIFO.
TEST(GpuDirectAcrossProcesses, WindowsAndRegisteredBuffersAreWrittenStraight) {
  BRAID_NEED_A_GPU(g);
  const ScopedTempDir dir("braid-ipc-direct-");
  ASSERT_FALSE(dir.path().empty());
  const std::string logDir = dir.path();
  const std::vector<std::string> env = {"BRAID_GPU_P2P_DIRECT_MIN_BYTES=4096",
                                        "BRAID_GPU_RING_DIRECT_MIN_BYTES=4096",
                                        "NCCL_ALGO=Ring",
                                        "NCCL_PROTO=Simple",
                                        "NCCL_DEBUG=TRACE",
                                        "NCCL_DEBUG_SUBSYS=P2P,COLL,ALLOC",
                                        "NCCL_DEBUG_FILE=" + logDir + "/%p.log"};
  auto work = [&](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) -> std::string {
    // Ring collectives and receives by path, in this rank's log so far.
    struct Paths {
      int ringDirect, ringFifo, recvDirect, recvFifo;
    };
    auto paths = [&] {
      return Paths{logLines(logDir, {"the ring writes results straight into"}),
                   logLines(logDir, {"the ring brings results through the FIFO"}),
                   logLines(logDir, {"receive of", ": direct writes"}),
                   logLines(logDir, {"receive of", ": through the FIFO"})};
    };
    std::string err = p2pSweep(comm, rank, nranks, memory);
    if (err.empty()) err = groupSweep(comm, rank, nranks, memory);
    if (!err.empty()) return "plain buffers: " + err;
    const Paths plain = paths();
    if (plain.ringDirect != 0 || plain.recvDirect != 0 || plain.ringFifo == 0 || plain.recvFifo == 0) {
      return strCat("plain buffers: ", plain.ringDirect, " ring collectives and ", plain.recvDirect,
                    " receives direct, ", plain.ringFifo, " and ", plain.recvFifo, " through the FIFO");
    }
    auto& gpu = static_cast<GpuMemory&>(memory);
    constexpr size_t kArenaBytes = 64u << 20;
    void* plainArena = nullptr;
    err = hipCheck(hipMalloc(&plainArena, kArenaBytes), "hipMalloc");
    if (!err.empty()) return err;
    void* vmmArena = nullptr;
    size_t vmmMapped = 0;
    if (Status s = gpuMallocShareable(kArenaBytes, &vmmArena, &vmmMapped); !s.ok()) return s.message();
    // Window, registered ncclMemAlloc memory, registered hipMalloc memory,
    // registered virtual memory of the program's own.
    for (const int kind : {0, 1, 2, 3}) {
      const bool window = kind == 0;
      const char* what = kind == 0   ? "window"
                         : kind == 1 ? "registered buffer"
                         : kind == 2 ? "registered hipMalloc buffer"
                                     : "registered virtual-memory buffer";
      WindowMemory<GpuMemory> arena(gpu.device(), gpu.stream(), kSyncTimeoutSec);
      err = arena.open(comm, kArenaBytes, window, kind == 2 ? plainArena : kind == 3 ? vmmArena : nullptr);
      for (int i = 0; i < 2 && err.empty(); ++i) {
        float* x = static_cast<float*>(arena.arena());
        err = check(ncclAllReduce(x, x, 1024, ncclFloat32, ncclSum, comm, gpu.stream()), "ncclAllReduce");
        if (err.empty()) err = gpu.synchronize(comm);
      }
      const Paths before = paths();
      if (err.empty()) err = p2pSweep(comm, rank, nranks, arena);
      if (err.empty()) err = groupSweep(comm, rank, nranks, arena);
      if (err.empty()) err = collSweep(comm, rank, nranks, SweepCounts::kQuick, arena);
      if (!err.empty()) return strCat(what, ": ", err);  // the arena goes with the aborted communicator
      err = arena.close();
      if (!err.empty()) return err;
      const Paths after = paths();
      if (after.ringDirect - before.ringDirect < 10 || after.recvDirect == before.recvDirect ||
          after.ringFifo != before.ringFifo || after.recvFifo != before.recvFifo) {
        return strCat(what, ": ", after.ringDirect - before.ringDirect, " ring collectives and ",
                      after.recvDirect - before.recvDirect, " receives direct, ",
                      after.ringFifo - before.ringFifo, " and ", after.recvFifo - before.recvFifo,
                      " through the FIFO");
      }
    }
    (void)hipFree(plainArena);
    if (Status s = gpuFreeShareable(vmmArena, vmmMapped); !s.ok()) return s.message();
    const int ipc = logLines(logDir, {"IPC, direct writes"});
    const int shared = logLines(logDir, {"registered buffer", "shared with this host's other processes"});
    const int imported = logLines(logDir, {"registered buffer (allocation", "mapped here"});
    const int vmm = logLines(logDir, {"ncclMemAlloc", "(virtual memory"});
    const int lending = logLines(logDir, {"lending descriptors on @braid-fd-"});
    if (ipc < 2 || shared != 3 || imported < 3 || vmm < 2 || lending != 1) {
      return strCat(ipc, " IPC connectors with direct writes, ", shared, " registrations shared, ", imported,
                    " imported, ", vmm, " ncclMemAlloc calls gave virtual memory, ", lending,
                    " descriptor servers");
    }
    return "";
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, env, kQuickTimeoutSec, work), "");
}

// --- (i): ncclCommAbort while a kernel waits for a peer that never comes --------

// Every rank runs one all-reduce (the ring is connected then); rank 0 then
// starts a second one that no other rank joins, so its kernel waits for
// data; then aborts. The abort must return promptly (the figure is
// printed; the bound checked is a hang guard, not a performance goal) and
// the kernel must end, so the stream drains. The other ranks never join and
// abort after rank 0 is done.
// The fault tests' start: a rank on `device` with a non-blocking stream, a
// communicator and a buffer of `count` floats, after one all-reduce every
// rank finished.
struct JoinedRank {
  hipStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  void* buf = nullptr;
  size_t count = 1 << 20;
};
std::string joinWithOneAllReduce(int device, int rank, int nranks, const ncclUniqueId& id, JoinedRank* j) {
  std::string err = hipCheck(hipSetDevice(device), "hipSetDevice");
  if (err.empty()) err = hipCheck(hipStreamCreateWithFlags(&j->stream, hipStreamNonBlocking), "stream");
  if (err.empty()) err = check(ncclCommInitRank(&j->comm, nranks, id, rank), "ncclCommInitRank");
  if (err.empty()) err = hipCheck(hipMalloc(&j->buf, j->count * sizeof(float)), "hipMalloc");
  if (err.empty()) {
    err = check(ncclAllReduce(j->buf, j->buf, j->count, ncclFloat32, ncclSum, j->comm, j->stream),
                "the first ncclAllReduce");
  }
  if (err.empty()) err = hipCheck(hipStreamSynchronize(j->stream), "hipStreamSynchronize");
  return err;
}

// An in-place all-reduce of `count` floats on `comm` where every rank
// puts in its rank + 1: "" if every sum comes out exact.
std::string exactAllReduce(ncclComm_t comm, void* buf, size_t count, hipStream_t stream, const char* what) {
  int rank = 0, nranks = 0;
  std::string err = check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  if (err.empty()) err = check(ncclCommCount(comm, &nranks), "ncclCommCount");
  std::vector<float> h(count, static_cast<float>(rank + 1));
  if (err.empty())
    err = hipCheck(hipMemcpy(buf, h.data(), count * sizeof(float), hipMemcpyHostToDevice), "upload");
  if (err.empty()) err = check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream), what);
  if (err.empty()) err = hipCheck(hipStreamSynchronize(stream), "hipStreamSynchronize");
  if (err.empty())
    err = hipCheck(hipMemcpy(h.data(), buf, count * sizeof(float), hipMemcpyDeviceToHost), "download");
  const float want = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < count && err.empty(); ++i) {
    if (h[i] != want) err = strCat(what, " gave ", h[i], " at ", i, " where ", want, " was expected");
  }
  return err;
}

// The default choice (the one-shot at this size with 2 ranks, Ring with
// more), and the ring's LL128 wait (on GPUs that qualify; elsewhere the
// selector's choice).
class GpuAbort : public ::testing::TestWithParam<ForcedCase> {};

TEST_P(GpuAbort, AbortEndsAKernelWaitingForAMissingPeer) {
  BRAID_NEED_A_GPU(g);
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<std::string> env = kEnv;
  for (const std::vector<std::string>& more : {g.env(), GetParam().env})
    env.insert(env.end(), more.begin(), more.end());
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
  auto out = runRanks(
      g.ranks,
      [&](int rank, int nranks) -> std::string {
        JoinedRank j;
        std::string err = joinWithOneAllReduce(g.deviceOf(rank), rank, nranks, root.id, &j);
        if (!err.empty()) return err;
        auto [stream, comm, buf, count] = j;
        if (rank != 0) {
          std::this_thread::sleep_for(std::chrono::seconds(5));  // rank 0 is done with its abort by then
          return check(ncclCommAbort(comm), "ncclCommAbort (a rank that did not join)");
        }
        err = check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream),
                    "the second ncclAllReduce");
        if (!err.empty()) return err;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (gpusweep::streamQuery(stream) != gpusweep::kNotReady) {
          return "the all-reduce ended without its peers: it should still be waiting";
        }
        const auto t0 = Clock::now();
        err = check(ncclCommAbort(comm), "ncclCommAbort");
        const auto t1 = Clock::now();
        hipError_t e = gpusweep::kNotReady;
        while ((e = gpusweep::streamQuery(stream)) == gpusweep::kNotReady && seconds(t1, Clock::now()) < 30) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        const auto t2 = Clock::now();
        std::fprintf(stderr,
                     "[ abort ] ncclCommAbort returned in %.1f ms; the stream drained %.1f ms later\n",
                     1e3 * seconds(t0, t1), 1e3 * seconds(t1, t2));
        if (!err.empty()) return err;
        if (e == gpusweep::kNotReady) return "the kernel still ran 30 s after ncclCommAbort";
        if (seconds(t0, t1) > 10) return strCat("ncclCommAbort took ", seconds(t0, t1), " s (a hang?)");
        (void)hipFree(buf);
        return hipCheck(hipStreamDestroy(stream), "hipStreamDestroy");
      },
      90, env);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Waits, GpuAbort,
                         ::testing::Values(ForcedCase{"Default", {}},
                                           ForcedCase{"RingLL128", {"NCCL_ALGO=Ring", "NCCL_PROTO=LL128"}}),
                         [](const ::testing::TestParamInfo<ForcedCase>& p) {
                           return std::string(p.param.name);
                         });

// ncclCommRevoke while rank 0's all-reduce waits for rank 1, which never
// joins: the kernel must end (the stream drains) within seconds, and the
// communicator be quiescent (ncclSuccess) and refuse an all-reduce. Rank 1
// revokes its idle communicator; then both split theirs and the child's
// all-reduce must be exact.
TEST(GpuRevoke, ReleasesAKernelWaitingForAPeerThenSplits) {
  BRAID_NEED_A_GPU(g);
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> env = kEnv;
  for (const std::string& e : g.env()) env.push_back(e);
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
  auto out = runRanks(
      g.ranks,
      [&](int rank, int nranks) -> std::string {
        JoinedRank j;
        std::string err = joinWithOneAllReduce(g.deviceOf(rank), rank, nranks, root.id, &j);
        if (!err.empty()) return err;
        auto [stream, comm, buf, count] = j;
        if (rank == 0) {
          err = check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream),
                      "the lone all-reduce");
          if (!err.empty()) return err;
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          if (gpusweep::streamQuery(stream) != gpusweep::kNotReady) {
            return "the all-reduce ended without its peers: it should still be waiting";
          }
          const auto t0 = Clock::now();
          err = check(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
          if (!err.empty()) return err;
          hipError_t e = gpusweep::kNotReady;
          while ((e = gpusweep::streamQuery(stream)) == gpusweep::kNotReady &&
                 std::chrono::duration<double>(Clock::now() - t0).count() < 30) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
          std::fprintf(stderr, "[ revoke ] the waiting kernel ended %.3f s after ncclCommRevoke\n", secs);
          if (e == gpusweep::kNotReady) return "the kernel still ran 30 s after ncclCommRevoke";
          err = hipCheck(e, "the revoked stream");
          if (!err.empty()) return err;
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(2));  // rank 0 has revoked by then
          err = check(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "ncclCommRevoke (idle)");
          if (!err.empty()) return err;
        }
        ncclResult_t async = ncclInternalError;
        if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) {
          return strCat("after the revoke the communicator is ", ncclGetErrorString(async), ": ",
                        ncclGetLastError(comm));
        }
        if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream) != ncclInvalidUsage) {
          return "a revoked communicator took an all-reduce";
        }
        ncclComm_t child = nullptr;
        err = check(ncclCommSplit(comm, 0, rank, &child, nullptr), "splitting the revoked communicator");
        if (err.empty()) err = exactAllReduce(child, buf, count, stream, "the child's all-reduce");
        if (child != nullptr) err += check(ncclCommDestroy(child), "destroying the child");
        err += check(ncclCommDestroy(comm), "destroying the revoked communicator");
        (void)hipFree(buf);
        return err + hipCheck(hipStreamDestroy(stream), "hipStreamDestroy");
      },
      90, env);
  EXPECT_EQ(describeFailures(out), "");
}

// --- (j): ranks on two hosts (host ids): GPU connectors through the net proxy ----

// Two "hosts" on this machine (BRAID_HOSTID), two ranks each: connectors
// between the hosts go through the socket Net on loopback and host memory
// the GPUs map; ranks of one host keep p2p. With one GPU its four ranks
// share it (two per host). Default choice, each protocol forced on rings
// and trees, small buffers (many steps per call), and point-to-point.
struct MultiHostCase {
  const char* name;
  std::vector<std::string> env;
  bool p2p = false;
  const char* net = "Socket";  // the Net every rank must use to the other host
  bool cyclic = false;         // rank r on host r % 2 (mpirun --map-by node), else r / 2
};
void PrintTo(const MultiHostCase& c, std::ostream* os) {
  *os << c.name;
}

class GpuMultiHost : public ::testing::TestWithParam<MultiHostCase> {};

TEST_P(GpuMultiHost, SweepAcrossTwoHostIds) {
  BRAID_NEED_A_GPU(one);
  const GpuRanks g{4, std::min(one.gpus, 4)};
  std::vector<std::string> env = {"NCCL_SOCKET_IFNAME=lo", "NCCL_NET=Socket"};  // the case may override
  env.insert(env.end(), GetParam().env.begin(), GetParam().env.end());
  const MultiHostCase c = GetParam();
  GpuWork work = [c](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    // The rank of the other host in this rank's position (a silent fallback
    // to another Net must not pass).
    const int far = (rank + (c.cyclic ? 1 : 2)) % nranks;
    auto* internal = static_cast<Communicator*>(comm);
    const std::string net = internal->connectors().transportName(far);
    if (net != c.net) return strCat("rank ", far, " is reached through ", net, ", not ", c.net);
    // Rings keep each host's ranks together: round-robin placement gives
    // the ring 0 2 1 3, which the kernels must run by ring position.
    const std::vector<int> want = c.cyclic ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3};
    for (const std::vector<int>& ring : internal->schedule().rings) {
      if (ring != want) return strCat("a ring of the schedule is ", ringText(ring), ", not ", ringText(want));
    }
    return c.p2p ? p2pSweep(comm, rank, nranks, memory)
                 : collSweep(comm, rank, nranks, SweepCounts::kQuick, memory);
  };
  EXPECT_EQ(runPerGpu(g, StreamKind::kNonBlocking, env, kFullTimeoutSec, work,
                      [c](int rank) { return strCat("gpuhost", c.cyclic ? rank % 2 : rank / 2); }),
            "");
}
INSTANTIATE_TEST_SUITE_P(
    Net, GpuMultiHost,
    ::testing::Values(MultiHostCase{"Default", {}},
                      MultiHostCase{"RingLL", {"NCCL_ALGO=Ring", "NCCL_PROTO=LL"}},
                      MultiHostCase{"TreeSimple", {"NCCL_ALGO=Tree", "NCCL_PROTO=Simple"}},
                      MultiHostCase{"SmallBuffers", {"BRAID_BUFFSIZE=64K", "NCCL_ALGO=Ring"}},
                      MultiHostCase{"PointToPoint", {}, true},
                      MultiHostCase{"CyclicRing", {"NCCL_ALGO=Ring"}, false, "Socket", true}
#if defined(BRAID_SOFTVERBS_LIB)
                      ,
                      // The verbs Net on the software verbs device (tests/softverbs).
                      MultiHostCase{"IbSoftVerbs",
                                    {"NCCL_NET=IB", "BRAID_IB_VERBS_TABLE=" BRAID_SOFTVERBS_LIB,
                                     "BRAID_SOFTVERBS_IFNAME=lo"},
                                    false,
                                    "IB"}
#endif
                      ),
    [](const ::testing::TestParamInfo<MultiHostCase>& p) { return std::string(p.param.name); });

// Rank 1 (the other host) dies abruptly after a first all-reduce; rank 0's
// second all-reduce waits for it. The net connector's failure must end
// rank 0's kernel and reach ncclCommGetAsyncError naming rank 1, long
// before the stall timeout (60 s here); the time is printed.
TEST(GpuMultiHostFault, ARankOfTheOtherHostDiesMidCollective) {
  BRAID_NEED_A_GPU(g);
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> env = kEnv;
  env.insert(env.end(), {"NCCL_SOCKET_IFNAME=lo", "NCCL_NET=Socket"});
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
  auto out = runRanks(
      2,
      [&](int rank, int nranks) -> std::string {
        setenv("BRAID_HOSTID", strCat("gpuhost", rank).c_str(), 1);
        JoinedRank j;
        std::string err = joinWithOneAllReduce(rank % g.gpus, rank, nranks, root.id, &j);
        if (!err.empty()) return err;
        auto [stream, comm, buf, count] = j;
        if (rank == 1) _exit(3);  // abruptly: no destroy, the kernel's sockets just close
        const auto t0 = Clock::now();
        err = check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream),
                    "the second ncclAllReduce");
        ncclResult_t async = ncclSuccess;
        while (async == ncclSuccess && Clock::now() - t0 < std::chrono::seconds(40)) {
          if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return "ncclCommGetAsyncError failed";
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const std::string last = ncclGetLastError(comm);
        std::fprintf(stderr, "[ fault ] rank 0 got %s after %.2f s: %s\n", ncclGetErrorString(async), secs,
                     last.c_str());
        ncclCommAbort(comm);
        if (!err.empty() && err.find("rank 1") == std::string::npos) return err;
        if (async == ncclSuccess) return "no error 40 s after the other host's rank died (a hang?)";
        if (async != ncclRemoteError && async != ncclSystemError) {
          return strCat("the error is ", ncclGetErrorString(async), ", not a remote or system error: ", last);
        }
        if (last.find("rank 1") == std::string::npos) return "the error does not name rank 1: " + last;
        return "";
      },
      120, env);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].report, "");
}

// --- (j2): a rank of this host dies -------------------------------------------

// Three ranks (with one GPU, all three share it). Rank 2 starts the second
// collective at once and is killed 0.5 s later, while its kernel waits for
// the others, which start theirs after 1 s. (An all-to-all's rank 2 would
// have sent its whole part by then, leaving the survivors nothing to wait
// for: it never starts the second one and is killed 0.5 s into theirs.)
// The host watches its peers' processes: every survivor whose kernel waits
// on rank 2 itself -- all of them in a one-shot all-reduce and an
// all-to-all; in a ring, at least the rank after rank 2 on channel 0's
// ring -- must end with ncclRemoteError "the process of rank 2 ended ..."
// within seconds (the stall timeout is 60 s), after taking what rank 2
// wrote before it died; the time is printed. A survivor that waits only on
// another survivor has no error yet. Then the survivors shrink the
// communicator without rank 2 (NCCL_SHRINK_ABORT ends a kernel still
// waiting) and the shrunk all-reduce must be exact: the death left their
// GPU contexts working.
struct PeerDeathCase {
  const char* name;
  std::vector<std::string> env;
  bool allToAll = false;  // else an all-reduce
  bool ring = false;      // only the rank after rank 2 on the ring surely waits on it
};
void PrintTo(const PeerDeathCase& c, std::ostream* os) {
  *os << c.name;
}

class GpuPeerDeath : public ::testing::TestWithParam<PeerDeathCase> {};

TEST_P(GpuPeerDeath, ARankOfThisHostDiesMidCollective) {
  BRAID_NEED_A_GPU(one);
  using Clock = std::chrono::steady_clock;
  const PeerDeathCase c = GetParam();
  const GpuRanks g{3, std::min(one.gpus, 3)};
  std::vector<std::string> env = kEnv;
  for (const std::vector<std::string>& more : {g.env(), c.env})
    env.insert(env.end(), more.begin(), more.end());
  constexpr int kDead = 2;
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
  auto out = runRanks(
      g.ranks,
      [&](int rank, int nranks) -> std::string {
        JoinedRank j;
        j.count = size_t{16} << 20;  // 64 MiB: more than a ring's connectors hold
        std::string err = joinWithOneAllReduce(g.deviceOf(rank), rank, nranks, root.id, &j);
        if (!err.empty()) return err;
        // Plain variables, not a structured binding: the lambda below captures them.
        hipStream_t stream = j.stream;
        ncclComm_t comm = j.comm;
        void* buf = j.buf;
        const size_t count = j.count;
        void* recv = buf;
        if (c.allToAll) err = hipCheck(hipMalloc(&recv, count * sizeof(float)), "hipMalloc");
        if (!err.empty()) return err;
        auto second = [&] {
          return c.allToAll
                     ? ncclAlltoAll(buf, recv, count / static_cast<size_t>(nranks), ncclFloat32, comm, stream)
                     : ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream);
        };
        if (c.allToAll) {  // connects the peer channels, so the kernels are what wait below
          err = check(second(), "the first all-to-all");
          if (err.empty()) err = hipCheck(hipStreamSynchronize(stream), "hipStreamSynchronize");
          if (!err.empty()) return err;
        }
        if (rank == kDead) {
          if (!c.allToAll) err = check(second(), "rank 2's second collective");
          if (!err.empty()) return err;
          std::this_thread::sleep_for(std::chrono::milliseconds(c.allToAll ? 1500 : 500));
          raise(SIGKILL);
        }
        // Must this rank's kernel wait on rank 2?
        const std::vector<int>& ring = static_cast<Communicator*>(comm)->schedule().rings[0];
        const size_t at = static_cast<size_t>(std::find(ring.begin(), ring.end(), kDead) - ring.begin());
        const bool waitsOnIt = !c.ring || ring[(at + 1) % ring.size()] == rank;
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const auto t0 = Clock::now();
        err = check(second(), "the second collective");
        if (!err.empty()) return err;
        ncclResult_t async = ncclSuccess;
        while (async == ncclSuccess && Clock::now() - t0 < std::chrono::seconds(10)) {
          if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return "ncclCommGetAsyncError failed";
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const std::string last = async == ncclSuccess ? "" : ncclGetLastError(comm);
        const hipError_t state = gpusweep::streamQuery(stream);
        std::fprintf(stderr, "[ peer death ] rank %d (%s): %s after %.3f s, its stream: %s: %s\n", rank,
                     waitsOnIt ? "waits on rank 2" : "may wait on a survivor", ncclGetErrorString(async),
                     secs, state == gpusweep::kNotReady ? "still running" : hipGetErrorString(state),
                     last.c_str());
        if (async == ncclSuccess && waitsOnIt) {
          err = "no error 10 s after rank 2 died, while waiting on it (the stall timeout is 60 s)";
        } else if (async != ncclSuccess && (async != ncclRemoteError ||
                                            last.find("the process of rank 2 ended") == std::string::npos)) {
          err = strCat("the error is ", ncclGetErrorString(async), " (", last,
                       "), not ncclRemoteError naming the end of rank 2's process");
        }
        // The job goes on without rank 2.
        int exclude[] = {kDead};
        ncclComm_t small = nullptr;
        std::string shrunk =
            check(ncclCommShrink(comm, exclude, 1, &small, nullptr, NCCL_SHRINK_ABORT), "ncclCommShrink");
        if (shrunk.empty())
          shrunk = exactAllReduce(small, buf, count, stream, "the shrunk communicator's all-reduce");
        err += shrunk;
        if (small != nullptr) err += check(ncclCommDestroy(small), "destroying the shrunk communicator");
        ncclCommAbort(comm);
        if (recv != buf) (void)hipFree(recv);
        (void)hipFree(buf);
        return err + hipCheck(hipStreamDestroy(stream), "hipStreamDestroy");
      },
      120, env);
  ASSERT_EQ(out.size(), 3u);
  for (int r = 0; r < kDead; ++r) EXPECT_EQ(out[static_cast<size_t>(r)].report, "") << "rank " << r;
  EXPECT_FALSE(out[kDead].exited) << "rank 2 was to be killed";
}
INSTANTIATE_TEST_SUITE_P(
    Waits, GpuPeerDeath,
    ::testing::Values(PeerDeathCase{"OneShot", {"NCCL_ALGO=Direct"}},
                      PeerDeathCase{"RingSimple", {"NCCL_ALGO=Ring", "NCCL_PROTO=Simple"}, false, true},
                      PeerDeathCase{"RingLL", {"NCCL_ALGO=Ring", "NCCL_PROTO=LL"}, false, true},
                      PeerDeathCase{"RingLL128", {"NCCL_ALGO=Ring", "NCCL_PROTO=LL128"}, false, true},
                      PeerDeathCase{"AllToAll", {}, true}),
    [](const ::testing::TestParamInfo<PeerDeathCase>& p) { return std::string(p.param.name); });

// --- (k): a send and its receive of different sizes ---------------------------

// Rank 0 sends `sent` floats to rank 1, whose receive is for `received`.
// With `sameChannels` both sizes get the same number of channels (one per
// 512 KiB), so their connectors match and the sizes' check runs; otherwise
// connecting fails first (a channel only one rank asks for).
struct SizeMismatch {
  const char* name;
  size_t sent, received;
  bool sameChannels = true;
};
void PrintTo(const SizeMismatch& m, std::ostream* os) {
  *os << m.name;
}

// One rank's outcome after its call: waits for its stream (bounded), then
// gives the communicator's result as a number, a space and
// ncclGetLastError; a wait that timed out without an error is reported
// as such (not a number).
std::string outcomeOf(ncclResult_t result, ncclComm_t comm, GpuMemory& memory) {
  if (result == ncclSuccess) {
    const std::string waited = memory.synchronize(comm);
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
    if (result == ncclSuccess && !waited.empty()) return "no error, but " + waited;
  }
  return strCat(static_cast<int>(result), " ", result == ncclSuccess ? "" : ncclGetLastError(comm));
}

// "" if the pair's outcomes are what a mismatch must give: the rank that
// sees it (the receiver on a FIFO, the sender of a direct write) fails with
// ncclInvalidUsage naming the other and the sizes; the other finishes (its
// steps fit the FIFO) or fails, naming its peer, at the stall timeout. On
// connectors that do not match, both fail naming the other. No rank hangs,
// crashes or takes shifted data as its result.
std::string judgeMismatch(const SizeMismatch& m, const std::vector<std::string>& outcomes) {
  bool seen = false, failed = false;
  for (int r = 0; r < 2; ++r) {
    const std::string& o = outcomes[static_cast<size_t>(r)];
    const size_t space = o.find(' ');
    if (o.empty() || !std::isdigit(static_cast<unsigned char>(o[0])) || space == std::string::npos) {
      return strCat("rank ", r, ": ", o);
    }
    const auto result = static_cast<ncclResult_t>(std::atoi(o.substr(0, space).c_str()));
    const std::string text = o.substr(space + 1);
    const bool namesPeer = text.find(strCat("rank ", 1 - r)) != std::string::npos;
    if (result == ncclSuccess) continue;
    failed = true;
    if (result == ncclInvalidUsage && namesPeer && text.find("differs in size") != std::string::npos) {
      seen = true;
    } else if (result != ncclRemoteError || !namesPeer) {
      return strCat("rank ", r, " got ", ncclGetErrorString(result), ": ", text);
    }
  }
  if (!failed || (m.sameChannels && !seen)) {
    return "neither rank reported the sizes' mismatch (ncclInvalidUsage): " + outcomes[0] + " / " +
           outcomes[1];
  }
  return "";
}

// Rank `rank` of the pair: the send or the receive, and its outcome.
std::string mismatchedCall(const SizeMismatch& m, int rank, ncclComm_t comm, GpuMemory& memory, void* buf) {
  const ncclResult_t r = rank == 0 ? ncclSend(buf, m.sent, ncclFloat32, 1, comm, memory.stream())
                                   : ncclRecv(buf, m.received, ncclFloat32, 0, comm, memory.stream());
  return outcomeOf(r, comm, memory);
}

class GpuP2pSizes : public ::testing::TestWithParam<SizeMismatch> {};
// Waits for a peer end within seconds.
const std::vector<std::string> kMismatchEnv = {"BRAID_STALL_TIMEOUT=3", "BRAID_BOOTSTRAP_TIMEOUT=5"};

// One process per rank, both on one host (connectors through IPC) and on
// two host ids (through the net proxy, which records the sizes it delivers).
TEST_P(GpuP2pSizes, MismatchFailsNamingThePeerAcrossProcesses) {
  BRAID_NEED_A_GPU(g);
  const SizeMismatch m = GetParam();
  for (const bool twoHosts : {false, true}) {
    std::vector<std::string> env = kEnv;
    env.insert(env.end(), kMismatchEnv.begin(), kMismatchEnv.end());
    env.insert(env.end(), {"NCCL_SOCKET_IFNAME=lo", "NCCL_NET=Socket"});
    for (const std::string& e : g.env()) env.push_back(e);
    RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
    auto out = runRanks(
        2,
        [&](int rank, int nranks) -> std::string {
          if (twoHosts) setenv("BRAID_HOSTID", strCat("gpuhost", rank).c_str(), 1);
          std::string err = hipCheck(hipSetDevice(g.deviceOf(rank)), "hipSetDevice");
          hipStream_t stream = nullptr;
          void* buf = nullptr;
          ncclComm_t comm = nullptr;
          if (err.empty()) err = hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "stream");
          if (err.empty()) err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "ncclCommInitRank");
          const size_t most = std::max(m.sent, m.received);
          if (err.empty()) err = hipCheck(hipMalloc(&buf, most * sizeof(float)), "hipMalloc");
          if (!err.empty()) return err;
          GpuMemory memory(g.deviceOf(rank), stream, kSyncTimeoutSec);
          const std::string outcome = mismatchedCall(m, rank, comm, memory, buf);
          ncclCommAbort(comm);  // it may have failed
          return outcome;
        },
        120, env);
    std::vector<std::string> outcomes;
    for (const RankOutcome& o : out) outcomes.push_back(o.exited ? o.report : "died or timed out");
    EXPECT_EQ(judgeMismatch(m, outcomes), "") << (twoHosts ? "two host ids" : "one host");
  }
}

// One process, one thread driving both ranks in a group: the FIFO (small)
// and direct writes (large: the sender sees the receive's size in the
// mailbox).
TEST_P(GpuP2pSizes, MismatchFailsNamingThePeerInOneProcess) {
  BRAID_NEED_A_GPU(g);
  const SizeMismatch m = GetParam();
  auto body = [g, m]() -> std::string {
    std::vector<ncclComm_t> comms;
    std::string err = initAll(g, &comms);
    if (!err.empty()) return err;
    std::vector<std::unique_ptr<GpuMemory>> mems;
    std::vector<void*> bufs(2, nullptr);
    for (int r = 0; r < 2 && err.empty(); ++r) {
      hipStream_t stream = nullptr;
      err = hipCheck(hipSetDevice(g.deviceOf(r)), "hipSetDevice");
      if (err.empty()) err = hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "stream");
      if (err.empty())
        err = hipCheck(hipMalloc(&bufs[r], std::max(m.sent, m.received) * sizeof(float)), "hipMalloc");
      mems.push_back(std::make_unique<GpuMemory>(g.deviceOf(r), stream, kSyncTimeoutSec));
    }
    if (!err.empty()) return err + endAll(comms, true);
    std::vector<std::string> outcomes(2);
    ncclResult_t results[2] = {ncclSuccess, ncclSuccess};
    ncclGroupStart();
    results[0] = ncclSend(bufs[0], m.sent, ncclFloat32, 1, comms[0], mems[0]->stream());
    results[1] = ncclRecv(bufs[1], m.received, ncclFloat32, 0, comms[1], mems[1]->stream());
    const ncclResult_t group = ncclGroupEnd();
    for (int r = 0; r < 2; ++r)
      outcomes[r] = outcomeOf(results[r] != ncclSuccess ? results[r] : group, comms[r], *mems[r]);
    return judgeMismatch(m, outcomes) + endAll(comms, true);
  };
  EXPECT_EQ(inOneChild(g, body, kQuickTimeoutSec, kMismatchEnv), "");
}
// 4 MiB against 4000 bytes less: 8 channels each, the sender's parts
// large enough for direct writes in one process, the receiver's not.
INSTANTIATE_TEST_SUITE_P(Sizes, GpuP2pSizes,
                         ::testing::Values(SizeMismatch{"OneStepSendSmaller", 1000, 1024},
                                           SizeMismatch{"ManyStepsSendLarger", 1 << 20, (1 << 20) - 1000},
                                           SizeMismatch{"OtherChannelCount", (1 << 20) + 3, 1 << 20, false}),
                         [](const ::testing::TestParamInfo<SizeMismatch>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace braid::test
