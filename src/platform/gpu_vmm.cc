// GPU virtual memory (platform/gpu.h): shareable allocations, and exporting
// and importing allocations between processes. The cuda flavor reaches
// the driver's cuMem* calls through libcuda.so.1 opened at run time (the
// library links no libcuda; cuda.h gives the types only); the hip flavor
// calls HIP's hipMem* equivalents.
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "platform/gpu.h"
#include "util/log.h"
#include "util/strings.h"

#if defined(BRAID_GPU_CUDA)
#include <cuda.h>
#include <dlfcn.h>

#include "platform/gpu_runtime.h"
#elif defined(BRAID_GPU_HIP)
#include "platform/gpu_runtime.h"
#endif

namespace braid {

#if defined(BRAID_GPU_CUDA) || defined(BRAID_GPU_HIP)
namespace {

// The runtime's status (the cuda flavor's driver status has its own below).
Status check(hipError_t e, const char* what) {
  return gpuCheck(e, what);
}

#if defined(BRAID_GPU_CUDA)
using VmmHandle = CUmemGenericAllocationHandle;
using VmmProp = CUmemAllocationProp;
using VmmAccess = CUmemAccessDesc;

// The driver calls used here, looked up once.
struct Driver {
// clang-format off
#define BRAID_DRIVER_CALLS(X)                                                          \
  X(cuMemGetAddressRange_v2) X(cuMemCreate) X(cuMemRelease)                          \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)               \
  X(cuMemSetAccess) X(cuMemGetAllocationGranularity) X(cuMemRetainAllocationHandle)  \
  X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle) X(cuGetErrorString)
// clang-format on
#define BRAID_DECLARE(name) decltype(&::name) name = nullptr;
  BRAID_DRIVER_CALLS(BRAID_DECLARE)
#undef BRAID_DECLARE
  std::string missing;  // the first call libcuda.so.1 lacks, or why it did not open
};

