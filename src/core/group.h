// Group semantics (ncclGroupStart/End), per thread as in NCCL.
//
// Between ncclGroupStart and the matching ncclGroupEnd, operations are
// collected on the calling thread instead of launched; the outermost
// ncclGroupEnd launches them together: each communicator's operations in
// call order (consecutive sends and receives as one batch), and the
// operations of different communicators concurrently, one thread each, so
// that one thread can drive several communicators of one job. Groups nest;
// an End without a Start is ncclInvalidUsage. The state is thread-local.
#pragma once

#include <functional>

#include "util/status.h"

namespace braid {

class Communicator;
struct CollArgs;
struct P2pOp;

struct GroupSimulation {
  float estimatedTimeUs = 0.0f;  // estimated time of the group's operations
};

Status groupStart();
// Ends one level. At the outermost level, launches the collected operations,
// or, if `simulate` is given, estimates their time and launches nothing.
Status groupEnd(GroupSimulation* simulate);
// Nesting depth on this thread (0 outside any group).
int groupDepth();
// Inside a group: an init started on its own thread (ncclCommInitRank and
// friends return at once, so one thread can initialize every rank it
// drives); the outermost ncclGroupEnd waits for the blocking ones and
// returns the first failure, before it runs any collected operation.
void groupDeferInit(Communicator* comm, bool blocking);
// Inside a group: run `run(comm, args)` at the outermost ncclGroupEnd.
using DeferredCollective = Status (*)(Communicator* comm, const CollArgs& args);
void groupDefer(Communicator* comm, const CollArgs& args, DeferredCollective run);
void groupDeferP2p(Communicator* comm, const P2pOp& op);
// Inside a group: a blocking collective call of `comm` other than an
// operation (ncclCommWindowRegister), run at the outermost ncclGroupEnd in
// call order with the communicator's operations, on the communicator's own
// thread when the group spans several (its peers may be this thread's
// other communicators). Its failure is ncclGroupEnd's.
void groupDeferTask(Communicator* comm, std::function<Status()> task);

// One thread drives several GPU communicators at ncclGroupEnd: their
// launches never block, so they run on the calling thread in order, with
// this flag up. An operation that would block (it must first connect with
// its peers over the bootstrap, or compare arguments across ranks) returns
// groupWouldBlock() before doing anything, and that communicator's rest of
// the group then runs on a thread of its own, as for the host backend.
bool groupMustNotBlock();
// True while a group's operations run on this thread and BRAID_GROUP_FUSE
// is on: GPU collectives may be gathered, then launched together when the
// group (or a send/receive batch of it) flushes them.
bool groupFuses();
Status groupWouldBlock();
bool isGroupWouldBlock(const Status& s);

}  // namespace braid
