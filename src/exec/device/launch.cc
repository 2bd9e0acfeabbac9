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

Status launchCollective(ncclDataType_t type, DevOp op, Protocol proto, const DevCollArgs& a, void* stream) {
  if (a.coll == DevColl::AllGather || a.coll == DevColl::Broadcast) {
    const uint64_t size = static_cast<uint64_t>(a.elemSize);
    if (size == 0) return internalError("a data-movement launch without its element size");
    DevCollArgs bytes = a;
    bytes.count *= size;
    bytes.chunkElems *= size;
    return launchMove(proto, bytes, stream);
  }
  if (!collKernelsBuilt(type)) {
    return invalidUsage("datatype ", static_cast<int>(type),
                        " has no GPU kernels in this build (configured with BRAID_KERNEL_TYPES)");
  }
  switch (type) {
#if BRAID_KERNEL_i8
    case ncclInt8: return launchColl_i8(op, proto, a, stream);
#endif
#if BRAID_KERNEL_u8
    case ncclUint8: return launchColl_u8(op, proto, a, stream);
#endif
#if BRAID_KERNEL_i32
    case ncclInt32: return launchColl_i32(op, proto, a, stream);
#endif
#if BRAID_KERNEL_u32
    case ncclUint32: return launchColl_u32(op, proto, a, stream);
#endif
#if BRAID_KERNEL_i64
    case ncclInt64: return launchColl_i64(op, proto, a, stream);
#endif
#if BRAID_KERNEL_u64
    case ncclUint64: return launchColl_u64(op, proto, a, stream);
#endif
#if BRAID_KERNEL_f16
    case ncclFloat16: return launchColl_f16(op, proto, a, stream);
#endif
#if BRAID_KERNEL_f32
    case ncclFloat32: return launchColl_f32(op, proto, a, stream);
#endif
#if BRAID_KERNEL_f64
    case ncclFloat64: return launchColl_f64(op, proto, a, stream);
#endif
#if BRAID_KERNEL_bf16
    case ncclBfloat16: return launchColl_bf16(op, proto, a, stream);
#endif
#if BRAID_KERNEL_e4m3
    case ncclFloat8e4m3: return launchColl_e4m3(op, proto, a, stream);
#endif
#if BRAID_KERNEL_e5m2
    case ncclFloat8e5m2: return launchColl_e5m2(op, proto, a, stream);
#endif
    default: break;
  }
  return invalidArgument("datatype ", static_cast<int>(type), " is not supported");
}

}  // namespace braid::device
