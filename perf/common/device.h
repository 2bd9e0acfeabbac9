// Where a rank's buffers live and how its work is waited for: the only place
// where the perf programs differ between host memory and a GPU. Two
// implementations, chosen at compile time: device_host.cc (host flavor of
// Braid: plain memory, null stream) and device_gpu.cc (CUDA or HIP runtime:
// device memory and a stream; host memory instead when the program is Braid
// and BRAID_BACKEND=host). One Device per rank, used by the thread that
// drives that rank.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "nccl.h"

#if defined(PERF_GPU_CUDA)
#include <cuda_runtime_api.h>
namespace perf {
using Stream = cudaStream_t;
}
#elif defined(PERF_GPU_HIP)
#include <hip/hip_runtime_api.h>
namespace perf {
using Stream = hipStream_t;
}
#else
namespace perf {
using Stream = braidStream_t;  // Braid's host flavor: collectives finish on return
}
#endif

namespace perf {

class Device {
 public:
  virtual ~Device() = default;

  // Makes this rank's GPU current for the calling thread (no-op on the host).
  virtual void select() = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void toDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void toHost(void* dst, const void* src, size_t bytes) = 0;
  // The stream collectives are issued on (null on the host).
  virtual Stream stream() = 0;
  // Waits until everything issued on stream() has finished.
  virtual void synchronize() = 0;
  // "[0000:00:06] NVIDIA H200" or "[host] host memory": for the device list.
  virtual std::string describe() = 0;

  // Graph capture (-G): supported only by GPU streams. capture() starts
  // recording stream(); endCapture() ends it; instantiate() makes the
  // executable graph; replay() launches it `times` times. With several GPUs
  // on one thread, every capture ends before any graph is instantiated
  // (instantiating is not allowed while the thread captures another stream).
  virtual bool graphs() const { return false; }
  virtual void capture() {}
  virtual void endCapture() {}
  virtual void instantiate() {}
  virtual void replay(int times) {}
  // Destroys the replayed graph once its launches completed: a graph holding
  // captured collectives must be gone before its communicator is destroyed
  // (NCCL's ncclCommDestroy waits for it).
  virtual void dropGraph() {}
};

// The device for GPU `index` of this host (or host memory when the build or
// the environment says so).
std::unique_ptr<Device> openDevice(int index);

// A host-memory device (null stream), whatever the build.
std::unique_ptr<Device> makeHostDevice(const std::string& label);

// True when buffers live in host memory (host flavor or BRAID_BACKEND=host).
bool hostMemory();

// How many GPUs this process sees (0 when buffers live in host memory).
int deviceCount();

}  // namespace perf
