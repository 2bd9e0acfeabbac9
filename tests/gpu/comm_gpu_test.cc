// Communicators on the GPU backend: one forked process per GPU, each bound
// to its own device; the peer info carries distinct bus ids; two ranks on one
// GPU are refused with a message. Skips without two GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/comm.h"
#include "harness.h"
#include "platform/gpu.h"
#include "platform/gpu_runtime.h"

namespace braid::test {
namespace {

// Counted in a forked child: the GPU runtime must not be initialized in the
// parent, or the ranks forked after it could not use the GPU.
int gpuCount() {
  static int count = [] {
    auto out = runRanks(1, [](int, int) {
      int n = 0;
      return std::to_string(gpuDeviceCount(&n).ok() ? n : 0);
    }, 60);
    return std::atoi(out[0].report.c_str());
  }();
  return count;
}

TEST(GpuComm, OneProcessPerGpu) {
  int n = gpuCount();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n;
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});  // the id maker needs no GPU
  auto out = runRanks(n, [&](int rank, int nranks) -> std::string {
    if (hipSetDevice(rank) != hipSuccess) return "hipSetDevice";
    ncclComm_t comm = nullptr;
    std::string err = check(ncclCommInitRank(&comm, nranks, root.id, rank), "init");
    if (!err.empty()) return err;
    int dev = -1;
    ncclCommCuDevice(comm, &dev);
    if (dev != rank) return "ncclCommCuDevice gave " + std::to_string(dev);
    auto* c = static_cast<Communicator*>(comm);
    if (c->backend() != Backend::Gpu) return "not on the GPU backend";
    for (int r = 0; r < nranks; ++r) {
      for (int q = r + 1; q < nranks; ++q) {
        if (std::strcmp(c->peers()[r].busId, c->peers()[q].busId) == 0) return "bus ids not distinct";
      }
      if (c->peers()[r].busId[0] == '\0') return "empty bus id";
    }
    return check(ncclCommDestroy(comm), "destroy");
  }, 60, {"BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

TEST(GpuComm, TwoRanksOnOneGpuAreRefused) {
  if (gpuCount() < 1) GTEST_SKIP() << "needs a GPU";
  RootProcess root = startRootProcess({"BRAID_BACKEND=host"});
  auto out = runRanks(2, [&](int rank, int nranks) -> std::string {
    if (hipSetDevice(0) != hipSuccess) return "hipSetDevice";
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, root.id, rank);
    std::string text = ncclGetLastError(nullptr);
    if (r != ncclInvalidUsage || text.find("same GPU") == std::string::npos) return "got: " + text;
    return "";
  }, 60, {"BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

TEST(GpuComm, InitAllBindsOneGpuEach) {
  int n = gpuCount();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < n; ++i) {
    int dev = -1;
    ncclCommCuDevice(comms[static_cast<size_t>(i)], &dev);
    EXPECT_EQ(dev, i);
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
}  // namespace braid::test
