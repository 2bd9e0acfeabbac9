#include "exec/device/launch.h"

#include "exec/device/kernel_filter.h"

namespace braid::device {

namespace {
// The entry points of the datatypes this build compiled (kernel_filter.h).
struct TypeKernels {
  ncclDataType_t type;
  Status (*coll)(DevOp, Protocol, const DevCollLaunch&, void*);
  Status (*sym)(DevOp, const DevSymArgs&, void*);
};
constexpr TypeKernels kTypeKernels[] = {
#if BRAID_KERNEL_i8
    {ncclInt8, &launchColl_i8, &launchSym_i8},
#endif
#if BRAID_KERNEL_u8
    {ncclUint8, &launchColl_u8, &launchSym_u8},
#endif
#if BRAID_KERNEL_i32
    {ncclInt32, &launchColl_i32, &launchSym_i32},
#endif
#if BRAID_KERNEL_u32
    {ncclUint32, &launchColl_u32, &launchSym_u32},
#endif
#if BRAID_KERNEL_i64
    {ncclInt64, &launchColl_i64, &launchSym_i64},
#endif
#if BRAID_KERNEL_u64
    {ncclUint64, &launchColl_u64, &launchSym_u64},
#endif
#if BRAID_KERNEL_f16
    {ncclFloat16, &launchColl_f16, &launchSym_f16},
#endif
#if BRAID_KERNEL_f32
    {ncclFloat32, &launchColl_f32, &launchSym_f32},
#endif
#if BRAID_KERNEL_f64
    {ncclFloat64, &launchColl_f64, &launchSym_f64},
#endif
#if BRAID_KERNEL_bf16
    {ncclBfloat16, &launchColl_bf16, &launchSym_bf16},
#endif
#if BRAID_KERNEL_e4m3
    {ncclFloat8e4m3, &launchColl_e4m3, &launchSym_e4m3},
#endif
#if BRAID_KERNEL_e5m2
    {ncclFloat8e5m2, &launchColl_e5m2, &launchSym_e5m2},
#endif
    {ncclNumTypes, nullptr, nullptr},  // keeps the table non-empty under any filter
};

Status kernelsOf(ncclDataType_t type, const TypeKernels** out) {
  for (const TypeKernels& k : kTypeKernels) {
    if (k.type == type && k.coll != nullptr) {
      *out = &k;
      return okStatus();
    }
  }
  if (static_cast<int>(type) < 0 || type >= ncclNumTypes) {
    return invalidArgument("datatype ", static_cast<int>(type), " is not supported");
  }
  return invalidUsage("datatype ", static_cast<int>(type),
                      " has no GPU kernels in this build (configured with BRAID_KERNEL_TYPES)");
}
}  // namespace

Status launchCollectives(const KernelKey& key, const DevCollLaunch& l, void* stream) {
  if (key.move) return launchMove(key.proto, l, stream);
  const TypeKernels* k = nullptr;
  BRAID_CHECK(kernelsOf(key.type, &k));
  return k->coll(key.op, key.proto, l, stream);
}

Status launchSymmetric(ncclDataType_t type, DevOp op, bool move, const DevSymArgs& a, void* stream) {
  if (move) return launchSymMove(a, stream);
  const TypeKernels* k = nullptr;
  BRAID_CHECK(kernelsOf(type, &k));
  return k->sym(op, a, stream);
}

}  // namespace braid::device
