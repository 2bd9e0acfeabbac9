// Host-memory device: plain aligned memory and the null stream; Braid's host
// engine completes a collective before the call returns. The whole Device of
// the host flavor, and the BRAID_BACKEND=host variant of the GPU flavors.
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "device.h"

namespace perf {

namespace {

class HostDevice final : public Device {
 public:
  explicit HostDevice(std::string label) : label_(std::move(label)) {}
  void select() override {}
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    PERF_REQUIRE(posix_memalign(&p, 4096, bytes ? bytes : 1) == 0, "out of host memory (%zu bytes)", bytes);
    // Touched here, as GPU memory is backed when allocated: an untouched
    // large allocation reads as the kernel's one shared zero page, so a
    // collective run with -c 0 (no data written) would read its inputs from
    // cache (2 ranks at 128 MiB timed 11 ms instead of 20).
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void toDevice(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void toHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  Stream stream() override { return nullptr; }
  void synchronize() override {}
  std::string describe() override { return label_; }

 private:
  std::string label_;
};

}  // namespace

std::unique_ptr<Device> makeHostDevice(const std::string& label) {
  return std::make_unique<HostDevice>(label);
}

#if !defined(PERF_GPU_CUDA) && !defined(PERF_GPU_HIP)
std::unique_ptr<Device> openDevice(int) {
  return makeHostDevice("[host] host memory");
}
bool hostMemory() {
  return true;
}
int deviceCount() {
  return 0;
}
#endif

}  // namespace perf
