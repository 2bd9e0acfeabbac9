// The definitions behind core/host_coll.h, included only by the generated
// per-datatype sources (host_coll_<type>.cc), each of which instantiates
// runHostCollective for its type.
#pragma once

#include <algorithm>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "collectives/direct.h"
#include "collectives/ring.h"
#include "collectives/symmetric.h"
#include "collectives/tree.h"
#include "core/host_coll.h"
#include "core/symmetric.h"
#include "exec/host/host_prims.h"
#include "exec/reduce_ops.h"
#include "util/log.h"

namespace braid {
namespace host_coll {

static_assert(coll::kDirectMaxPeers == kMaxPrimsPeers, "the direct algorithms' peers fit the primitives");

// Tree all-reduce steps (Simple).
constexpr size_t kTreeChunkBytes = 128 * 1024;
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

// Channel c's part of `count` elements: contiguous, cache-line aligned.
inline void channelPart(size_t count, size_t elemSize, int nch, int c, size_t* lo, size_t* len) {
  const size_t align = std::max<size_t>(1, kChannelAlignBytes / elemSize);
  size_t per = (count + static_cast<size_t>(nch) - 1) / static_cast<size_t>(nch);
  per = (per + align - 1) / align * align;
  *lo = std::min(count, per * static_cast<size_t>(c));
  *len = std::min(count, *lo + per) - *lo;
}

// All-gather and broadcast never look at values: enqueue.cc runs them on
// bytes with OpSum, and only that instantiation compiles them.
template <typename T, typename Op>
constexpr bool kMovesData = std::is_same_v<T, uint8_t>&& std::is_same_v<Op, OpSum>;

template <typename T, typename Op, Protocol P>
Status runChannel(Communicator* comm, const CollArgs& a, HostPlan& plan, int c, Op op) {
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
  ctx.peerEnded = comm->connectors().peerEnded();
  ctx.peerClosed = [](void* sink, int peer) { return static_cast<NetErrorSink*>(sink)->failIfClosed(peer); };
  ctx.peerClosedArg = &comm->connectors().errorSink();
  ctx.timeoutSec = comm->stallTimeoutSeconds();
  ctx.spin = !comm->oversubscribed();
  const size_t outBytes = a.count * sizeof(T) * static_cast<size_t>(a.type == CollType::AllGather ? n : 1);
  ctx.streamOutput = plan.streams(outBytes);
  ctx.channel = c;
  ctx.collective = a.name;
  ctx.seq = plan.seq;
  ctx.stall = comm;
  Channel& ch = comm->channels()[c];

  if (plan.choice.zeroCopy) {
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
      case CollType::AllGather:
        if constexpr (kMovesData<T, Op>) coll::symmetricAllGather(prims, len, a.count, block);
        break;
      case CollType::ReduceScatter: coll::symmetricReduceScatter(prims, len, a.count, block); break;
      default: return internalError(a.name, " cannot run zero-copy");
    }
    return prims.status();
  }
  switch (plan.choice.algo) {
    case Algo::Direct:
    case Algo::TwoShot: {
      // Every peer in rank order; a rooted collective's ranks keep only
      // the connectors they use (the root's to and from every peer, the
      // others' to and from the root).
      const bool rooted = a.type == CollType::Broadcast || a.type == CollType::Reduce;
      PeerConnector sends[kMaxPrimsPeers], recvs[kMaxPrimsPeers];
      int k = 0;
      for (int p = 0; p < n; ++p) {
        if (p == rank || (rooted && rank != a.root && p != a.root)) continue;
        sends[k] = {&comm->p2pSend(p)->conn, p};
        recvs[k++] = {&comm->p2pRecv(p)->conn, p};
      }
      const bool root = rank == a.root;
      int nsend = k, nrecv = k;
      if (a.type == CollType::Broadcast) (root ? nrecv : nsend) = 0;
      if (a.type == CollType::Reduce) (root ? nsend : nrecv) = 0;
      ctx.onlySends = rooted && nrecv == 0;
      HostPrims<T, Op, P> prims(sends, nsend, recvs, nrecv, ctx, op, /*localPos=*/rank);
      if (plan.choice.algo == Algo::Direct) {
        const size_t chunk = prims.maxElems();
        switch (a.type) {
          case CollType::AllReduce: coll::oneShotAllReduce(prims, in, out, len, chunk); break;
          case CollType::AllGather:
            if constexpr (kMovesData<T, Op>)
              coll::directAllGather(prims, in, out, len, a.count, rank, n, chunk);
            break;
          case CollType::ReduceScatter:
            coll::directReduceScatter(prims, in, out, len, a.count, rank, n, chunk);
            break;
          case CollType::Broadcast:
            if constexpr (kMovesData<T, Op>) coll::directRooted(prims, in, out, len, root, false, chunk);
            break;
          case CollType::Reduce: coll::directRooted(prims, in, out, len, root, true, chunk); break;
        }
      } else {
        size_t chunk = prims.maxElems();
        if (P == Protocol::Simple)
          chunk = std::min(chunk, std::max<size_t>(1, plan.ringChunkBytes / sizeof(T)));
        coll::twoShotAllReduce(prims, in, out, len, rank, n, chunk);
      }
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
      const size_t chunk = std::max<size_t>(1, std::min(up.maxElems(), kTreeChunkBytes / sizeof(T)));
      coll::treeAllReduce(up, down, in, out, len, {l.up >= 0, l.ndown > 0}, chunk, kConnectorSteps / 2);
      return up.failed() ? up.status() : down.status();
    }
    case Algo::Ring: break;
  }
  const RingLink& ring = *ch.ring;
  // The ring's order follows the schedule: positions, not ranks, drive it.
  const int pos = ring.position;
  const bool rooted = a.type == CollType::Broadcast || a.type == CollType::Reduce;
  const int rootPos = rooted ? ring.positionOf(a.root) : 0;
  // A broadcast's root and the rank after a reduce's root start the chain.
  ctx.onlySends = rooted && coll::ringMod(pos - rootPos, n) == (a.type == CollType::Broadcast ? 0 : 1);
  HostPrims<T, Op, P> prims({&ring.send->conn, ring.next}, {&ring.recv->conn, ring.prev}, ctx, op);
  const int* rankAt = ring.rankAt.data();
  size_t chunk = prims.maxElems();
  if (P == Protocol::Simple) chunk = std::min(chunk, std::max<size_t>(1, plan.ringChunkBytes / sizeof(T)));
  switch (a.type) {
    case CollType::AllReduce: coll::ringAllReduce(prims, in, out, len, pos, n, chunk); break;
    case CollType::AllGather:
      if constexpr (kMovesData<T, Op>)
        coll::ringAllGather(prims, in, out, len, a.count, pos, n, chunk, rankAt);
      break;
    case CollType::ReduceScatter:
      coll::ringReduceScatter(prims, in, out, len, a.count, pos, n, chunk, rankAt);
      break;
    case CollType::Broadcast:
      if constexpr (kMovesData<T, Op>) coll::ringBroadcast(prims, in, out, len, pos, n, rootPos, chunk);
      break;
    case CollType::Reduce: coll::ringReduce(prims, in, out, len, pos, n, rootPos, chunk); break;
  }
  return prims.status();
}

template <typename T, typename Op>
Status runTyped(Communicator* comm, const CollArgs& a, HostPlan& plan, Op op) {
  if (comm->nranks() == 1) {
    if (a.count == 0) return okStatus();
    const T* in = static_cast<const T*>(a.send);
    T* out = static_cast<T*>(a.recv);
    if constexpr (Op::kHasPre) {
      for (size_t i = 0; i < a.count; ++i) out[i] = op.pre(in[i]);
    } else if (in != out) {
      if (plan.streams(a.count * sizeof(T))) {
        streamElems(out, in, a.count);
      } else {
        copyElems(out, in, a.count);
      }
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
Status runWithOp(Communicator* comm, const CollArgs& a, HostPlan& plan) {
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
Status runAndFinish(Communicator* comm, const CollArgs& a, HostPlan& plan) {
  BRAID_CHECK(runWithOp<T>(comm, a, plan));
  if (a.op == ncclAvg && a.type != CollType::AllGather && a.type != CollType::Broadcast) {
    bool holdsResult = a.type != CollType::Reduce || comm->rank() == a.root;
    if (holdsResult) divideBy(static_cast<T*>(a.recv), a.count, comm->nranks());
  }
  return okStatus();
}

}  // namespace host_coll

template <typename T>
Status runHostCollective(Communicator* comm, const CollArgs& a, HostPlan& plan) {
  return host_coll::runAndFinish<T>(comm, a, plan);
}

}  // namespace braid
