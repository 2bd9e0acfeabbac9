#include "platform/gpu.h"

#include "util/log.h"
#include "util/strings.h"

#if defined(BRAID_GPU_CUDA) || defined(BRAID_GPU_HIP)
#include "platform/gpu_runtime.h"
#define BRAID_HAVE_GPU_RUNTIME 1
#endif

namespace braid {

#ifdef BRAID_HAVE_GPU_RUNTIME

const char* gpuFlavorName() {
#if defined(BRAID_GPU_CUDA)
  return "cuda";
#else
  return "hip";
#endif
}

Status gpuDeviceCount(int* count) {
  *count = 0;
  hipError_t err = hipGetDeviceCount(count);
  if (err != hipSuccess) {
    // No driver, no device: a machine without GPUs, not an error.
    BRAID_INFO(kLogInit, "GPU runtime reports no usable device: %s", hipGetErrorString(err));
    (void)hipGetLastError();  // clear the sticky error
    *count = 0;
  }
  return okStatus();
}

Status gpuDeviceInfo(int index, GpuInfo* info) {
  hipDeviceProp_t prop{};
  hipError_t err = hipGetDeviceProperties(&prop, index);
  if (err != hipSuccess) return gpuError("querying GPU ", index, ": ", hipGetErrorString(err));
  char busId[32] = {};
  if (hipDeviceGetPCIBusId(busId, sizeof(busId), index) != hipSuccess) busId[0] = '\0';
  info->index = index;
  info->name = prop.name;
  info->busId = busId;
#if defined(BRAID_GPU_CUDA)
  info->arch = strCat("sm_", prop.major, prop.minor);
#else
  info->arch = prop.gcnArchName;
#endif
  info->memoryBytes = prop.totalGlobalMem;
  return okStatus();
}

Status gpuCanAccessPeer(int dev, int peer, bool* can) {
  int value = 0;
  hipError_t err = hipDeviceCanAccessPeer(&value, dev, peer);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return gpuError("asking whether GPU ", dev, " can access GPU ", peer, ": ", hipGetErrorString(err));
  }
  *can = value != 0;
  return okStatus();
}

std::string gpuRuntimeVersion() {
  int runtime = 0, driver = 0;
  if (hipRuntimeGetVersion(&runtime) != hipSuccess) runtime = 0;
  if (hipDriverGetVersion(&driver) != hipSuccess) driver = 0;
  (void)hipGetLastError();
  return strCat(gpuFlavorName(), " runtime ", runtime, ", driver ", driver);
}

Status gpuMalloc(void** ptr, size_t bytes) {
  hipError_t err = hipMalloc(ptr, bytes);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return gpuError("allocating ", bytes, " bytes of GPU memory: ", hipGetErrorString(err));
  }
  return okStatus();
}

Status gpuFree(void* ptr) {
  hipError_t err = hipFree(ptr);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return invalidArgument("freeing GPU pointer ", ptr, ": ", hipGetErrorString(err));
  }
  return okStatus();
}

namespace {
// The memory type of pointer attributes: `type` in CUDA and ROCm 6+,
// `memoryType` in ROCm 5.
template <typename A>
auto memoryTypeOf(const A& a, int) -> decltype(a.type) {
  return a.type;
}
template <typename A>
auto memoryTypeOf(const A& a, long) -> decltype(a.memoryType) {
  return a.memoryType;
}
}  // namespace

Status gpuPointerDevice(const void* ptr, int* device) {
  *device = -1;
  hipPointerAttribute_t a;
  hipError_t err = hipPointerGetAttributes(&a, ptr);
  const bool onDevice = err == hipSuccess && memoryTypeOf(a, 0) == hipMemoryTypeDevice;
  if (err != hipSuccess) (void)hipGetLastError();  // an unknown pointer: not device memory
  if (onDevice) *device = a.device;
  return okStatus();
}

#else  // host flavor

const char* gpuFlavorName() { return "none"; }
Status gpuDeviceCount(int* count) {
  *count = 0;
  return okStatus();
}
Status gpuDeviceInfo(int index, GpuInfo* info) {
  return invalidArgument("GPU ", index, " does not exist: this is a host-only build of Braid");
}
Status gpuCanAccessPeer(int dev, int peer, bool* can) {
  *can = false;
  return invalidArgument("GPU ", dev, " or ", peer, " does not exist: this is a host-only build of Braid");
}
std::string gpuRuntimeVersion() { return ""; }
Status gpuMalloc(void** ptr, size_t bytes) {
  return invalidUsage("cannot allocate GPU memory: this is a host-only build of Braid");
}
Status gpuFree(void* ptr) {
  return invalidUsage("cannot free GPU memory: this is a host-only build of Braid");
}
Status gpuPointerDevice(const void*, int* device) {
  *device = -1;
  return okStatus();
}

#endif

}  // namespace braid
