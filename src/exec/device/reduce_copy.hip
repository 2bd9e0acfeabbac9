// Vectorized reduce-copy kernels, instantiated from an explicit table.
#include <cstdint>

#include "exec/device/kernel_filter.h"
#include "exec/device/reduce_copy.h"
#include "exec/reduce_ops.h"
#include "platform/gpu_runtime.h"

namespace braid::device {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;

// 16 bytes seen as elements of T.
template <typename T>
union Pack16 {
  uint4 raw;
  T elem[16 / sizeof(T)];
};

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads) reduceCopyKernel(T* dst, const T* a, const T* b, size_t count) {
  constexpr size_t kPerPack = 16 / sizeof(T);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  Op op;
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 16) == 0;
  const size_t packs = aligned ? count / kPerPack : 0;
  const uint4* a4 = reinterpret_cast<const uint4*>(a);
  const uint4* b4 = reinterpret_cast<const uint4*>(b);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  for (size_t p = tid; p < packs; p += stride) {
    Pack16<T> x, y;
    x.raw = a4[p];
    y.raw = b4[p];
#pragma unroll
    for (size_t k = 0; k < kPerPack; ++k) x.elem[k] = op(x.elem[k], y.elem[k]);
    d4[p] = x.raw;
  }
  for (size_t i = packs * kPerPack + tid; i < count; i += stride) dst[i] = op(a[i], b[i]);
}

template <typename T, typename Op>
Status launch(void* dst, const void* a, const void* b, size_t count, hipStream_t stream) {
  if (count == 0) return okStatus();
  size_t packs = (count * sizeof(T) + 15) / 16;
  size_t blocks = (packs + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  hipLaunchKernelGGL((reduceCopyKernel<T, Op>), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                     stream, static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count);
  hipError_t err = hipGetLastError();
  if (err != hipSuccess) return gpuError("launching reduce-copy: ", hipGetErrorString(err));
  return okStatus();
}

using LaunchFn = Status (*)(void*, const void*, const void*, size_t, hipStream_t);

struct Entry {
  ncclDataType_t type;
  ncclRedOp_t op;
  LaunchFn fn;
};

// The kernel table: (type, C++ type) x (op, functor). kernel_filter.h, made
// by CMake from BRAID_KERNEL_TYPES, decides which types are compiled.
#define BRAID_RC_OPS(nccl, T)                 \
  {nccl, ncclSum, &launch<T, OpSum>},         \
  {nccl, ncclProd, &launch<T, OpProd>},       \
  {nccl, ncclMin, &launch<T, OpMin>},         \
  {nccl, ncclMax, &launch<T, OpMax>},

constexpr Entry kTable[] = {
#if BRAID_KERNEL_i8
    BRAID_RC_OPS(ncclInt8, int8_t)
#endif
#if BRAID_KERNEL_u8
    BRAID_RC_OPS(ncclUint8, uint8_t)
#endif
#if BRAID_KERNEL_i32
    BRAID_RC_OPS(ncclInt32, int32_t)
#endif
#if BRAID_KERNEL_u32
    BRAID_RC_OPS(ncclUint32, uint32_t)
#endif
#if BRAID_KERNEL_i64
    BRAID_RC_OPS(ncclInt64, int64_t)
#endif
#if BRAID_KERNEL_u64
    BRAID_RC_OPS(ncclUint64, uint64_t)
#endif
#if BRAID_KERNEL_f32
    BRAID_RC_OPS(ncclFloat32, float)
#endif
#if BRAID_KERNEL_f64
    BRAID_RC_OPS(ncclFloat64, double)
#endif
    {ncclNumTypes, ncclNumOps, nullptr},  // keeps the table non-empty under any filter
};

LaunchFn find(ncclDataType_t type, ncclRedOp_t op) {
  for (const Entry& e : kTable) {
    if (e.type == type && e.op == op) return e.fn;
  }
  return nullptr;
}

}  // namespace

bool reduceCopyAvailable(ncclDataType_t type, ncclRedOp_t op) { return find(type, op) != nullptr; }

Status launchReduceCopy(ncclDataType_t type, ncclRedOp_t op, void* dst, const void* a, const void* b,
                        size_t count, void* stream) {
  LaunchFn fn = find(type, op);
  if (fn == nullptr) {
    return invalidUsage("no reduce-copy kernel for datatype ", static_cast<int>(type), " and op ",
                        static_cast<int>(op), " in this build (see BRAID_KERNEL_TYPES)");
  }
  return fn(dst, a, b, count, static_cast<hipStream_t>(stream));
}

}  // namespace braid::device
