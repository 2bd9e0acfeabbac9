// SweepMemory (tests/multiprocess/sweep_memory.h) on one GPU: the sweeps'
// buffers in device memory, their collectives on a given stream (null or
// created by the test), as a user of NCCL would:
//   inputs   hipMemcpyAsync host to device on the stream (ordered before the
//            collective that reads them),
//   waiting  polls the stream (hipStreamQuery) and the communicator's async
//            error until the stream is done, with a deadline, so a hang or a
//            peer failure becomes a report instead of a killed process,
//   results  hipMemcpy device to host, after that wait only.
// Every call sets the device first, so one thread may drive several GPUs.
// After a failed wait, frees are skipped (hipFree would wait for the stuck
// work): the process can still report and abort its communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "nccl.h"
#include "platform/gpu_runtime.h"
#include "sweep_memory.h"

namespace braid::test {

namespace gpusweep {
// What gpu_runtime.h does not map (yet): the non-blocking stream query.
#if defined(BRAID_GPU_CUDA)
inline hipError_t streamQuery(hipStream_t s) {
  return cudaStreamQuery(s);
}
constexpr hipError_t kNotReady = cudaErrorNotReady;
#else
inline hipError_t streamQuery(hipStream_t s) {
  return hipStreamQuery(s);
}
constexpr hipError_t kNotReady = hipErrorNotReady;
#endif

inline std::string gpuError(const char* what, hipError_t e) {
  return std::string(what) + ": " + hipGetErrorName(e) + " (" + hipGetErrorString(e) + ")";
}
}  // namespace gpusweep

class GpuMemory : public SweepMemory {
 public:
  // `stream` may be null (the legacy default stream); it belongs to the caller.
  GpuMemory(int device, hipStream_t stream, double syncTimeoutSec = 120)
      : device_(device), stream_(stream), syncTimeoutSec_(syncTimeoutSec) {}

  braidStream_t stream() const override { return stream_; }
  int device() const { return device_; }
  // True after a wait failed: the GPU may still run work that never ends.
  bool wedged() const { return wedged_; }

  std::string alloc(size_t bytes, void** p) override {
    *p = nullptr;
    if (bytes == 0) return "";
    if (hipError_t e = hipSetDevice(device_); e != hipSuccess) return gpusweep::gpuError("hipSetDevice", e);
    if (hipError_t e = hipMalloc(p, bytes); e != hipSuccess) {
      *p = nullptr;
      return gpusweep::gpuError("hipMalloc", e) + " of " + std::to_string(bytes) + " bytes";
    }
    return "";
  }
  void free(void* p) override {
    if (p == nullptr || wedged_) return;
    (void)hipSetDevice(device_);
    (void)hipFree(p);
  }
  std::string copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return "";
    if (hipError_t e = hipSetDevice(device_); e != hipSuccess) return gpusweep::gpuError("hipSetDevice", e);
    hipError_t e = hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, stream_);
    return e == hipSuccess ? "" : gpusweep::gpuError("hipMemcpyAsync to the device", e);
  }
  std::string copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return "";
    if (hipError_t e = hipSetDevice(device_); e != hipSuccess) return gpusweep::gpuError("hipSetDevice", e);
    hipError_t e = hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost);
    return e == hipSuccess ? "" : gpusweep::gpuError("hipMemcpy to the host", e);
  }
  std::string synchronize(ncclComm_t comm) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    if (hipError_t e = hipSetDevice(device_); e != hipSuccess) return gpusweep::gpuError("hipSetDevice", e);
    while (true) {
      hipError_t e = gpusweep::streamQuery(stream_);
      if (e == hipSuccess) {
        // A kernel that gave up (stall timeout, abort) also ends: its error is the communicator's.
        ncclResult_t async = ncclSuccess;
        if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
          return std::string("after the stream drained, ncclCommGetAsyncError: ") +
                 ncclGetErrorString(async) + ": " + ncclGetLastError(comm);
        }
        return "";
      }
      if (e != gpusweep::kNotReady) {
        wedged_ = true;
        return gpusweep::gpuError("waiting for the stream", e);
      }
      ncclResult_t async = ncclSuccess;
      if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        wedged_ = true;
        return std::string("while waiting for the stream, ncclCommGetAsyncError: ") +
               ncclGetErrorString(async) + ": " + ncclGetLastError(comm);
      }
      double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited > syncTimeoutSec_) {
        wedged_ = true;
        return "the stream was not done after " + std::to_string(static_cast<int>(syncTimeoutSec_)) +
               " s (a hang?)";
      }
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 5 : 200));
    }
  }

 private:
  int device_;
  hipStream_t stream_;
  double syncTimeoutSec_;
  bool wedged_ = false;
};

}  // namespace braid::test
