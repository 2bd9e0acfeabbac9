// Launching the device kernels (cuda and hip flavors only): the host side
// of src/exec/device. Asynchronous on `stream` (a hipStream_t / cudaStream_t).
#pragma once

#include "exec/device/dev_work.h"
#include "nccl.h"
#include "util/status.h"

namespace braid::device {

// The operator a kernel reduces with (ncclAvg runs as Sum plus a division).
enum class DevOp { Sum, Prod, Min, Max, PreMulSum };

// LL128 kernels exist in the cuda flavor only: AMD's fabrics do not promise
// that a 128-byte line arrives at once (transports/transport.h).
#if defined(BRAID_GPU_CUDA)
constexpr bool kLL128Built = true;
#else
constexpr bool kLL128Built = false;
#endif

// Whether the kernel table runs `algo` in `proto` for `op` with `nranks`
// ranks (data movers pass Sum). To keep the table's compile time within
// CI's bounds, only sum (and average, a sum) has every algorithm; the
// other operators have Ring, and Direct for at most 2 ranks (the selector
// knows: TuneInput::fewAlgos). LL128 is sum's and the movers' Ring only
// (TuneInput::ll128).
constexpr bool kernelsRun(DevOp op, DevAlgo algo, int nranks, Protocol proto) {
  if (proto == Protocol::LL128) return kLL128Built && op == DevOp::Sum && algo == DevAlgo::Ring;
  return op == DevOp::Sum || algo == DevAlgo::Ring || (algo == DevAlgo::Direct && nranks <= 2);
}

// Whether a collective may join a fused launch (several collectives of a
// group in one kernel): the fused kernels hold sum (and the data movers)
// over Ring and the one-peer Direct in Simple and LL only, which is what
// groups of small and medium collectives on 2 GPUs run. Each would add to
// the table's compile time what its own kernel costs (fused LL128 kernels
// cost a tenth of a datatype's; LL128 runs only when NCCL_PROTO asks).
constexpr bool fusable(DevOp op, DevAlgo algo, int nranks, Protocol proto) {
  return op == DevOp::Sum && proto != Protocol::LL128 &&
         (algo == DevAlgo::Ring || (algo == DevAlgo::Direct && nranks <= 2));
}

// Whether the collectives run on one kernel, and so may share a launch:
// all-gather and broadcast run on bytes (one kernel per protocol for every
// datatype), the others on their datatype and operator.
constexpr bool moveOnly(DevColl c) {
  return c == DevColl::AllGather || c == DevColl::Broadcast;
}
struct KernelKey {
  ncclDataType_t type;
  DevOp op;
  Protocol proto;
  bool move;
  bool operator==(const KernelKey& o) const {
    return proto == o.proto && move == o.move && (move || (type == o.type && op == o.op));
  }
};

// One block per channel of the launch's widest collective (l.blocks());
// more than one collective only where each is fusable.
// All-gather and broadcast counts are in bytes (see DevCollArgs::count).
Status launchCollectives(const KernelKey& key, const DevCollLaunch& l, void* stream);

// One block per connector of the group (args.nBlocks).
Status launchP2p(const DevP2pArgs& args, void* stream);

// All-gather and broadcast on bytes, whatever the datatype: defined by the
// generated coll_move.hip.
Status launchMove(Protocol proto, const DevCollLaunch& l, void* stream);

// A zero-copy collective on symmetric windows (all-reduce and reduce-scatter
// with any operator; `move`: all-gather, on bytes), one block per channel.
Status launchSymmetric(ncclDataType_t type, DevOp op, bool move, const DevSymArgs& a, void* stream);
Status launchSymMove(const DevSymArgs& a, void* stream);

// Per-type entry points of the reducing collectives, defined by the generated
// coll_<type>.hip sources.
#define BRAID_DECLARE_KLAUNCH(name)                                                         \
  Status launchColl_##name(DevOp op, Protocol proto, const DevCollLaunch& l, void* stream); \
  Status launchSym_##name(DevOp op, const DevSymArgs& a, void* stream);
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
