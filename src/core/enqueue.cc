#include "core/enqueue.h"

#include <cstring>
#include <mutex>
#include <type_traits>

#include "collectives/direct.h"
#include "collectives/ring.h"
#include "collectives/symmetric.h"
#include "collectives/tree.h"
#include "core/gpu_engine.h"
#include "core/group.h"
#include "exec/datatypes.h"
#include "exec/host/host_prims.h"
#include "exec/reduce_ops.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

BoolParam paramCheckColl("CHECK_COLL", false,
                         "Before every collective, compare its operation, count, datatype, root, reduction "
                         "operator and sequence number across ranks (one bootstrap all-gather each) and fail "
                         "with a message naming the ranks that disagree");
SizeParam paramChunkSize("CHUNK_SIZE", 0,
                         "Bytes one FIFO step of a ring carries (0: 128K for Simple; at most BUFFSIZE/8); "
                         "smaller steps pipeline better, larger ones synchronize less");
SizeParam paramHostStreamBytes("HOST_STREAM_BYTES", 32u << 20,
                               "Host collectives whose output on a rank is at least this many bytes write it "
                               "with non-temporal (streaming) stores, sparing the reads of destination lines "
                               "the caches could not keep anyway (0: never)");

constexpr size_t kDefaultChunkBytes = 128 * 1024;
constexpr size_t kChannelAlignBytes = 64;
// A zero-copy collective moves this much at a time, so what goes to several
// outputs is read back from cache.
constexpr size_t kZeroCopyBlockBytes = 16 * 1024;

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

// What every channel of one collective shares.
struct Plan {
  TuneChoice choice;
  uint64_t seq = 0;
  ScalarBits scalar;                // a PreMulSum operator's scalar, read once when the collective starts
  std::atomic<bool> cancel{false};  // raised by the first channel that fails
  // Zero-copy: the windows holding this rank's buffers, and the offsets.
  uint64_t sendWindow = 0, sendOffset = 0, recvWindow = 0, recvOffset = 0;
};

// Channel c's part of `count` elements: contiguous, cache-line aligned.
void channelPart(size_t count, size_t elemSize, int nch, int c, size_t* lo, size_t* len) {
  const size_t align = std::max<size_t>(1, kChannelAlignBytes / elemSize);
  size_t per = (count + static_cast<size_t>(nch) - 1) / static_cast<size_t>(nch);
  per = (per + align - 1) / align * align;
  *lo = std::min(count, per * static_cast<size_t>(c));
  *len = std::min(count, *lo + per) - *lo;
}

