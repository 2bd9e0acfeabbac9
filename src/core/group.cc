#include "core/group.h"

#include <map>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/p2p.h"
#include "nccl.h"

namespace braid {
namespace {

struct Deferred {
  Communicator* comm;
  std::function<Status()> collective;  // empty for a send or receive
  P2pOp p2p;
};

thread_local int tlsDepth = 0;
thread_local std::vector<Deferred>* tlsOps = nullptr;

std::vector<Deferred>& ops() {
  if (tlsOps == nullptr) tlsOps = new std::vector<Deferred>();  // one per thread, reused
  return *tlsOps;
}

// One communicator's share of the group, in call order. The first failure is
// reported; later operations still run so that peers are not left waiting.
Status runForComm(Communicator* comm, const std::vector<const Deferred*>& items) {
  CommUse use;
  BRAID_CHECK(use.acquire(comm));
  Status first;
  std::vector<P2pOp> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    Status s = runP2pBatch(comm, batch);
    if (!s.ok()) comm->setAsyncError(s);
    if (first.ok() && !s.ok()) first = s;
    batch.clear();
  };
  for (const Deferred* d : items) {
    if (!d->collective) {
      batch.push_back(d->p2p);
      continue;
    }
    flush();
    Status s = d->collective();
    if (first.ok() && !s.ok()) first = s;
  }
  flush();
  return first;
}

}  // namespace

void groupDefer(Communicator* comm, std::function<Status()> op) { ops().push_back({comm, std::move(op), P2pOp{}}); }
void groupDeferP2p(Communicator* comm, const P2pOp& op) { ops().push_back({comm, nullptr, op}); }

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
  std::vector<Deferred> pending;
  pending.swap(ops());
  if (simulate != nullptr) {
    // No cost model yet: an estimate we cannot make is not reported as zero.
    simulate->estimatedTimeUs = pending.empty() ? 0.0f : NCCL_UNDEF_FLOAT;
    return okStatus();
  }
  std::map<Communicator*, std::vector<const Deferred*>> byComm;
  std::vector<Communicator*> order;
  for (const Deferred& d : pending) {
    auto& list = byComm[d.comm];
    if (list.empty()) order.push_back(d.comm);
    list.push_back(&d);
  }
  if (order.size() <= 1) return order.empty() ? okStatus() : runForComm(order[0], byComm[order[0]]);
  // Several communicators: each progresses on its own thread, since their
  // peers may be this very thread's other communicators.
  std::vector<Status> results(order.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < order.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = runForComm(order[i], byComm[order[i]]); });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return okStatus();
}

int groupDepth() { return tlsDepth; }

}  // namespace braid
