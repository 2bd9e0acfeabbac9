#include "core/enqueue.h"

#include <cstring>
#include <type_traits>

#include "collectives/ring.h"
#include "core/group.h"
#include "exec/datatypes.h"
#include "exec/host/host_prims.h"
#include "exec/reduce_ops.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

IntParam paramStallTimeout("STALL_TIMEOUT", 300,
                           "Seconds a collective may make no progress before the communicator fails with "
                           "an error naming the collective, its sequence number, the channel and the peer");

// Divides every element by n (ncclAvg after a sum). Integers truncate, as
// NCCL's integer average does.
template <typename T>
void divideBy(T* data, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_arithmetic_v<T>) {
      data[i] = static_cast<T>(data[i] / static_cast<T>(n));
    } else {
      data[i] = T::fromFloat(data[i].toFloat() / static_cast<float>(n));
    }
  }
}

template <typename T, typename Op>
Status runTyped(Communicator* comm, const CollArgs& a, uint64_t seq) {
  const int n = comm->nranks(), rank = comm->rank();
  const T* in = static_cast<const T*>(a.send);
  T* out = static_cast<T*>(a.recv);
  ShmLink* link = comm->ring();
  std::string what = strCat(a.name, " #", seq);
  PrimsContext ctx;
  ctx.abort = &comm->abortFlag();
  ctx.timeoutSec = static_cast<double>(paramStallTimeout.get());
  ctx.sendPeer = (rank + 1) % n;
  ctx.recvPeer = (rank - 1 + n) % n;
  ctx.channel = 0;
  ctx.collective = what.c_str();
  HostPrims<T, Op> prims(&link->send, &link->recv, ctx);
  switch (a.type) {
    case CollType::AllReduce: coll::ringAllReduce(prims, in, out, a.count, rank, n); break;
    case CollType::AllGather: coll::ringAllGather(prims, in, out, a.count, rank, n); break;
    case CollType::ReduceScatter: coll::ringReduceScatter(prims, in, out, a.count, rank, n); break;
    case CollType::Broadcast: coll::ringBroadcast(prims, in, out, a.count, rank, n, a.root); break;
    case CollType::Reduce: coll::ringReduce(prims, in, out, a.count, rank, n, a.root); break;
  }
  return prims.status();
}

template <typename T>
Status runWithOp(Communicator* comm, const CollArgs& a, uint64_t seq) {
  switch (static_cast<int>(a.op)) {
    case ncclProd: return runTyped<T, OpProd>(comm, a, seq);
    case ncclMin: return runTyped<T, OpMin>(comm, a, seq);
    case ncclMax: return runTyped<T, OpMax>(comm, a, seq);
    default: return runTyped<T, OpSum>(comm, a, seq);  // sum, and avg before its division
  }
}

template <typename T>
Status runAndFinish(Communicator* comm, const CollArgs& a, uint64_t seq) {
  const int n = comm->nranks();
  if (n == 1) {
    size_t elems = a.count;
    if (a.send != a.recv && elems > 0) std::memcpy(a.recv, a.send, elems * sizeof(T));
  } else {
    BRAID_CHECK(runWithOp<T>(comm, a, seq));
  }
  if (a.op == ncclAvg && a.type != CollType::AllGather && a.type != CollType::Broadcast) {
    bool holdsResult = a.type != CollType::Reduce || comm->rank() == a.root;
    if (holdsResult) divideBy(static_cast<T*>(a.recv), a.count, n);
  }
  return okStatus();
}

Status dispatch(Communicator* comm, const CollArgs& a, uint64_t seq) {
  switch (a.datatype) {
    case ncclInt8: return runAndFinish<int8_t>(comm, a, seq);
    case ncclUint8: return runAndFinish<uint8_t>(comm, a, seq);
    case ncclInt32: return runAndFinish<int32_t>(comm, a, seq);
    case ncclUint32: return runAndFinish<uint32_t>(comm, a, seq);
    case ncclInt64: return runAndFinish<int64_t>(comm, a, seq);
    case ncclUint64: return runAndFinish<uint64_t>(comm, a, seq);
    case ncclFloat16: return runAndFinish<Half>(comm, a, seq);
    case ncclFloat32: return runAndFinish<float>(comm, a, seq);
    case ncclFloat64: return runAndFinish<double>(comm, a, seq);
    case ncclBfloat16: return runAndFinish<BFloat16>(comm, a, seq);
    case ncclFloat8e4m3: return runAndFinish<Fp8E4M3>(comm, a, seq);
    case ncclFloat8e5m2: return runAndFinish<Fp8E5M2>(comm, a, seq);
    default: return invalidArgument("datatype ", static_cast<int>(a.datatype), " is not supported");
  }
}

Status runNow(Communicator* comm, const CollArgs& a) {
  if (comm->backend() != Backend::Host) {
    return invalidUsage(a.name, " on the GPU backend is not available in this release; set BRAID_BACKEND=host "
                        "to run collectives on the CPU");
  }
  uint64_t seq = comm->nextCollectiveSeq();
  LogRankScope scope(comm->rank());
  BRAID_INFO(kLogColl, "%s #%llu count %zu datatype %d op %d root %d: ring, Simple, 1 channel", a.name,
             static_cast<unsigned long long>(seq), a.count, static_cast<int>(a.datatype), static_cast<int>(a.op),
             a.root);
  if (comm->nranks() > 1) BRAID_CHECK(comm->ensureRing());
  Status s = dispatch(comm, a, seq);
  if (!s.ok()) comm->setAsyncError(s);  // the communicator is unusable now: say so to every caller
  return s;
}

}  // namespace

Status enqueueCollective(Communicator* comm, const CollArgs& args) {
  if ((args.type == CollType::Broadcast || args.type == CollType::Reduce) && args.root >= comm->nranks()) {
    return invalidArgument("argument 'root' is ", args.root, "; the communicator has ", comm->nranks(), " ranks");
  }
  if (groupDepth() > 0) {
    CollArgs copy = args;
    groupDefer([comm, copy] { return runNow(comm, copy); });
    return okStatus();
  }
  return runNow(comm, args);
}

}  // namespace braid