template <typename T, typename Op, Protocol P>
Status runChannel(Communicator* comm, const CollArgs& a, Plan& plan, int c, Op op) {
  const int n = comm->nranks(), rank = comm->rank();
  size_t lo = 0, len = 0;
  const int nch = plan.choice.nChannels;
  channelPart(a.count, sizeof(T), nch, c, &lo, &len);
  // Non-roots of broadcast and reduce may pass null buffers they never use.
  const T* in = a.send != nullptr ? static_cast<const T*>(a.send) + lo : nullptr;
  T* out = a.recv != nullptr ? static_cast<T*>(a.recv) + lo : nullptr;

  PrimsContext ctx;
  ctx.abort = &comm->abortFlag();
  ctx.cancel = &plan.cancel;
  ctx.timeoutSec = comm->stallTimeoutSeconds();
  ctx.spin = !comm->oversubscribed();
  const size_t outBytes = a.count * sizeof(T) * static_cast<size_t>(a.type == CollType::AllGather ? n : 1);
  ctx.streamOutput =
      paramHostStreamBytes.get() > 0 && outBytes >= static_cast<size_t>(paramHostStreamBytes.get());
  ctx.channel = c;
  ctx.collective = a.name;
  ctx.seq = plan.seq;
  ctx.stall = comm;
  Channel& ch = comm->channels()[c];

  if (plan.choice.zeroCopy) {
    if constexpr (Op::kHasPre) {
      return internalError(a.name, ": PreMulSum cannot run zero-copy");  // inWindows() rules it out
    } else {
      SymmetricWindows& windows = comm->windows();
      SymCall call;
      call.rank = rank;
      call.nranks = n;
      call.slots = windows.slots(c);
      call.windows = &windows;
      call.sendWindow = plan.sendWindow, call.sendOffset = plan.sendOffset;
      call.recvWindow = plan.recvWindow, call.recvOffset = plan.recvOffset;
      call.channelOffset = lo;
      HostSymPrims<T, Op> prims(call, ctx, op);
      const size_t block = kZeroCopyBlockBytes / sizeof(T);
      switch (a.type) {
        case CollType::AllReduce: coll::symmetricAllReduce(prims, len, block); break;
        case CollType::AllGather: coll::symmetricAllGather(prims, len, a.count, block); break;
        case CollType::ReduceScatter: coll::symmetricReduceScatter(prims, len, a.count, block); break;
        default: return internalError(a.name, " cannot run zero-copy");
      }
      return prims.status();
    }
  }
  switch (plan.choice.algo) {
    case Algo::Direct: {
      PeerConnector sends[kMaxPrimsPeers], recvs[kMaxPrimsPeers];
      int k = 0;
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        sends[k] = {&comm->p2pSend(p)->conn, p};
        recvs[k++] = {&comm->p2pRecv(p)->conn, p};
      }
      HostPrims<T, Op, P> prims(sends, k, recvs, k, ctx, op, /*localPos=*/rank);
      coll::oneShotAllReduce(prims, in, out, len, prims.maxElems());
      return prims.status();
    }
    case Algo::Tree: {
      TreeConnectors& t = *ch.tree;
      const TreeLinks& l = t.links;
      PeerConnector parentUp{l.up >= 0 ? &t.upSend->conn : nullptr, l.up};
      PeerConnector parentDown{l.up >= 0 ? &t.downRecv->conn : nullptr, l.up};
      PeerConnector childUp[kMaxTreeChildren], childDown[kMaxTreeChildren];
      for (int i = 0; i < l.ndown; ++i) {
        childUp[i] = {&t.upRecv[i]->conn, l.down[i]};
        childDown[i] = {&t.downSend[i]->conn, l.down[i]};
      }
      HostPrims<T, Op, P> up(&parentUp, l.up >= 0 ? 1 : 0, childUp, l.ndown, ctx, op);
      HostPrims<T, Op, P> down(childDown, l.ndown, &parentDown, l.up >= 0 ? 1 : 0, ctx, op);
      const size_t chunk = std::max<size_t>(1, std::min(up.maxElems(), kDefaultChunkBytes / sizeof(T)));
      coll::treeAllReduce(up, down, in, out, len, {l.up >= 0, l.ndown > 0}, chunk, kConnectorSteps / 2);
      return up.failed() ? up.status() : down.status();
    }
    case Algo::Ring: break;
  }
  const RingLink& ring = *ch.ring;
  HostPrims<T, Op, P> prims({&ring.send->conn, ring.next}, {&ring.recv->conn, ring.prev}, ctx, op);
  // The ring's order follows the schedule: positions, not ranks, drive it.
  const int pos = ring.position;
  const int* rankAt = ring.rankAt.data();
  size_t chunk = prims.maxElems();
  if (P == Protocol::Simple) {
    size_t want = paramChunkSize.get() > 0 ? static_cast<size_t>(paramChunkSize.get()) : kDefaultChunkBytes;
    chunk = std::min(chunk, std::max<size_t>(1, want / sizeof(T)));
  }
  switch (a.type) {
    case CollType::AllReduce: coll::ringAllReduce(prims, in, out, len, pos, n, chunk); break;
    case CollType::AllGather: coll::ringAllGather(prims, in, out, len, a.count, pos, n, chunk, rankAt); break;
    case CollType::ReduceScatter:
      coll::ringReduceScatter(prims, in, out, len, a.count, pos, n, chunk, rankAt);
      break;
    case CollType::Broadcast:
      coll::ringBroadcast(prims, in, out, len, pos, n, ring.positionOf(a.root), chunk);
      break;
    case CollType::Reduce:
      coll::ringReduce(prims, in, out, len, pos, n, ring.positionOf(a.root), chunk);
      break;
  }
  return prims.status();
}

