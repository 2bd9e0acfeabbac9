// Device for the GPU flavors (CUDA, or HIP through the same calls spelled
// hip*): device memory and one non-blocking stream per rank. A Braid build run
// with BRAID_BACKEND=host uses host memory and the null stream instead, as the
// host flavor does (makeHostDevice, from device_host.cc).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "device.h"

#if defined(PERF_GPU_HIP)
#define GPU(name) hip##name
using GpuDeviceProp = hipDeviceProp_t;
#else
#define GPU(name) cuda##name
using GpuDeviceProp = cudaDeviceProp;
#endif

#define PERF_STR2(x) #x
#define PERF_STR(x) PERF_STR2(x)  // expands GPU(...) first
#define GPUCHECK(call)                                                                                    \
  do {                                                                                                    \
    auto perf_e_ = (call);                                                                                \
    if (perf_e_ != GPU(Success)) PERF_DIE("%s failed: %s", PERF_STR(call), GPU(GetErrorString)(perf_e_)); \
  } while (0)

namespace perf {

namespace {

class GpuDevice final : public Device {
 public:
  explicit GpuDevice(int index) : index_(index) {
    select();
    GPUCHECK(GPU(StreamCreateWithFlags)(&stream_, GPU(StreamNonBlocking)));
  }
  ~GpuDevice() override {
    if (graph_) (void)GPU(GraphExecDestroy)(graph_);
    (void)GPU(StreamDestroy)(stream_);
  }
  void select() override { GPUCHECK(GPU(SetDevice)(index_)); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    GPUCHECK(GPU(Malloc)(&p, bytes ? bytes : 1));
    return p;
  }
  void release(void* p) override { GPUCHECK(GPU(Free)(p)); }
  // On the test's own stream, then waited for: a plain memcpy from pageable
  // memory runs on the legacy stream, which does not order the collectives
  // of a non-blocking stream, and may return before its DMA lands, so a
  // collective launched next could read the input being written.
  void toDevice(void* dst, const void* src, size_t bytes) override {
    GPUCHECK(GPU(MemcpyAsync)(dst, src, bytes, GPU(MemcpyHostToDevice), stream_));
    GPUCHECK(GPU(StreamSynchronize)(stream_));
  }
  void toHost(void* dst, const void* src, size_t bytes) override {
    GPUCHECK(GPU(MemcpyAsync)(dst, src, bytes, GPU(MemcpyDeviceToHost), stream_));
    GPUCHECK(GPU(StreamSynchronize)(stream_));
  }
  Stream stream() override { return stream_; }
  void synchronize() override { GPUCHECK(GPU(StreamSynchronize)(stream_)); }
  std::string describe() override {
    GpuDeviceProp prop;
    GPUCHECK(GPU(GetDeviceProperties)(&prop, index_));
    char buf[300];
    std::snprintf(buf, sizeof(buf), "[%04x:%02x:%02x] %s", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID,
                  prop.name);
    return buf;
  }
  bool graphs() const override { return true; }
  void dropGraph() override {
    if (graph_) GPUCHECK(GPU(GraphExecDestroy)(graph_));
    graph_ = nullptr;
  }
  void capture() override { GPUCHECK(GPU(StreamBeginCapture)(stream_, GPU(StreamCaptureModeThreadLocal))); }
  void endCapture() override {
    GPUCHECK(GPU(StreamEndCapture)(stream_, &captured_));
  }
  void instantiate() override {
    if (graph_) GPUCHECK(GPU(GraphExecDestroy)(graph_));
    GPUCHECK(GPU(GraphInstantiateWithFlags)(&graph_, captured_, 0));
    GPUCHECK(GPU(GraphDestroy)(captured_));
    captured_ = nullptr;
  }
  void replay(int times) override {
    for (int i = 0; i < times; ++i) GPUCHECK(GPU(GraphLaunch)(graph_, stream_));
  }

 private:
  int index_;
  Stream stream_ = nullptr;
  GPU(Graph_t) captured_ = nullptr;
  GPU(GraphExec_t) graph_ = nullptr;
};

}  // namespace

bool hostMemory() {
#if defined(PERF_LIBRARY_BRAID)
  // Read here only: the perf program follows Braid's backend choice.
  const char* backend = std::getenv("BRAID_BACKEND");
  if (backend && std::strcmp(backend, "host") == 0) return true;
#endif
  return false;
}

std::unique_ptr<Device> openDevice(int index) {
  if (hostMemory()) return makeHostDevice("[host] host memory (BRAID_BACKEND=host)");
#if defined(PERF_LIBRARY_BRAID)
  // With BRAID_SHARE_GPU=1 ranks beyond the GPU count share them (index
  // modulo the count): `-g 2` on one GPU measures the kernels with the
  // GPU's own memory as the link.
  const char* share = std::getenv("BRAID_SHARE_GPU");
  const int n = deviceCount();
  if (share != nullptr && std::strcmp(share, "1") == 0 && n > 0) index %= n;
#endif
  return std::make_unique<GpuDevice>(index);
}

int deviceCount() {
  if (hostMemory()) return 0;
  int n = 0;
  if (GPU(GetDeviceCount)(&n) != GPU(Success)) return 0;
  return n;
}

}  // namespace perf
