// The collective correctness sweep, reusable by any launcher: forked ranks
// (coll_test.cc) and mpirun (mpi_coll_test.cc) run the same code.
//
// Every collective x type x op x in-place/out-of-place x count, with inputs
// that depend on rank and position, checked against an independent
// reference. The inputs are chosen so that every partial result is exact in
// every type (sums of small integers, products of powers of two), so results
// are compared exactly whatever the reduction order.
//
// Buffers live in a SweepMemory (sweep_memory.h): host memory and the null
// stream unless the caller passes another (tests/gpu/ passes device memory
// and its stream). Results are read only after memory.synchronize().
#pragma once

#include <string>

#include "nccl.h"
#include "sweep_memory.h"

namespace braid::test {

enum class SweepCounts {
  kFull,   // 0, 1, 7, 1023, 65537, and 2^20+3 for float
  kQuick,  // 0, 1, 7, 4099: every type, op and rank count, several FIFO steps each
};

// kQuick when BRAID_TEST_SWEEP=quick (sanitizer builds, ~10x slower), else kFull.
SweepCounts sweepCountsFromEnv();

// Runs the sweep on `comm`, an initialized communicator in which this process
// is rank `rank` of `nranks`; the reference is computed with those. Every
// rank of `comm` must call it with the same `counts`. Returns "" on success,
// else the failures (bounded in length). Leaves `comm` alive. The buffers,
// and the PreMulSum scalar passed by pointer (ncclScalarDevice), are in
// `memory`; every collective runs on memory.stream(). Ends with PreMulSum
// whose scalar differs between ranks (each scales its own input), for
// float, int32, double and bf16.
std::string collSweep(ncclComm_t comm, int rank, int nranks, SweepCounts counts,
                      SweepMemory& memory = hostMemory());

// Team shapes made from a parent communicator by ncclCommSplit.
enum class SplitShape {
  kReversed,      // one team, color 0, key n-1-rank: new rank order reversed
  kOddEven,       // color rank % 2, key rank: two teams running at once
  kLeaveLastOut,  // the last rank passes NCCL_SPLIT_NOCOLOR and must get NULL
};
const char* splitShapeName(SplitShape shape);  // "Reversed", ...: usable in test names

// Every rank of `parent` (this process is `rank` of `nranks`) calls this:
// splits `parent` into `shape`, checks the new rank and size
// (ncclCommUserRank, ncclCommCount), runs collSweep on the new communicator
// with the new rank and size, and destroys it (aborts it after a failure).
// Returns "" on success. Leaves `parent` alive. The new communicator uses
// the parent's device; the sweep's buffers are in `memory`.
std::string splitSweep(ncclComm_t parent, int rank, int nranks, SplitShape shape, SweepCounts counts,
                       SweepMemory& memory = hostMemory());

// Point-to-point and the collectives made of it, on `comm` (this process is
// `rank` of `nranks`; every rank calls it), int32 data, counts 0, 1, 1001
// and 300000: every rank sends to every rank (itself included) and receives
// from each in one group; two messages to one peer in one group arrive in
// call order; all-to-all out of place and in place; uneven all-to-allv;
// gather and scatter at every root. Returns "" on success, else the first
// failure. Leaves `comm` alive.
std::string p2pSweep(ncclComm_t comm, int rank, int nranks, SweepMemory& memory = hostMemory());

// Many collectives in one group, on `comm` (every rank calls it), for
// counts 1, 1023, 65537 and 300001: all-reduces of floats out of place, in
// place, averaged and of several sizes, a max, an all-gather and a
// broadcast of other datatypes, a reduce-scatter and a reduce, a send and a
// receive around the ring, then ten more all-reduces. On GPUs consecutive
// collectives of one kernel share a launch (BRAID_GROUP_FUSE), which this
// checks: "" on success, else the first wrong result.
std::string groupSweep(ncclComm_t comm, int rank, int nranks, SweepMemory& memory = hostMemory());

}  // namespace braid::test