template <typename T, typename Op>
Status runTyped(Communicator* comm, const CollArgs& a, Plan& plan, Op op) {
  if (comm->nranks() == 1) {
    if (a.count == 0) return okStatus();
    const T* in = static_cast<const T*>(a.send);
    T* out = static_cast<T*>(a.recv);
    if constexpr (Op::kHasPre) {
      for (size_t i = 0; i < a.count; ++i) out[i] = op.pre(in[i]);
    } else if (in != out) {
      copyElems(out, in, a.count);
    }
    return okStatus();
  }
  auto channel = [&](int c) -> Status {
    Channel& ch = comm->channels()[c];
    ch.issued.fetch_add(1, std::memory_order_relaxed);
    Status s = plan.choice.proto == Protocol::LL ? runChannel<T, Op, Protocol::LL>(comm, a, plan, c, op)
                                                 : runChannel<T, Op, Protocol::Simple>(comm, a, plan, c, op);
    if (s.ok()) ch.completed.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  if (plan.choice.nChannels == 1) return channel(0);
  std::mutex mutex;
  Status first;
  (void)comm->executor().run(plan.choice.nChannels, [&](int c) -> Status {
    LogRankScope scope(comm->rank());
    Status s = channel(c);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (first.ok()) first = s;  // the first failure in time is the cause; the others were cancelled by it
      plan.cancel.store(true);
    }
    return s;
  });
  return first;
}

template <typename T>
Status runWithOp(Communicator* comm, const CollArgs& a, Plan& plan) {
  const int op = static_cast<int>(a.op);
  if (op >= ncclNumOps) {
    OpPreMulSum<T> pre;
    std::memcpy(&pre.scalar, plan.scalar.bytes, sizeof(T));
    return runTyped<T>(comm, a, plan, pre);
  }
  switch (op) {
    case ncclProd: return runTyped<T>(comm, a, plan, OpProd());
    case ncclMin: return runTyped<T>(comm, a, plan, OpMin());
    case ncclMax: return runTyped<T>(comm, a, plan, OpMax());
    default: return runTyped<T>(comm, a, plan, OpSum());  // sum, and avg before its division
  }
}

template <typename T>
Status runAndFinish(Communicator* comm, const CollArgs& a, Plan& plan) {
  BRAID_CHECK(runWithOp<T>(comm, a, plan));
  if (a.op == ncclAvg && a.type != CollType::AllGather && a.type != CollType::Broadcast) {
    bool holdsResult = a.type != CollType::Reduce || comm->rank() == a.root;
    if (holdsResult) divideBy(static_cast<T*>(a.recv), a.count, comm->nranks());
  }
  return okStatus();
}

Status dispatch(Communicator* comm, const CollArgs& a, Plan& plan) {
  switch (a.datatype) {
    case ncclInt8: return runAndFinish<int8_t>(comm, a, plan);
    case ncclUint8: return runAndFinish<uint8_t>(comm, a, plan);
    case ncclInt32: return runAndFinish<int32_t>(comm, a, plan);
    case ncclUint32: return runAndFinish<uint32_t>(comm, a, plan);
    case ncclInt64: return runAndFinish<int64_t>(comm, a, plan);
    case ncclUint64: return runAndFinish<uint64_t>(comm, a, plan);
    case ncclFloat16: return runAndFinish<Half>(comm, a, plan);
    case ncclFloat32: return runAndFinish<float>(comm, a, plan);
    case ncclFloat64: return runAndFinish<double>(comm, a, plan);
    case ncclBfloat16: return runAndFinish<BFloat16>(comm, a, plan);
    case ncclFloat8e4m3: return runAndFinish<Fp8E4M3>(comm, a, plan);
    case ncclFloat8e5m2: return runAndFinish<Fp8E5M2>(comm, a, plan);
    default: return invalidArgument("datatype ", static_cast<int>(a.datatype), " is not supported");
  }
}

// ---- BRAID_CHECK_COLL ------------------------------------------------------------

struct CollRecord {
  uint64_t seq;
  uint64_t count;
  int32_t type, datatype, op, root;
  char name[24];
};

