// Communicators on the GPU backend: one forked process per GPU, each bound
// to its own device; the peer info carries distinct bus ids; two ranks on one
// GPU are refused with a message; buffer registration. Skips without the
// GPUs a test needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

// ncclCommRegister on a GPU communicator: memory of its GPU (ncclMemAlloc or
// hipMalloc) registers, host memory and another GPU's memory are refused
// naming the argument, a collective on registered buffers is correct, and
// a registration left at destroy is released.
TEST(GpuComm, RegisterBuffersOfItsGpu) {
  const int n = gpuCount();
  if (n < 1) GTEST_SKIP() << "needs a GPU";
  auto out = runRanks(
      1,
      [&](int, int) -> std::string {
        if (hipSetDevice(0) != hipSuccess) return "hipSetDevice";
        ncclComm_t comm = nullptr;
        std::string err = check(ncclCommInitAll(&comm, 1, nullptr), "init");
        if (!err.empty()) return err;
        const size_t count = 1000;
        void* a = nullptr;
        void* b = nullptr;
        err = check(ncclMemAlloc(&a, count * sizeof(float)), "ncclMemAlloc");
        if (err.empty() && hipMalloc(&b, count * sizeof(float)) != hipSuccess) err = "hipMalloc";
        if (!err.empty()) return err;
        void* ha = nullptr;
        void* hb = nullptr;
        err = check(ncclCommRegister(comm, a, count * sizeof(float), &ha), "registering ncclMemAlloc memory");
        if (err.empty())
          err = check(ncclCommRegister(comm, b, count * sizeof(float), &hb), "registering hipMalloc memory");
        if (!err.empty()) return err;
        std::vector<float> host(count);
        for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(i) * 0.5f;
        void* hh = nullptr;
        if (ncclCommRegister(comm, host.data(), count * sizeof(float), &hh) != ncclInvalidArgument ||
            std::string(ncclGetLastError(comm)).find("not GPU memory") == std::string::npos) {
          return "host memory was not refused: " + std::string(ncclGetLastError(comm));
        }
        if (n >= 2) {
          void* other = nullptr;
          (void)hipSetDevice(1);
          if (hipMalloc(&other, 256) != hipSuccess) return "hipMalloc on GPU 1";
          (void)hipSetDevice(0);
          if (ncclCommRegister(comm, other, 256, &hh) != ncclInvalidArgument ||
              std::string(ncclGetLastError(comm)).find("memory of GPU 1") == std::string::npos) {
            return "GPU 1's memory was not refused: " + std::string(ncclGetLastError(comm));
          }
          (void)hipFree(other);
        }
        if (hipMemcpy(a, host.data(), count * sizeof(float), hipMemcpyHostToDevice) != hipSuccess)
          return "copy in";
        err = check(ncclAllReduce(a, b, count, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce");
        if (err.empty() && hipDeviceSynchronize() != hipSuccess) err = "synchronize";
        std::vector<float> got(count);
        if (err.empty() &&
            hipMemcpy(got.data(), b, count * sizeof(float), hipMemcpyDeviceToHost) != hipSuccess) {
          err = "copy out";
        }
        if (!err.empty()) return err;
        if (got != host) return "the all-reduce on registered buffers gave wrong values";
        // A symmetric window on ncclMemAlloc memory: checked like a buffer
        // (host memory refused), and a collective into it is right.
        ncclWindow_t win = nullptr, bad = nullptr;
        if (ncclCommWindowRegister(comm, host.data(), 4096, &bad, NCCL_WIN_DEFAULT) != ncclInvalidArgument)
          return "a window on host memory was not refused";
        err = check(ncclCommWindowRegister(comm, a, count * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC),
                    "ncclCommWindowRegister");
        if (err.empty())
          err = check(ncclAllReduce(b, a, count, ncclFloat, ncclSum, comm, nullptr), "into a window");
        if (err.empty() && hipDeviceSynchronize() != hipSuccess) err = "synchronize";
        std::fill(got.begin(), got.end(), -1.0f);
        if (err.empty() &&
            hipMemcpy(got.data(), a, count * sizeof(float), hipMemcpyDeviceToHost) != hipSuccess) {
          err = "copy out of the window";
        }
        if (!err.empty()) return err;
        if (got != host) return "the all-reduce into a window gave wrong values";
        err = check(ncclCommWindowDeregister(comm, win), "ncclCommWindowDeregister");
        if (!err.empty()) return err;
        err = check(ncclCommDeregister(comm, ha), "ncclCommDeregister");
        if (err.empty() && ncclCommDeregister(comm, ha) != ncclInvalidArgument)
          err = "a second deregister succeeded";
        if (!err.empty()) return err;
        err = check(ncclCommDestroy(comm), "destroy (one registration left)");  // hb is released here
        err += check(ncclMemFree(a), "ncclMemFree");
        if (hipFree(b) != hipSuccess) err += "hipFree";
        return err;
      },
      60, {"BRAID_BACKEND=gpu", "BRAID_BOOTSTRAP_TIMEOUT=20"});
  EXPECT_EQ(describeFailures(out), "");
}

}  // namespace
}  // namespace braid::test
