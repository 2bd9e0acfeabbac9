#include "core/enqueue.h"

#include <cstring>
#include <type_traits>

#include "collectives/direct.h"
#include "collectives/ring.h"
#include "core/group.h"
#include "exec/datatypes.h"
#include "exec/host/host_prims.h"
#include "exec/reduce_ops.h"
#include "util/log.h"

namespace braid {
namespace {

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

// All-reduces of at most this many bytes go one-shot over direct connectors
// (one exchange) instead of around the ring (2(n-1) steps).
constexpr size_t kOneShotMaxBytes = 2048;
constexpr int kOneShotMaxRanks = 8;

bool useOneShot(const Communicator* comm, const CollArgs& a, size_t elemSize) {
  return a.type == CollType::AllReduce && a.count * elemSize <= kOneShotMaxBytes &&
         comm->nranks() <= kOneShotMaxRanks;
}

template <typename T, typename Op>
Status runOneShot(Communicator* comm, const CollArgs& a, uint64_t seq) {
  const int n = comm->nranks(), rank = comm->rank();
  PrimsContext ctx;
  ctx.abort = &comm->abortFlag();
  ctx.timeoutSec = comm->stallTimeoutSeconds();
  ctx.collective = a.name;
  ctx.seq = seq;
  std::vector<HostPrims<T, Op>> prims;
  prims.reserve(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    ctx.sendPeer = ctx.recvPeer = p;
    Connector* send = p == rank ? nullptr : &comm->p2pSend(p)->conn;
    Connector* recv = p == rank ? nullptr : &comm->p2pRecv(p)->conn;
    prims.emplace_back(send, recv, ctx);
  }
  coll::oneShotAllReduce([&](int p) -> HostPrims<T, Op>& { return prims[static_cast<size_t>(p)]; },
                         static_cast<const T*>(a.send), static_cast<T*>(a.recv), a.count, rank, n, Op());
  for (const auto& p : prims) BRAID_CHECK(p.status());
  return okStatus();
}

template <typename T, typename Op>
Status runTyped(Communicator* comm, const CollArgs& a, uint64_t seq) {
  if (useOneShot(comm, a, sizeof(T))) return runOneShot<T, Op>(comm, a, seq);
  const int n = comm->nranks(), rank = comm->rank();
  const T* in = static_cast<const T*>(a.send);
  T* out = static_cast<T*>(a.recv);
  ShmLink* link = comm->ring();
  PrimsContext ctx;
  ctx.abort = &comm->abortFlag();
  ctx.timeoutSec = comm->stallTimeoutSeconds();
  ctx.sendPeer = (rank + 1) % n;
  ctx.recvPeer = (rank - 1 + n) % n;
  ctx.channel = 0;
  ctx.collective = a.name;
  ctx.seq = seq;
  HostPrims<T, Op> prims(&link->send.conn, &link->recv.conn, ctx);
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
  const bool oneShot = useOneShot(comm, a, datatypeSize(a.datatype));
  BRAID_INFO(kLogColl, "%s #%llu count %zu datatype %d op %d root %d: %s, Simple, 1 channel", a.name,
             static_cast<unsigned long long>(seq), a.count, static_cast<int>(a.datatype), static_cast<int>(a.op),
             a.root, oneShot ? "one-shot" : "ring");
  if (comm->nranks() > 1) {
    if (oneShot) {
      std::vector<int> all;
      for (int p = 0; p < comm->nranks(); ++p) {
        if (p != comm->rank()) all.push_back(p);
      }
      BRAID_CHECK(comm->ensureP2p(all, all));
    } else {
      BRAID_CHECK(comm->ensureRing());
    }
  }
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
    groupDefer(comm, [comm, copy] { return runNow(comm, copy); });
    return okStatus();
  }
  return runNow(comm, args);
}

}  // namespace braid
