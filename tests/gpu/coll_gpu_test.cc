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
//   forced through the environment.
// Every variant runs in forked children: the GPU runtime is never
// initialized in the gtest process (ranks forked after it could not use the
// GPU). Skips cleanly with fewer than two GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "braid.h"
#include "coll_sweep.h"
#include "gpu_sweep_memory.h"
#include "harness.h"
#include "platform/gpu.h"
#include "platform/gpu_runtime.h"
#include "util/strings.h"

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

#define BRAID_NEED_TWO_GPUS(n) \
  const int n = gpuCount();    \
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n << " (or no driver)"

enum class StreamKind { kNonBlocking, kNull };

std::string hipCheck(hipError_t e, const char* what) {
  return e == hipSuccess ? "" : gpusweep::gpuError(what, e);
}

// What one rank runs once its communicator is up: "" on success.
using GpuWork = std::function<std::string(ncclComm_t comm, int rank, int nranks, SweepMemory& memory)>;

// One rank's process: binds GPU `rank`, makes the stream, joins, runs
// `work`, destroys the communicator (aborts it after a failure: peers may
// still be in a collective) and the stream.
std::string rankOnGpu(const ncclUniqueId& id, int rank, int nranks, StreamKind kind, const GpuWork& work) {
  std::string err = hipCheck(hipSetDevice(rank), "hipSetDevice");
  hipStream_t stream = nullptr;
  if (err.empty() && kind == StreamKind::kNonBlocking) {
    err = hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
  }
  if (!err.empty()) return err;
  ncclComm_t comm = nullptr;
  err = check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  if (!err.empty()) return err;
  GpuMemory memory(rank, stream, kSyncTimeoutSec);
  err = work(comm, rank, nranks, memory);
  if (!err.empty()) {
    ncclCommAbort(comm);
    return err;  // the stream is left: it may hold work that never ends
  }
  err = check(ncclCommDestroy(comm), "ncclCommDestroy");
  if (stream != nullptr) err += hipCheck(hipStreamDestroy(stream), "hipStreamDestroy");
  return err;
}

// `work` in one forked process per GPU; `env` on top of kEnv. Returns the failures.
std::string runPerGpu(int n, StreamKind kind, const std::vector<std::string>& extraEnv, double timeoutSec,
                      const GpuWork& work) {
  std::vector<std::string> env = kEnv;
  env.insert(env.end(), extraEnv.begin(), extraEnv.end());
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});  // the id maker needs no GPU
  auto out = runRanks(
      n, [&](int rank, int nranks) { return rankOnGpu(root.id, rank, nranks, kind, work); }, timeoutSec, env);
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
  BRAID_NEED_TWO_GPUS(n);
  EXPECT_EQ(runPerGpu(n, StreamKind::kNonBlocking, {}, kFullTimeoutSec, sweepWork(SweepCounts::kFull)), "");
}

// The null stream: the legacy default stream of each device.
TEST(GpuCollSweep, OneProcessPerGpuNullStream) {
  BRAID_NEED_TWO_GPUS(n);
  EXPECT_EQ(runPerGpu(n, StreamKind::kNull, {}, kQuickTimeoutSec, sweepWork(SweepCounts::kQuick)), "");
}

// --- (c): one process, ncclCommInitAll, one thread per GPU ----------------------

