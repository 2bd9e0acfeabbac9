// The bootstrap root: a thread that gathers every rank's listening address
// and hands the full table back, so ranks can form their ring.
//
// The process that calls ncclGetUniqueId runs the root (as NCCL does); with
// NCCL_COMM_ID the root runs inside rank 0's init instead. With several ids
// (ncclCommInitRankScalable) each root gathers a slice of the ranks and
// forwards it to the first root as one hello ("sub-root"), then hands the
// first root's full table to its slice.
//
// The root never trusts a connection: it multiplexes all of them with poll,
// so a silent or slow client (a port scan, a truncated frame) cannot stall
// it; bad magic, a wrong secret or a malformed frame drop that connection
// with a WARN and leave the job undisturbed. Inconsistent ranks (two claiming
// one rank, different rank counts) fail the job, and every rank is told why.
// A rank that disconnects before the table is out, or a deadline passing,
// also fails the job with a message naming the ranks concerned.
#pragma once

#include <memory>

#include "bootstrap/wire.h"
#include "platform/socket.h"
#include "util/status.h"

namespace braid::bootstrap {

// Starts a root listening on `bind` (port 0: any). `timeoutSec` bounds its
// life. The root is owned by a process-wide list; it finishes by itself and
// is joined at exit or when the next root starts. *listening receives the
// address to put into the unique id.
Status startRoot(const SocketAddress& bind, const Secret& secret, double timeoutSec, SocketAddress* listening);

// Reads one root reply (header, then the body it announces) from `s`.
Status receiveRootReply(const Socket& s, Deadline deadline, const std::atomic<bool>* abort, RootReply* out);

// Joins roots that have finished; returns how many are still running.
// Called after each init so finished root threads do not linger.
int reapRoots();

// Waits for the root listening on `listening` to finish and joins it. For a
// root whose job is done (every rank has its table), so the wait is short:
// the process that started it need not leave a finished thread behind until
// exit (a process that ends with _exit never joins it).
void awaitRoot(const SocketAddress& listening);

}  // namespace braid::bootstrap