std::string describe(const CollRecord& r) {
  std::string what = strCat(r.name, " #", r.seq, " (count ", r.count, ", ",
                            datatypeName(static_cast<ncclDataType_t>(r.datatype)));
  CollType t = static_cast<CollType>(r.type);
  if (t != CollType::AllGather && t != CollType::Broadcast) what += strCat(", op ", r.op);
  if (t == CollType::Broadcast || t == CollType::Reduce) what += strCat(", root ", r.root);
  return what + ")";
}

Status checkAcrossRanks(Communicator* comm, const CollArgs& a, uint64_t seq) {
  std::vector<CollRecord> all(static_cast<size_t>(comm->nranks()));
  CollRecord& mine = all[static_cast<size_t>(comm->rank())];
  std::memset(&mine, 0, sizeof(mine));
  mine.seq = seq;
  mine.count = a.count;
  mine.type = static_cast<int32_t>(a.type);
  mine.datatype = static_cast<int32_t>(a.datatype);
  const bool reduces = a.type != CollType::AllGather && a.type != CollType::Broadcast;
  mine.op = reduces ? static_cast<int32_t>(a.op) : -1;
  mine.root = (a.type == CollType::Broadcast || a.type == CollType::Reduce) ? a.root : -1;
  std::strncpy(mine.name, a.name, sizeof(mine.name) - 1);
  BRAID_CHECK(comm->bootstrap()
                  ->allGather(all.data(), sizeof(CollRecord))
                  .withContext(strCat("BRAID_CHECK_COLL: comparing ", a.name, " #", seq, " across ranks")));
  // Everyone compares against rank 0, so every rank reports the same thing.
  const CollRecord& ref = all[0];
  std::string diff;
  int differing = 0;
  for (size_t r = 1; r < all.size(); ++r) {
    const CollRecord& x = all[r];
    if (x.seq == ref.seq && x.count == ref.count && x.type == ref.type && x.datatype == ref.datatype &&
        x.op == ref.op && x.root == ref.root) {
      continue;
    }
    if (++differing <= 4) diff += strCat("; rank ", r, " called ", describe(x));
  }
  if (differing == 0) return okStatus();
  return invalidUsage("BRAID_CHECK_COLL: ranks disagree: rank 0 called ", describe(ref), diff,
                      differing > 4 ? strCat("; and ", differing - 4, " more ranks") : "");
}

// Bytes of one rank's input, as the selector counts them.
size_t tuneBytes(const CollArgs& a, int nranks) {
  size_t bytes = a.count * datatypeSize(a.datatype);
  return a.type == CollType::ReduceScatter ? bytes * static_cast<size_t>(nranks) : bytes;
}

// Whether both buffers of a collective that can run zero-copy are in
// zero-copy windows (every rank decides alike when every rank passes
// windowed buffers, as NCCL requires of symmetric windows).
bool inWindows(Communicator* comm, const CollArgs& a, Plan* plan) {
  const size_t bytes = a.count * datatypeSize(a.datatype), all = bytes * static_cast<size_t>(comm->nranks());
  size_t sendBytes = bytes, recvBytes = bytes;
  switch (a.type) {
    case CollType::AllReduce: break;
    case CollType::AllGather: recvBytes = all; break;
    case CollType::ReduceScatter: sendBytes = all; break;
    default: return false;  // broadcast and reduce: non-roots need not pass both buffers
  }
  if (a.type != CollType::AllGather && static_cast<int>(a.op) >= ncclNumOps) return false;  // PreMulSum
  return comm->windows().find(a.send, sendBytes, &plan->sendWindow, &plan->sendOffset) &&
         comm->windows().find(a.recv, recvBytes, &plan->recvWindow, &plan->recvOffset);
}