// Runs `body` in one forked child (so the GPU runtime starts there) with kEnv.
std::string inOneChild(const std::function<std::string()>& body, double timeoutSec) {
  auto out = runRanks(
      1, [&](int, int) { return body(); }, timeoutSec, kEnv);
  return describeFailures(out);
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
  BRAID_NEED_TWO_GPUS(n);
  auto body = [n]() -> std::string {
    std::vector<ncclComm_t> comms(static_cast<size_t>(n));
    std::string err = check(ncclCommInitAll(comms.data(), n, nullptr), "ncclCommInitAll");
    if (!err.empty()) return err;
    std::vector<std::string> reports(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        std::string& report = reports[static_cast<size_t>(r)];
        hipStream_t stream = nullptr;
        report = hipCheck(hipSetDevice(r), "hipSetDevice");
        if (report.empty()) {
          report =
              hipCheck(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
        }
        if (!report.empty()) return;
        GpuMemory memory(r, stream, kSyncTimeoutSec);
        report = collSweep(comms[static_cast<size_t>(r)], r, n, SweepCounts::kQuick, memory);
        if (!memory.wedged()) hipStreamDestroy(stream);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      if (!reports[static_cast<size_t>(r)].empty())
        err += strCat("thread ", r, ": ", reports[static_cast<size_t>(r)]);
    }
    return err + endAll(comms, !err.empty());
  };
  EXPECT_EQ(inOneChild(body, kQuickTimeoutSec), "");
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
    hipSetDevice(0);
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

TEST(GpuCollGroup, OneThreadDrivesAllGpus) {
  BRAID_NEED_TWO_GPUS(n);
  auto body = [n]() -> std::string {
    std::vector<ncclComm_t> comms(static_cast<size_t>(n));
    std::string err = check(ncclCommInitAll(comms.data(), n, nullptr), "ncclCommInitAll");
    if (!err.empty()) return err;
    std::vector<hipStream_t> streams(static_cast<size_t>(n), nullptr);
    std::vector<std::unique_ptr<GpuMemory>> mems;
    for (int r = 0; r < n && err.empty(); ++r) {
      err = hipCheck(hipSetDevice(r), "hipSetDevice");
      if (err.empty()) {
        err = hipCheck(hipStreamCreateWithFlags(&streams[static_cast<size_t>(r)], hipStreamNonBlocking),
                       "hipStreamCreateWithFlags");
      }
      mems.push_back(std::make_unique<GpuMemory>(r, streams[static_cast<size_t>(r)], kSyncTimeoutSec));
    }
    if (err.empty()) err = groupChecks(comms, mems);
    bool wedged = false;
    for (auto& m : mems) wedged = wedged || m->wedged();
    for (int r = 0; r < n && !wedged; ++r) {
      if (streams[static_cast<size_t>(r)] != nullptr) hipStreamDestroy(streams[static_cast<size_t>(r)]);
    }
    return err + endAll(comms, !err.empty());
  };
  EXPECT_EQ(inOneChild(body, kQuickTimeoutSec), "");
}

// --- (e): teams split from a communicator ---------------------------------------

class GpuCollSplit : public ::testing::TestWithParam<SplitShape> {};

TEST_P(GpuCollSplit, SweepOnEachTeam) {
  BRAID_NEED_TWO_GPUS(n);
  const SplitShape shape = GetParam();
  auto work = [shape](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return splitSweep(comm, rank, nranks, shape, SweepCounts::kQuick, memory);
  };
  EXPECT_EQ(runPerGpu(n, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, work), "");
}
INSTANTIATE_TEST_SUITE_P(Shapes, GpuCollSplit,
                         ::testing::Values(SplitShape::kReversed, SplitShape::kOddEven,
                                           SplitShape::kLeaveLastOut),
                         [](const ::testing::TestParamInfo<SplitShape>& p) {
                           return std::string(splitShapeName(p.param));
                         });

// --- (f): point-to-point and the collectives made of it -------------------------

TEST(GpuP2p, SendRecvAllToAllGatherScatter) {
  BRAID_NEED_TWO_GPUS(n);
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return p2pSweep(comm, rank, nranks, memory);
  };
  EXPECT_EQ(runPerGpu(n, StreamKind::kNonBlocking, {}, kQuickTimeoutSec, work), "");
}

TEST(GpuP2p, SendRecvAllToAllGatherScatterNullStream) {
  BRAID_NEED_TWO_GPUS(n);
  auto work = [](ncclComm_t comm, int rank, int nranks, SweepMemory& memory) {
    return p2pSweep(comm, rank, nranks, memory);
  };
  EXPECT_EQ(runPerGpu(n, StreamKind::kNull, {}, kQuickTimeoutSec, work), "");
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
  BRAID_NEED_TWO_GPUS(n);
  EXPECT_EQ(runPerGpu(n, StreamKind::kNonBlocking, GetParam().env, kQuickTimeoutSec,
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

}  // namespace
}  // namespace braid::test
