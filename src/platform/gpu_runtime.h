// The GPU runtime as Braid's GPU code sees it: HIP names, whatever the vendor.
//
// hip flavor:  HIP itself.
// cuda flavor: the hip* types and calls Braid uses, mapped onto the CUDA
//              runtime. (HIP's own NVIDIA headers do not build against CUDA 13:
//              cudaDeviceProp lost fields they read.) Add a mapping here when
//              GPU code needs a new call; nothing outside src/platform/ and
//              src/exec/ includes a vendor header.
// host flavor: must not be included (there is no GPU runtime).
#pragma once

#if defined(BRAID_GPU_HIP)
#include <hip/hip_runtime.h>

#elif defined(BRAID_GPU_CUDA)
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
using hipIpcMemHandle_t = cudaIpcMemHandle_t;
using hipStreamCaptureMode = cudaStreamCaptureMode;
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipGraphNode_t = cudaGraphNode_t;

#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorPeerAccessAlreadyEnabled cudaErrorPeerAccessAlreadyEnabled
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyDefault cudaMemcpyDefault
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostMallocPortable cudaHostAllocPortable
#define hipHostRegisterMapped cudaHostRegisterMapped
#define hipHostRegisterPortable cudaHostRegisterPortable
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed

inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline const char* hipGetErrorName(hipError_t e) { return cudaGetErrorName(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipDeviceGetPCIBusId(char* id, int len, int d) { return cudaDeviceGetPCIBusId(id, len, d); }
inline hipError_t hipDeviceGetByPCIBusId(int* d, const char* id) { return cudaDeviceGetByPCIBusId(d, id); }
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
inline hipError_t hipDeviceCanAccessPeer(int* can, int d, int peer) { return cudaDeviceCanAccessPeer(can, d, peer); }
inline hipError_t hipDeviceEnablePeerAccess(int peer, unsigned flags) { return cudaDeviceEnablePeerAccess(peer, flags); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipMallocAsync(void** p, size_t n, hipStream_t s) {
  return cudaMallocAsync(p, n, s);
}
inline hipError_t hipFreeAsync(void* p, hipStream_t s) {
  return cudaFreeAsync(p, s);
}
inline hipError_t hipHostMalloc(void** p, size_t n, unsigned flags) { return cudaHostAlloc(p, n, flags); }
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipHostRegister(void* p, size_t n, unsigned flags) {
  return cudaHostRegister(p, n, flags);
}
inline hipError_t hipHostUnregister(void* p) {
  return cudaHostUnregister(p);
}
inline hipError_t hipHostGetDevicePointer(void** d, void* h, unsigned flags) {
  return cudaHostGetDevicePointer(d, h, flags);
}
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, hipStream_t st) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
inline hipError_t hipMemset(void* p, int v, size_t n) { return cudaMemset(p, v, n); }
inline hipError_t hipMemsetAsync(void* p, int v, size_t n, hipStream_t s) {
  return cudaMemsetAsync(p, v, n, s);
}
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned f) { return cudaStreamCreateWithFlags(s, f); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode* m) {
  return cudaThreadExchangeStreamCaptureMode(m);
}
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) {
  return cudaStreamBeginCapture(s, m);
}
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* g) {
  return cudaStreamEndCapture(s, g);
}
// HIP's five-argument form; CUDA 12 dropped the error-node and log arguments.
inline hipError_t hipGraphInstantiate(hipGraphExec_t* e, hipGraph_t g, hipGraphNode_t*, char*, size_t) {
  return cudaGraphInstantiate(e, g, 0);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) {
  return cudaGraphLaunch(e, s);
}
inline hipError_t hipGraphExecDestroy(hipGraphExec_t e) {
  return cudaGraphExecDestroy(e);
}
inline hipError_t hipGraphDestroy(hipGraph_t g) {
  return cudaGraphDestroy(g);
}
using hipPointerAttribute_t = cudaPointerAttributes;
#define hipMemoryTypeDevice cudaMemoryTypeDevice
inline hipError_t hipPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  return cudaPointerGetAttributes(a, p);
}
inline hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t* h, void* p) { return cudaIpcGetMemHandle(h, p); }
inline hipError_t hipIpcOpenMemHandle(void** p, hipIpcMemHandle_t h, unsigned f) {
  return cudaIpcOpenMemHandle(p, h, f);
}
inline hipError_t hipIpcCloseMemHandle(void* p) { return cudaIpcCloseMemHandle(p); }
inline hipError_t hipRuntimeGetVersion(int* v) { return cudaRuntimeGetVersion(v); }
inline hipError_t hipDriverGetVersion(int* v) { return cudaDriverGetVersion(v); }

// Kernel launch in HIP's spelling.
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)

#else
#error "gpu_runtime.h is for the cuda and hip flavors only"
#endif

#include "util/status.h"

namespace braid {
// A runtime call's result as a Status naming what failed; clears the
// runtime's last error, so a failure does not fail the next launch.
inline Status gpuCheck(hipError_t e, const char* what) {
  if (e == hipSuccess) return okStatus();
  (void)hipGetLastError();
  return gpuError(what, ": ", hipGetErrorString(e));
}
}  // namespace braid