const Driver& driver() {
  static const Driver d = [] {
    Driver t;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      t.missing = strCat("libcuda.so.1 (", dlerror(), ")");
      return t;
    }
#define BRAID_LOOKUP(name)                                        \
  t.name = reinterpret_cast<decltype(t.name)>(dlsym(lib, #name)); \
  if (t.name == nullptr && t.missing.empty()) t.missing = strCat(#name, " in libcuda.so.1");
    BRAID_DRIVER_CALLS(BRAID_LOOKUP)
#undef BRAID_LOOKUP
    return t;
  }();
  return d;
}
#undef BRAID_DRIVER_CALLS

// `what` failed with driver status `r` (ok for CUDA_SUCCESS).
Status check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return okStatus();
  const char* text = nullptr;
  if (driver().cuGetErrorString == nullptr || driver().cuGetErrorString(r, &text) != CUDA_SUCCESS) text = "?";
  return gpuError(what, ": ", text, " (CUresult ", static_cast<int>(r), ")");
}
Status haveDriver() {
  if (driver().missing.empty()) return okStatus();
  return gpuError("GPU virtual memory needs the driver's calls: no ", driver().missing);
}
CUdeviceptr dptr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

Status vmmGranularity(const VmmProp& prop, size_t* g) {
  return check(driver().cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity");
}
Status vmmCreate(const VmmProp& prop, size_t bytes, VmmHandle* h) {
  return check(driver().cuMemCreate(h, bytes, &prop, 0), "cuMemCreate");
}
void vmmRelease(VmmHandle h) {
  (void)driver().cuMemRelease(h);
}
Status vmmReserve(size_t bytes, size_t align, void** p) {
  CUdeviceptr d = 0;
  BRAID_CHECK(check(driver().cuMemAddressReserve(&d, bytes, align, 0, 0), "cuMemAddressReserve"));
  *p = reinterpret_cast<void*>(d);
  return okStatus();
}
void vmmFreeAddress(void* p, size_t bytes) {
  (void)driver().cuMemAddressFree(dptr(p), bytes);
}
Status vmmMap(void* p, size_t bytes, VmmHandle h) {
  return check(driver().cuMemMap(dptr(p), bytes, 0, h, 0), "cuMemMap");
}
void vmmUnmap(void* p, size_t bytes) {
  (void)driver().cuMemUnmap(dptr(p), bytes);
}
Status vmmSetAccess(void* p, size_t bytes, const std::vector<VmmAccess>& access) {
  return check(driver().cuMemSetAccess(dptr(p), bytes, access.data(), access.size()), "cuMemSetAccess");
}
Status vmmRetain(const void* p, VmmHandle* h) {
  return check(driver().cuMemRetainAllocationHandle(h, const_cast<void*>(p)), "cuMemRetainAllocationHandle");
}
Status vmmExportFd(VmmHandle h, int* fd) {
  return check(driver().cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle");
}
Status vmmImportFd(int fd, VmmHandle* h) {
  return check(driver().cuMemImportFromShareableHandle(h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle");
}
VmmProp deviceProp(int device) {
  VmmProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}
VmmAccess readWrite(int device) {
  VmmAccess a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

#else  // hip
using VmmHandle = hipMemGenericAllocationHandle_t;
using VmmProp = hipMemAllocationProp;
using VmmAccess = hipMemAccessDesc;

Status haveDriver() {
  return okStatus();
}

Status vmmGranularity(const VmmProp& prop, size_t* g) {
  return check(hipMemGetAllocationGranularity(g, &prop, hipMemAllocationGranularityRecommended),
               "hipMemGetAllocationGranularity");
}
Status vmmCreate(const VmmProp& prop, size_t bytes, VmmHandle* h) {
  return check(hipMemCreate(h, bytes, &prop, 0), "hipMemCreate");
}
void vmmRelease(VmmHandle h) {
  (void)hipMemRelease(h);
}
Status vmmReserve(size_t bytes, size_t align, void** p) {
  return check(hipMemAddressReserve(p, bytes, align, nullptr, 0), "hipMemAddressReserve");
}
void vmmFreeAddress(void* p, size_t bytes) {
  (void)hipMemAddressFree(p, bytes);
}
Status vmmMap(void* p, size_t bytes, VmmHandle h) {
  return check(hipMemMap(p, bytes, 0, h, 0), "hipMemMap");
}
void vmmUnmap(void* p, size_t bytes) {
  (void)hipMemUnmap(p, bytes);
}
Status vmmSetAccess(void* p, size_t bytes, const std::vector<VmmAccess>& access) {
  return check(hipMemSetAccess(p, bytes, access.data(), access.size()), "hipMemSetAccess");
}
Status vmmRetain(const void* p, VmmHandle* h) {
  return check(hipMemRetainAllocationHandle(h, const_cast<void*>(p)), "hipMemRetainAllocationHandle");
}
Status vmmExportFd(VmmHandle h, int* fd) {
  return check(hipMemExportToShareableHandle(fd, h, hipMemHandleTypePosixFileDescriptor, 0),
               "hipMemExportToShareableHandle");
}
Status vmmImportFd(int fd, VmmHandle* h) {
  return check(hipMemImportFromShareableHandle(h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                               hipMemHandleTypePosixFileDescriptor),
               "hipMemImportFromShareableHandle");
}
VmmProp deviceProp(int device) {
  VmmProp prop{};
  prop.type = hipMemAllocationTypePinned;
  prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = device;
  return prop;
}
VmmAccess readWrite(int device) {
  VmmAccess a{};
  a.location.type = hipMemLocationTypeDevice;
  a.location.id = device;
  a.flags = hipMemAccessFlagsProtReadWrite;
  return a;
}
#endif

// The calling thread's GPU, its runtime context made current (the driver's
// calls need one; the runtime creates it lazily).
Status currentDevice(int* device) {
  BRAID_CHECK(haveDriver());
  BRAID_CHECK(check(hipGetDevice(device), "hipGetDevice"));
  return check(hipFree(nullptr), "initializing the GPU runtime");
}

// Reserves an address range of `bytes` for allocation `h`, maps it there
// and lets `access` reach it; all or nothing.
Status reserveAndMap(VmmHandle h, size_t bytes, size_t align, const std::vector<VmmAccess>& access,
                     void** out) {
  void* p = nullptr;
  BRAID_CHECK(vmmReserve(bytes, align, &p));
  Status s = vmmMap(p, bytes, h);
  if (s.ok()) {
    s = vmmSetAccess(p, bytes, access);
    if (!s.ok()) vmmUnmap(p, bytes);
  }
  if (!s.ok()) {
    vmmFreeAddress(p, bytes);
    return s;
  }
  *out = p;
  return okStatus();
}

}  // namespace

Status gpuMallocShareable(size_t bytes, void** ptr, size_t* mapped) {
  *ptr = nullptr;
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  const VmmProp prop = deviceProp(device);
  size_t granularity = 0;
  BRAID_CHECK(vmmGranularity(prop, &granularity));
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  // Every GPU of this process that can reach this one may use the memory
  // (ncclCommInitAll ranks write each other's windows), as with the
  // runtime's allocations once peer access is on.
  std::vector<VmmAccess> access{readWrite(device)};
  int n = 0;
  if (hipGetDeviceCount(&n) != hipSuccess) n = 0;
  for (int d = 0; d < n; ++d) {
    bool can = false;
    if (d != device && gpuCanAccessPeer(d, device, &can).ok() && can) access.push_back(readWrite(d));
  }
  VmmHandle h{};
  BRAID_CHECK(vmmCreate(prop, size, &h).withContext(strCat("allocating ", size, " bytes on GPU ", device)));
  Status s = reserveAndMap(h, size, granularity, access, ptr);
  vmmRelease(h);  // the mapping holds the memory from here on
  BRAID_CHECK(s);
  *mapped = size;
  return okStatus();
}

Status gpuFreeShareable(void* ptr, size_t mapped) {
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  BRAID_CHECK(check(hipDeviceSynchronize(), "waiting for work on memory being freed"));
  vmmUnmap(ptr, mapped);
  vmmFreeAddress(ptr, mapped);
  return okStatus();
}

namespace {
// Descriptor exports by allocation, shared by every export of it (a window
// and a registration of one allocation give peers one export, which they
// map once). Keyed by base and size: an allocation freed while still
// registered and replaced at its address by one of another size gets an
// export of its own.
struct LiveExport {
  GpuExport exp;
  int refs;
};
std::mutex gExportMutex;
using ExportKey = std::pair<uintptr_t, size_t>;
std::map<ExportKey, LiveExport>& liveExports() {
  static auto* m = new std::map<ExportKey, LiveExport>();
  return *m;
}
}  // namespace

Status gpuExport(void* base, size_t bytes, GpuExport* out) {
  *out = GpuExport{};
  out->bytes = bytes;
  hipIpcMemHandle_t ipc;
  static_assert(sizeof(ipc) <= sizeof(out->ipc), "an IPC handle fits GpuExport");
  if (hipIpcGetMemHandle(&ipc, base) == hipSuccess) {
    out->kind = GpuExport::kIpc;
    std::memcpy(out->ipc, &ipc, sizeof(ipc));
    return okStatus();
  }
  (void)hipGetLastError();
  std::lock_guard<std::mutex> lock(gExportMutex);
  const ExportKey key{reinterpret_cast<uintptr_t>(base), bytes};
  auto live = liveExports().find(key);
  if (live != liveExports().end()) {
    ++live->second.refs;
    *out = live->second.exp;
    return okStatus();
  }
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  VmmHandle h{};
  BRAID_CHECK(vmmRetain(base, &h).withContext(
      "the allocation has no IPC handle and is no virtual-memory allocation (a stream-ordered pool?)"));
  int fd = -1;
  Status s = vmmExportFd(h, &fd);
  vmmRelease(h);
  BRAID_CHECK(s.withContext("a virtual-memory allocation made without a POSIX descriptor handle type?"));
  s = fdLend(fd, &out->lent);
  if (!s.ok()) {
    close(fd);
    return s;
  }
  out->kind = GpuExport::kDescriptor;
  liveExports()[key] = LiveExport{*out, 1};
  return okStatus();
}

void gpuUnexport(const GpuExport& e) {
  if (e.kind != GpuExport::kDescriptor) return;
  std::lock_guard<std::mutex> lock(gExportMutex);
  for (auto it = liveExports().begin(); it != liveExports().end(); ++it) {
    if (it->second.exp.lent.fd != e.lent.fd || it->second.exp.lent.token != e.lent.token) continue;
    if (--it->second.refs > 0) return;
    liveExports().erase(it);
    fdReturn(e.lent);
    close(e.lent.fd);
    return;
  }
}

Status gpuImport(const GpuExport& e, int timeoutMs, char** ptr) {
  *ptr = nullptr;
  if (e.kind == GpuExport::kIpc) {
    hipIpcMemHandle_t ipc;
    std::memcpy(&ipc, e.ipc, sizeof(ipc));
    void* p = nullptr;
    BRAID_CHECK(check(hipIpcOpenMemHandle(&p, ipc, hipIpcMemLazyEnablePeerAccess), "opening an IPC handle"));
    *ptr = static_cast<char*>(p);
    return okStatus();
  }
  if (e.kind != GpuExport::kDescriptor) return invalidArgument("not an exported GPU allocation");
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  int fd = -1;
  BRAID_CHECK(fdBorrow(e.lent, timeoutMs, &fd));
  VmmHandle h{};
  Status s = vmmImportFd(fd, &h);
  close(fd);
  BRAID_CHECK(s);
  size_t granularity = 0;
  s = vmmGranularity(deviceProp(device), &granularity);
  void* p = nullptr;
  if (s.ok()) s = reserveAndMap(h, e.bytes, granularity, {readWrite(device)}, &p);
  vmmRelease(h);
  BRAID_CHECK(s.withContext(strCat("mapping process ", e.lent.pid, "'s allocation of ", e.bytes, " bytes")));
  *ptr = static_cast<char*>(p);
  return okStatus();
}

void gpuUnimport(const GpuExport& e, char* ptr) {
  if (e.kind == GpuExport::kIpc) {
    (void)hipIpcCloseMemHandle(ptr);
  } else if (e.kind == GpuExport::kDescriptor) {
    vmmUnmap(ptr, e.bytes);
    vmmFreeAddress(ptr, e.bytes);
  }
  (void)hipGetLastError();
}

Status gpuVmmGranularity(size_t* granularity) {
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  return vmmGranularity(deviceProp(device), granularity);
}

void gpuFlatUnmap(GpuFlatRange* range) {
  if (range->base == nullptr) return;
  for (const auto& [offset, bytes] : range->mapped) vmmUnmap(range->base + offset, bytes);
  vmmFreeAddress(range->base, range->bytes);
  (void)hipGetLastError();
  *range = GpuFlatRange{};
}

Status gpuFlatMap(const std::vector<GpuFlatPart>& parts, size_t bytes, int timeoutMs, GpuFlatRange* out) {
  *out = GpuFlatRange{};
  int device = -1;
  BRAID_CHECK(currentDevice(&device));
  size_t granularity = 0;
  BRAID_CHECK(vmmGranularity(deviceProp(device), &granularity));
  void* p = nullptr;
  BRAID_CHECK(
      vmmReserve(bytes, granularity, &p).withContext(strCat("reserving ", bytes, " bytes of address space")));
  GpuFlatRange range;
  range.base = static_cast<char*>(p);
  range.bytes = bytes;
  for (const GpuFlatPart& part : parts) {
    Status s;
    if (part.offset % granularity != 0 || part.bytes % granularity != 0 || part.offset + part.bytes > bytes) {
      s = invalidArgument("allocation of ", part.bytes, " bytes at offset ", part.offset, " of a ", bytes,
                          "-byte range is not on the ", granularity, "-byte granularity or overruns it");
    }
    VmmHandle h{};
    if (s.ok() && part.local != nullptr) {
      s = vmmRetain(part.local, &h)
              .withContext("an allocation of this process is no virtual-memory allocation");
    } else if (s.ok()) {
      int fd = -1;
      s = part.exp.kind == GpuExport::kDescriptor
              ? fdBorrow(part.exp.lent, timeoutMs, &fd)
              : invalidArgument("a peer's allocation is no virtual-memory one");
      if (s.ok()) {
        s = vmmImportFd(fd, &h);
        close(fd);
      }
    }
    if (s.ok()) {
      char* at = range.base + part.offset;
      s = vmmMap(at, part.bytes, h);
      vmmRelease(h);
      if (s.ok()) {
        range.mapped.emplace_back(part.offset, part.bytes);
        s = vmmSetAccess(at, part.bytes, {readWrite(device)});
      }
    }
    if (!s.ok()) {
      gpuFlatUnmap(&range);
      return s;
    }
  }
  *out = std::move(range);
  return okStatus();
}

Status gpuAllocationRange(const void* ptr, void** base, size_t* bytes) {
#if defined(BRAID_GPU_CUDA)
  // The runtime has no such query.
  BRAID_CHECK(haveDriver());
  CUdeviceptr b = 0;
  BRAID_CHECK(check(driver().cuMemGetAddressRange_v2(&b, bytes, dptr(ptr)), "cuMemGetAddressRange"));
  *base = reinterpret_cast<void*>(b);
  return okStatus();
#else
  return check(hipMemGetAddressRange(base, bytes, const_cast<void*>(ptr)), "hipMemGetAddressRange");
#endif
}

#else  // host flavor

Status gpuMallocShareable(size_t, void** ptr, size_t*) {
  *ptr = nullptr;
  return invalidUsage("cannot allocate GPU memory: this is a host-only build of Braid");
}
Status gpuFreeShareable(void*, size_t) {
  return invalidUsage("cannot free GPU memory: this is a host-only build of Braid");
}
Status gpuExport(void*, size_t, GpuExport*) {
  return invalidUsage("no GPU allocations: this is a host-only build of Braid");
}
void gpuUnexport(const GpuExport&) {}
Status gpuImport(const GpuExport&, int, char**) {
  return invalidUsage("no GPU allocations: this is a host-only build of Braid");
}
void gpuUnimport(const GpuExport&, char*) {}
Status gpuAllocationRange(const void*, void**, size_t*) {
  return invalidUsage("no GPU allocations: this is a host-only build of Braid");
}
Status gpuVmmGranularity(size_t*) {
  return invalidUsage("no GPU virtual memory: this is a host-only build of Braid");
}
Status gpuFlatMap(const std::vector<GpuFlatPart>&, size_t, int, GpuFlatRange* out) {
  *out = GpuFlatRange{};
  return invalidUsage("no GPU virtual memory: this is a host-only build of Braid");
}
void gpuFlatUnmap(GpuFlatRange* range) {
  *range = GpuFlatRange{};
}

#endif

}  // namespace braid
