// Launching the device kernels (cuda and hip flavors only): the host side
// of src/exec/device. Asynchronous on `stream` (a hipStream_t / cudaStream_t).
#pragma once

#include "exec/device/dev_work.h"
#include "nccl.h"
#include "util/status.h"

namespace braid::device {

// The operator a kernel reduces with (ncclAvg runs as Sum plus a division).
enum class DevOp { Sum, Prod, Min, Max, PreMulSum };

// Whether the kernel table runs `algo` for `op` with `nranks` ranks. To
// keep the table's compile time within CI's bounds, only sum (and average,
// a sum) has every algorithm; the other operators have Ring, and Direct
// for at most 2 ranks (the selector knows: TuneInput::fewAlgos).
constexpr bool kernelsRun(DevOp op, DevAlgo algo, int nranks) {
  return op == DevOp::Sum || algo == DevAlgo::Ring || (algo == DevAlgo::Direct && nranks <= 2);
}

// False if BRAID_KERNEL_TYPES left `type` out of this build.
bool collKernelsBuilt(ncclDataType_t type);

// One block per channel (args.nChannels).
Status launchCollective(ncclDataType_t type, DevOp op, Protocol proto, const DevCollArgs& args, void* stream);

// One block per connector of the group (args.nBlocks).
Status launchP2p(const DevP2pArgs& args, void* stream);

// All-gather and broadcast on bytes (args.count and chunkElems in bytes),
// whatever the datatype: defined by the generated coll_move.hip.
Status launchMove(Protocol proto, const DevCollArgs& args, void* stream);

// Per-type entry points of the reducing collectives, defined by the generated
// coll_<type>.hip sources.
#define BRAID_DECLARE_KLAUNCH(name) \
  Status launchColl_##name(DevOp op, Protocol proto, const DevCollArgs& a, void* stream);
BRAID_DECLARE_KLAUNCH(i8)
BRAID_DECLARE_KLAUNCH(u8)
BRAID_DECLARE_KLAUNCH(i32)
BRAID_DECLARE_KLAUNCH(u32)
BRAID_DECLARE_KLAUNCH(i64)
BRAID_DECLARE_KLAUNCH(u64)
BRAID_DECLARE_KLAUNCH(f16)
BRAID_DECLARE_KLAUNCH(f32)
BRAID_DECLARE_KLAUNCH(f64)
BRAID_DECLARE_KLAUNCH(bf16)
BRAID_DECLARE_KLAUNCH(e4m3)
BRAID_DECLARE_KLAUNCH(e5m2)
#undef BRAID_DECLARE_KLAUNCH

}  // namespace braid::device
