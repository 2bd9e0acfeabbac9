#include "core/p2p.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/enqueue.h"
#include "core/gpu_engine.h"
#include "core/group.h"
#include "exec/host/backoff.h"
#include "exec/host/host_reduce.h"
#include "util/log.h"
#include "util/thread_scratch.h"

namespace braid {
namespace {

struct Progress {
  const P2pOp* op;
  size_t done = 0;
  bool stepped = false;  // a zero-byte message still takes one step
  bool complete() const { return stepped && done == op->bytes; }
};

// One peer's operations in one direction, in call order: progress[begin,
// end) of its side, the first not yet complete at begin.
struct PeerRun {
  int peer;
  Connector* conn;
  size_t begin, end;
};

struct P2pSide {
  std::vector<Progress> progress;  // after groupByPeer: by peer, in call order within each
  std::vector<PeerRun> runs;
  std::vector<int> peers;  // of the runs
  size_t open = 0;         // runs not yet complete

  void clear() { progress.clear(), runs.clear(), peers.clear(), open = 0; }
  void groupByPeer() {
    // The ops are one array in call order, so their addresses order calls.
    std::sort(progress.begin(), progress.end(), [](const Progress& a, const Progress& b) {
      return a.op->peer != b.op->peer ? a.op->peer < b.op->peer : a.op < b.op;
    });
    for (size_t i = 0; i < progress.size(); ++i) {
      const int peer = progress[i].op->peer;
      if (runs.empty() || runs.back().peer != peer) {
        runs.push_back({peer, nullptr, i, i});
        peers.push_back(peer);
      }
      runs.back().end = i + 1;
    }
    open = runs.size();
  }
};

struct P2pScratch {
  P2pSide sends, recvs;
  std::vector<const P2pOp*> selfSends, selfRecvs;
};

// Moves as much of `p` through `c` as the FIFO allows; true if anything moved.
bool progressSend(Progress& p, Connector& c, size_t slot) {
  bool moved = false;
  while (!p.complete() && c.sendSlotFree()) {
    size_t chunk = std::min(slot, p.op->bytes - p.done);
    if (chunk > 0) copyBytes(c.payload(c.step), static_cast<const char*>(p.op->sendBuf) + p.done, chunk);
    SlotHeader* h = c.header(c.step);
    h->bytes = chunk;
    h->step = c.step;
    c.counters->tail.store(++c.step, std::memory_order_release);
    p.done += chunk;
    p.stepped = moved = true;
  }
  return moved;
}

Status progressRecv(Progress& p, Connector& c, size_t slot, bool* moved) {
  while (!p.complete() && c.counters->tail.load(std::memory_order_acquire) > c.step) {
    size_t chunk = std::min(slot, p.op->bytes - p.done);
    const SlotHeader* h = c.header(c.step);
    if (h->step != c.step || h->bytes != chunk) {
      return invalidUsage("ncclRecv from rank ", p.op->peer, ": the sender's message does not match (", h->bytes,
                          " bytes at step ", h->step, " where ", chunk, " bytes at step ", c.step,
                          " were expected); ncclSend and ncclRecv counts and types must match");
    }
    if (chunk > 0) copyBytes(static_cast<char*>(p.op->recvBuf) + p.done, c.payload(c.step), chunk);
    c.counters->head.store(++c.step, std::memory_order_release);
    p.done += chunk;
    p.stepped = *moved = true;
  }
  return okStatus();
}

}  // namespace

Status runP2pBatch(Communicator* comm, const std::vector<P2pOp>& ops) {
  if (comm->backend() == Backend::Gpu) {
    GpuEngine* engine = nullptr;
    BRAID_CHECK(comm->gpuEngine(&engine));
    return engine->p2p(ops, ops.empty() ? nullptr : ops[0].stream);
  }
  const int me = comm->rank();
  // The lists are kept per thread and reused: a small send/receive group
  // made a dozen allocations here (maps of deques), a tenth of its time.
  ThreadScratch<P2pScratch, P2pScratch> scratch;
  // Sends to and receives from oneself pair up in call order.
  std::vector<const P2pOp*>& selfSends = scratch->selfSends;
  std::vector<const P2pOp*>& selfRecvs = scratch->selfRecvs;
  selfSends.clear(), selfRecvs.clear();
  P2pSide& sends = scratch->sends;
  P2pSide& recvs = scratch->recvs;
  sends.clear(), recvs.clear();
  for (const P2pOp& op : ops) {
    if (op.peer == me) {
      (op.isSend ? selfSends : selfRecvs).push_back(&op);
    } else {
      (op.isSend ? sends : recvs).progress.push_back(Progress{&op});
    }
  }
  if (selfSends.size() != selfRecvs.size()) {
    return invalidUsage("a group has ", selfSends.size(), " sends to this rank itself but ", selfRecvs.size(),
                        " receives from it; they must pair up");
  }
  for (size_t i = 0; i < selfSends.size(); ++i) {
    if (selfSends[i]->bytes != selfRecvs[i]->bytes) {
      return invalidUsage("a send to this rank itself of ", selfSends[i]->bytes, " bytes meets a receive of ",
                          selfRecvs[i]->bytes, " bytes");
    }
    const char* from = static_cast<const char*>(selfSends[i]->sendBuf);
    char* to = static_cast<char*>(selfRecvs[i]->recvBuf);
    const size_t bytes = selfSends[i]->bytes;
    if (bytes == 0 || to == from) continue;
    const uintptr_t t = reinterpret_cast<uintptr_t>(to), f = reinterpret_cast<uintptr_t>(from);
    const size_t stream = hostStreamBytes();
    if (t + bytes <= f || f + bytes <= t) {
      // The fast copies (also for buffers misaligned to each other), as a
      // one-rank collective's.
      if (stream > 0 && bytes >= stream) {
        streamBytes(to, from, bytes);
      } else {
        copyBytes(to, from, bytes);
      }
    } else {
      std::memmove(to, from, bytes);
    }
  }
  sends.groupByPeer(), recvs.groupByPeer();
  if (sends.open == 0 && recvs.open == 0) return okStatus();
  const uint64_t seq = comm->nextP2pSeq();
  BRAID_CHECK(comm->ensureP2p(sends.peers, recvs.peers));
  for (PeerRun& r : sends.runs) r.conn = &comm->p2pSend(r.peer)->conn;
  for (PeerRun& r : recvs.runs) r.conn = &comm->p2pRecv(r.peer)->conn;

  const size_t slot = comm->p2pSlotBytes();
  std::atomic<bool> netFailed{false};  // raised when a net connector fails
  comm->connectors().watch(&netFailed);
  struct Unwatch {
    Communicator* comm;
    std::atomic<bool>* flag;
    ~Unwatch() { comm->connectors().unwatch(flag); }
  } unwatch{comm, &netFailed};
  Backoff backoff(&comm->abortFlag(), comm->stallTimeoutSeconds(), &netFailed, !comm->oversubscribed());
  backoff.reset();
  // netFailed rose or a peer's process ended: one more pass takes what came
  // before, then the wait fails.
  bool lastPass = false;
  bool netFailure = false;  // why lastPass: the net failed (else a peer ended)
  uint64_t pauses = 0;
  const std::atomic<bool>* ended = comm->connectors().peerEnded();
  // The first unfinished run whose peer has ended (its process, or on
  // another host its communicator: a goodbye); null when none has. A probe
  // only: the batch may still complete on its last pass.
  auto endedRun = [&]() -> std::pair<const P2pSide*, const PeerRun*> {
    if (ended == nullptr) return {nullptr, nullptr};
    for (const P2pSide* side : {&sends, &recvs}) {
      for (const PeerRun& r : side->runs) {
        if (r.begin < r.end && ended[r.peer].load(std::memory_order_acquire)) return {side, &r};
      }
    }
    return {nullptr, nullptr};
  };
  // The error of a batch that ended waiting on such a peer; ok when none.
  auto endedPeer = [&]() -> Status {
    const auto [side, r] = endedRun();
    if (r == nullptr) return okStatus();
    const Progress& p = side->progress[r->begin];
    const char* dir = side == &sends ? "send to" : "receive from";
    // A rank on another host that closed its communicator: recorded as the
    // communicator's failure now that the wait has failed.
    if (!comm->connectors().errorSink().failIfClosed(r->peer).ok()) {
      return remoteError("point-to-point #", seq, ": this rank waited to ", dir, " rank ", r->peer, " (",
                         p.done, "/", p.op->bytes, " bytes)");
    }
    return remoteError("point-to-point #", seq, ": the process of rank ", r->peer,
                       " ended while this rank waited to ", dir, " it (", p.done, "/", p.op->bytes,
                       " bytes)");
  };
  while (sends.open > 0 || recvs.open > 0) {
    bool moved = false;
    for (PeerRun& r : sends.runs) {
      while (r.begin < r.end) {
        Progress& p = sends.progress[r.begin];
        moved |= progressSend(p, *r.conn, slot);
        if (!p.complete()) break;
        if (++r.begin == r.end) --sends.open;
      }
    }
    for (PeerRun& r : recvs.runs) {
      while (r.begin < r.end) {
        Progress& p = recvs.progress[r.begin];
        BRAID_CHECK(progressRecv(p, *r.conn, slot, &moved));
        if (!p.complete()) break;
        if (++r.begin == r.end) --recvs.open;
      }
    }
    if (moved) {
      backoff.reset();
      continue;
    }
    if (lastPass) {
      BRAID_CHECK(endedPeer());
      // The ended peer's operations completed on the last pass (it sent all
      // before it left): the batch waits on for its live peers.
      if (netFailure) return comm->explainFailure(remoteError("send/receive stopped"));
      lastPass = false;
    }
    Backoff::Result r = backoff.pause();
    if (r == Backoff::Result::Aborted) return invalidUsage("send/receive was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)");
    if (r == Backoff::Result::Cancelled ||
        (r == Backoff::Result::Ready && (++pauses & 15) == 0 && endedRun().second != nullptr)) {
      lastPass = true;
      netFailure = r == Backoff::Result::Cancelled;
      continue;
    }
    if (r == Backoff::Result::TimedOut) {
      std::string waiting;
      for (const P2pSide* side : {&sends, &recvs}) {
        for (const PeerRun& run : side->runs) {
          if (run.begin == run.end) continue;
          const Progress& p = side->progress[run.begin];
          waiting += strCat(side == &sends ? " send to rank " : " receive from rank ", run.peer, " (", p.done,
                            "/", p.op->bytes, " bytes)");
        }
      }
      comm->onStall(-1);
      return remoteError("point-to-point #", seq, ": no progress for ", comm->stallTimeoutSeconds(),
                         " s on:", waiting, "; those ranks may have died or be stuck");
    }
  }
  return okStatus();
}

Status enqueueP2p(Communicator* comm, const std::vector<P2pOp>& ops) {
  if (groupDepth() > 0) {
    for (const P2pOp& op : ops) groupDeferP2p(comm, op);
    return okStatus();
  }
  Status s = comm->explainFailure(runP2pBatch(comm, ops));
  if (!s.ok()) comm->setAsyncError(s);
  return s;
}

Status enqueueAllToAllv(Communicator* comm, const void* send, const size_t* sendCounts, const size_t* sendDispls,
                        void* recv, const size_t* recvCounts, const size_t* recvDispls, ncclDataType_t type,
                        void* stream) {
  const size_t es = datatypeSize(type);
  std::vector<P2pOp> ops;
  for (int p = 0; p < comm->nranks(); ++p) {
    ops.push_back(
        {true, p, static_cast<const char*>(send) + sendDispls[p] * es, nullptr, sendCounts[p] * es, nullptr, stream});
    ops.push_back(
        {false, p, nullptr, static_cast<char*>(recv) + recvDispls[p] * es, recvCounts[p] * es, nullptr, stream});
  }
  return enqueueP2p(comm, ops);
}

Status enqueueAllToAll(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type,
                       void* stream) {
  const size_t n = static_cast<size_t>(comm->nranks());
  const size_t bytes = count * datatypeSize(type);
  if (bytes == 0) return okStatus();
  std::shared_ptr<std::vector<char>> staging;
  if (send == recv && comm->backend() == Backend::Gpu) {
    // The GPU stages into device memory the engine keeps, in stream order.
    GpuEngine* engine = nullptr;
    BRAID_CHECK(comm->gpuEngine(&engine));
    BRAID_CHECK(engine->stage(send, n * bytes, stream, &send));
  } else if (send == recv) {
    // In place: what arrives from peer p lands on the block this rank sends
    // to p, so the outgoing blocks go from a copy, kept until the op ran.
    staging = std::make_shared<std::vector<char>>(static_cast<const char*>(send),
                                                  static_cast<const char*>(send) + n * bytes);
    send = staging->data();
  }
  std::vector<P2pOp> ops;
  for (size_t p = 0; p < n; ++p) {
    ops.push_back(
        {true, static_cast<int>(p), static_cast<const char*>(send) + p * bytes, nullptr, bytes, staging, stream});
    ops.push_back({false, static_cast<int>(p), nullptr, static_cast<char*>(recv) + p * bytes, bytes, nullptr, stream});
  }
  return enqueueP2p(comm, ops);
}

Status enqueueGather(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                     void* stream) {
  const size_t bytes = count * datatypeSize(type);
  if (bytes == 0) return okStatus();
  std::vector<P2pOp> ops;
  if (comm->rank() == root) {
    for (int p = 0; p < comm->nranks(); ++p) {
      ops.push_back(
          {false, p, nullptr, static_cast<char*>(recv) + static_cast<size_t>(p) * bytes, bytes, nullptr, stream});
    }
  }
  ops.push_back({true, root, send, nullptr, bytes, nullptr, stream});
  return enqueueP2p(comm, ops);
}

Status enqueueScatter(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                      void* stream) {
  const size_t bytes = count * datatypeSize(type);
  if (bytes == 0) return okStatus();
  std::vector<P2pOp> ops;
  if (comm->rank() == root) {
    for (int p = 0; p < comm->nranks(); ++p) {
      ops.push_back(
          {true, p, static_cast<const char*>(send) + static_cast<size_t>(p) * bytes, nullptr, bytes, nullptr, stream});
    }
  }
  ops.push_back({false, root, nullptr, recv, bytes, nullptr, stream});
  return enqueueP2p(comm, ops);
}

}  // namespace braid
