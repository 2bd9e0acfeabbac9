#include "core/group.h"

#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/enqueue.h"
#include "core/p2p.h"
#include "nccl.h"
#include "util/param.h"
#include "util/thread_scratch.h"
#include "util/threads.h"

namespace braid {
namespace {

struct Deferred {
  Communicator* comm;
  DeferredCollective collective;  // null for a send or receive, and for a task
  CollArgs args;
  P2pOp p2p;
  std::function<Status()> task;  // a blocking call (groupDeferTask)
};

BoolParam paramGroupFuse("GROUP_FUSE", true,
                         "launch a group's consecutive GPU collectives of one kernel (datatype, operator, "
                         "protocol, stream) together, up to 8 per launch: sums, averages, all-gathers and "
                         "broadcasts over Ring and the 2-rank Direct (docs/gpu.md)");

thread_local int tlsDepth = 0;
thread_local bool tlsNoBlock = false;
thread_local bool tlsFuse = false;
constexpr const char* kWouldBlock = "(this operation would block: it runs on a thread of its own)";
thread_local std::vector<Deferred>* tlsOps = nullptr;
struct PendingInit {
  std::shared_ptr<InitOutcome> outcome;
  bool blocking;
};
thread_local std::vector<PendingInit> tlsInits;

std::vector<Deferred>& ops() {
  if (tlsOps == nullptr) tlsOps = new std::vector<Deferred>();  // one per thread, reused
  return *tlsOps;
}

// One communicator's share of the group, in call order, from items[*next].
// The first failure is reported; later operations still run so that peers
// are not left waiting. In no-block mode it stops at the first operation
// that would block and leaves its index in *next (items.size() when done).
Status runForComm(Communicator* comm, const std::vector<const Deferred*>& items, size_t* next) {
  CommUse use;
  BRAID_CHECK(use.acquire(comm));
  if (Status revoked = comm->refuseIfRevoked(); !revoked.ok()) {  // since its operations were queued
    *next = items.size();
    return revoked;
  }
  Status first;
  // Gathered GPU collectives launch before what follows them on a stream:
  // a send/receive batch, or the end of this share.
  tlsFuse = paramGroupFuse.get();
  auto launchGathered = [&] {
    Status s = comm->explainFailure(comm->flushGpuLaunches());
    if (!s.ok()) comm->setAsyncError(s);
    if (first.ok() && !s.ok()) first = s;
  };
  // Reused per thread (cleared on the way out: the ops may own staging).
  struct BatchTag;
  ThreadScratch<std::vector<P2pOp>, BatchTag> scratch;
  std::vector<P2pOp>& batch = *scratch;
  struct Clear {
    std::vector<P2pOp>& ops;
    ~Clear() { ops.clear(); }
  } clear{batch};
  size_t batchStart = *next;
  bool stopped = false;
  auto flush = [&](size_t at) {
    if (batch.empty() || stopped) return;
    launchGathered();
    Status s = runP2pBatch(comm, batch);
    if (isGroupWouldBlock(s)) {
      stopped = true;
      *next = batchStart;
      return;
    }
    s = comm->explainFailure(std::move(s));
    if (!s.ok()) comm->setAsyncError(s);
    if (first.ok() && !s.ok()) first = s;
    batch.clear();
    batchStart = at;
  };
  size_t i = *next;
  for (; i < items.size() && !stopped; ++i) {
    const Deferred* d = items[i];
    if (d->task) {
      flush(i);
      if (stopped) break;
      if (tlsNoBlock) {  // it blocks: the rest runs on this communicator's own thread
        stopped = true;
        *next = i;
        break;
      }
      Status s = d->task();
      if (first.ok() && !s.ok()) first = s;
      continue;
    }
    if (!d->collective) {
      if (batch.empty()) batchStart = i;
      batch.push_back(d->p2p);
      continue;
    }
    flush(i);
    if (stopped) break;
    Status s = d->collective(comm, d->args);
    if (isGroupWouldBlock(s)) {
      stopped = true;
      *next = i;
      break;
    }
    if (first.ok() && !s.ok()) first = s;
  }
  flush(items.size());
  launchGathered();
  tlsFuse = false;
  if (!stopped) *next = items.size();
  return first;
}

// NCCL matches a group's sends and receives by peer, whatever their places
// among the group's collectives: ranks may interleave them differently.
// Each rank therefore runs its share's collectives in call order and then
// its sends and receives as one batch (a blocking task keeps its place; the
// operations on each side of one are ordered so separately). Before, a send
// placed before a collective on one rank and after it on the other ran on
// each side of it there: the collective took the message as its data, or
// the two waited on each other's connections.
void collectivesThenSendRecv(std::vector<const Deferred*>& list) {
  thread_local std::vector<const Deferred*> held;
  held.clear();
  size_t out = 0;  // never past the item being read: items only move later
  for (const Deferred* d : list) {
    if (!d->collective && !d->task) {
      held.push_back(d);
      continue;
    }
    if (d->task) {
      for (const Deferred* p : held) list[out++] = p;
      held.clear();
    }
    list[out++] = d;
  }
  for (const Deferred* p : held) list[out++] = p;
}

}  // namespace

bool groupMustNotBlock() { return tlsNoBlock; }
bool groupFuses() {
  return tlsFuse;
}
Status groupWouldBlock() { return Status(ncclInProgress, kWouldBlock); }
bool isGroupWouldBlock(const Status& s) { return s.code() == ncclInProgress && s.message() == kWouldBlock; }

void groupDeferInit(Communicator* comm, bool blocking) { tlsInits.push_back({comm->outcome(), blocking}); }

void groupDefer(Communicator* comm, const CollArgs& args, DeferredCollective run) {
  ops().push_back({comm, run, args, P2pOp{}, {}});
}
void groupDeferP2p(Communicator* comm, const P2pOp& op) {
  ops().push_back({comm, nullptr, CollArgs{}, op, {}});
}
void groupDeferTask(Communicator* comm, std::function<Status()> task) {
  ops().push_back({comm, nullptr, CollArgs{}, P2pOp{}, std::move(task)});
}

Status groupStart() {
  ++tlsDepth;
  return okStatus();
}

Status groupEnd(GroupSimulation* simulate) {
  if (tlsDepth == 0) {
    return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart on this thread");
  }
  --tlsDepth;
  if (tlsDepth > 0) return okStatus();
  // The thread's list is handed over (operations of a group started while
  // this one runs go to a fresh list) and its storage kept for the next group.
  thread_local std::vector<Deferred> spare;
  std::vector<Deferred> pending;
  pending.swap(spare);
  pending.swap(ops());
  struct Reuse {
    std::vector<Deferred>& list;
    ~Reuse() {
      list.clear();
      if (spare.capacity() < list.capacity()) spare.swap(list);
    }
  } reuse{pending};
  std::vector<PendingInit> inits;
  inits.swap(tlsInits);
  // Inits first: the group's operations may use the communicators. The
  // outcome outlives an abort of its communicator, so waiting is safe.
  Status initFailure;
  bool inProgress = false;
  for (const PendingInit& init : inits) {
    if (!init.blocking) {
      inProgress = true;
      continue;
    }
    std::unique_lock<std::mutex> lock(init.outcome->mutex);
    init.outcome->cv.wait(lock, [&] { return init.outcome->done; });
    if (initFailure.ok() && !init.outcome->status.ok()) initFailure = init.outcome->status;
  }
  BRAID_CHECK(initFailure);
  if (simulate != nullptr) {
    // The selector's estimates of the collectives, added up (NCCL reports
    // its last collective's). Sends, receives and deferred calls have no
    // cost model: a group of only those gets NCCL_UNDEF_FLOAT, not a zero.
    double us = 0;
    bool estimated = pending.empty();
    for (const Deferred& d : pending) {
      if (d.collective == nullptr) continue;
      us += estimateCollectiveUs(d.comm, d.args);
      estimated = true;
    }
    simulate->estimatedTimeUs = estimated ? static_cast<float>(us) : NCCL_UNDEF_FLOAT;
    return okStatus();
  }
  // Each communicator's collectives in call order, then its sends and
  // receives (collectivesThenSendRecv); communicators in order of first use
  // (a group rarely spans more than a few). Both reused per thread.
  struct Lists {
    std::vector<Communicator*> order;
    std::vector<std::vector<const Deferred*>> lists;  // the first order.size() are this group's
  };
  ThreadScratch<Lists, Lists> scratch;
  std::vector<Communicator*>& order = scratch->order;
  std::vector<std::vector<const Deferred*>>& lists = scratch->lists;
  order.clear();
  for (const Deferred& d : pending) {
    size_t i = order.size();
    while (i > 0 && order[i - 1] != d.comm) --i;
    if (i == 0) {
      order.push_back(d.comm);
      if (lists.size() < order.size()) lists.emplace_back();
      lists[order.size() - 1].clear();
      i = order.size();
    }
    lists[i - 1].push_back(&d);
  }
  for (size_t i = 0; i < order.size(); ++i) collectivesThenSendRecv(lists[i]);
  const Status done = inProgress ? Status(ncclInProgress, "non-blocking initialization continues in the background")
                                 : okStatus();
  if (order.size() <= 1) {
    if (order.empty()) return done;
    size_t next = 0;
    BRAID_CHECK(runForComm(order[0], lists[0], &next));
    return done;
  }
  // Several communicators: each progresses on its own thread, since their
  // peers may be this very thread's other communicators -- except GPU
  // launches, which never block once connected: they go first, in order,
  // on this thread (groupMustNotBlock).
  std::vector<Status> results(order.size());
  std::vector<size_t> next(order.size(), 0);
  bool allGpu = true;
  for (Communicator* c : order) allGpu &= c->backend() == Backend::Gpu;
  if (allGpu) {
    tlsNoBlock = true;
    for (size_t i = 0; i < order.size(); ++i) results[i] = runForComm(order[i], lists[i], &next[i]);
    tlsNoBlock = false;
  }
  std::vector<size_t> left;  // the communicators with work still to run
  for (size_t i = 0; i < order.size(); ++i) {
    if (next[i] < lists[i].size()) left.push_back(i);
  }
  BRAID_CHECK(runTogether(left.size(), "a thread for a group's communicators", [&](size_t k) {
    const size_t i = left[k];
    Status s = runForComm(order[i], lists[i], &next[i]);
    if (results[i].ok()) results[i] = s;
  }));
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return done;
}

int groupDepth() { return tlsDepth; }

}  // namespace braid