Status runNow(Communicator* comm, const CollArgs& a) {
  // Comparing across ranks blocks on them (see groupMustNotBlock).
  const bool check = paramCheckColl.get() && comm->nranks() > 1;
  if (check && groupMustNotBlock()) return groupWouldBlock();
  Plan plan;
  LogRankScope scope(comm->rank());
  const bool gpu = comm->backend() == Backend::Gpu;
  Status s = [&]() -> Status {
    // On GPUs a device-resident PreMulSum scalar is read by the kernel.
    BRAID_CHECK(comm->redOps().resolve(a.op, a.datatype, &plan.scalar, /*leavePointer=*/gpu));
    TuneInput in{a.type,
                 tuneBytes(a, comm->nranks()),
                 comm->nranks(),
                 comm->nnodes(),
                 comm->localRanks(),
                 gpu ? kMaxChannels : comm->hostChannels(),
                 gpu ? 0 : Communicator::hostCores()};
    in.gpu = gpu;
    in.ringBusGBs = comm->topologySchedule().ringBusBw;
    in.treeBusGBs = comm->topologySchedule().treeBusBw;
    // Where the communicator has windows, first the choice as if the buffers
    // were in them: only when that is zero-copy are the buffers looked up (a
    // lock each), so small collectives skip the lookup. Otherwise the best
    // choice without windows (which may be a Direct/Simple that the
    // zero-copy candidate displaced).
    in.windows = !gpu && comm->nranks() > 1 && comm->windows().any();
    plan.choice = comm->choices().select(in);
    if (in.windows && (!plan.choice.zeroCopy || !inWindows(comm, a, &plan))) {
      in.windows = false;
      plan.choice = comm->choices().select(in);
    }
    // A channel gets at least a cache line's worth, so tiny counts use one.
    const size_t align = std::max<size_t>(1, kChannelAlignBytes / datatypeSize(a.datatype));
    plan.choice.nChannels = static_cast<int>(std::max<size_t>(
        1, std::min<size_t>(static_cast<size_t>(plan.choice.nChannels), (a.count + align - 1) / align)));
    GpuEngine* engine = nullptr;
    if (gpu) {
      BRAID_CHECK(comm->gpuEngine(&engine));
      plan.choice.chunkBytes = static_cast<size_t>(paramChunkSize.get());
      if (groupMustNotBlock() && !engine->ready(a, plan.choice)) return groupWouldBlock();
    }
    plan.seq = comm->nextCollectiveSeq();
    if (check) BRAID_CHECK(checkAcrossRanks(comm, a, plan.seq));
    BRAID_INFO(kLogColl,
               "%s #%llu count %zu datatype %d op %d root %d: %s/%s%s, %d channel%s (estimated %.1f us)%s%s",
               a.name, static_cast<unsigned long long>(plan.seq), a.count, static_cast<int>(a.datatype),
               static_cast<int>(a.op), a.root, algoName(plan.choice.algo), protocolName(plan.choice.proto),
               plan.choice.zeroCopy ? " zero-copy" : "", plan.choice.nChannels,
               plan.choice.nChannels == 1 ? "" : "s", plan.choice.estimatedUs,
               plan.choice.note.empty() ? "" : "; ", plan.choice.note.c_str());
    if (gpu) return engine->collective(a, plan.choice, plan.scalar);
    if (comm->nranks() > 1) {
      BRAID_CHECK(comm->ensureChannels(plan.choice.algo, plan.choice.nChannels));
      if (plan.choice.algo == Algo::Direct && !plan.choice.zeroCopy) BRAID_CHECK(comm->ensureDirect());
    }
    // A failed net connector raises plan.cancel, ending the channels' waits at once.
    comm->connectors().watch(&plan.cancel);
    Status run = dispatch(comm, a, plan);
    comm->connectors().unwatch(&plan.cancel);
    return run;
  }();
  if (isGroupWouldBlock(s)) return s;
  s = comm->explainFailure(std::move(s));
  if (!s.ok()) comm->setAsyncError(s);  // the communicator is unusable now: say so to every caller
  return s;
}

}  // namespace

Status enqueueCollective(Communicator* comm, const CollArgs& args) {
  if ((args.type == CollType::Broadcast || args.type == CollType::Reduce) && args.root >= comm->nranks()) {
    return invalidArgument("argument 'root' is ", args.root, "; the communicator has ", comm->nranks(),
                           " ranks");
  }
  if (args.type != CollType::AllGather && args.type != CollType::Broadcast) {
    BRAID_CHECK(comm->redOps().resolve(args.op, args.datatype));
  }
  if (groupDepth() > 0) {
    groupDefer(comm, args, runNow);
    return okStatus();
  }
  return runNow(comm, args);
}

}  // namespace braid
