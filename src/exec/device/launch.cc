#include "exec/device/launch.h"

#include "exec/device/kernel_filter.h"

namespace braid::device {

bool collKernelsBuilt(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return BRAID_KERNEL_i8;
    case ncclUint8: return BRAID_KERNEL_u8;
    case ncclInt32: return BRAID_KERNEL_i32;
    case ncclUint32: return BRAID_KERNEL_u32;
    case ncclInt64: return BRAID_KERNEL_i64;
    case ncclUint64: return BRAID_KERNEL_u64;
    case ncclFloat16: return BRAID_KERNEL_f16;
    case ncclFloat32: return BRAID_KERNEL_f32;
    case ncclFloat64: return BRAID_KERNEL_f64;
    case ncclBfloat16: return BRAID_KERNEL_bf16;
    case ncclFloat8e4m3: return BRAID_KERNEL_e4m3;
    case ncclFloat8e5m2: return BRAID_KERNEL_e5m2;
    default: return false;
  }
}

Status launchCollectives(const KernelKey& key, const DevCollLaunch& l, void* stream) {
  if (key.move) return launchMove(key.proto, l, stream);
  const ncclDataType_t type = key.type;
  const DevOp op = key.op;
  const Protocol proto = key.proto;
  if (!collKernelsBuilt(type)) {
    return invalidUsage("datatype ", static_cast<int>(type),
                        " has no GPU kernels in this build (configured with BRAID_KERNEL_TYPES)");
  }
  switch (type) {
#if BRAID_KERNEL_i8
    case ncclInt8: return launchColl_i8(op, proto, l, stream);
#endif
#if BRAID_KERNEL_u8
    case ncclUint8: return launchColl_u8(op, proto, l, stream);
#endif
#if BRAID_KERNEL_i32
    case ncclInt32: return launchColl_i32(op, proto, l, stream);
#endif
#if BRAID_KERNEL_u32
    case ncclUint32: return launchColl_u32(op, proto, l, stream);
#endif
#if BRAID_KERNEL_i64
    case ncclInt64: return launchColl_i64(op, proto, l, stream);
#endif
#if BRAID_KERNEL_u64
    case ncclUint64: return launchColl_u64(op, proto, l, stream);
#endif
#if BRAID_KERNEL_f16
    case ncclFloat16: return launchColl_f16(op, proto, l, stream);
#endif
#if BRAID_KERNEL_f32
    case ncclFloat32: return launchColl_f32(op, proto, l, stream);
#endif
#if BRAID_KERNEL_f64
    case ncclFloat64: return launchColl_f64(op, proto, l, stream);
#endif
#if BRAID_KERNEL_bf16
    case ncclBfloat16: return launchColl_bf16(op, proto, l, stream);
#endif
#if BRAID_KERNEL_e4m3
    case ncclFloat8e4m3: return launchColl_e4m3(op, proto, l, stream);
#endif
#if BRAID_KERNEL_e5m2
    case ncclFloat8e5m2: return launchColl_e5m2(op, proto, l, stream);
#endif
    default: break;
  }
  return invalidArgument("datatype ", static_cast<int>(type), " is not supported");
}

}  // namespace braid::device
