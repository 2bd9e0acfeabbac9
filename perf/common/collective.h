// One collective as the perf driver sees it: what nccl-tests' per-collective
// table holds (byte counts, data, bus-bandwidth factor, how to run), so that
// each program is a descriptor and a call to perfMain. Functions are pure.
#pragma once

#include <cstddef>

#include "ops.h"

namespace perf {

// Buffer shape for `count` elements of the size column (nccl-tests'
// getCollByteCount), all in elements.
struct Layout {
  size_t sendCount;          // elements each rank sends
  size_t recvCount;          // elements each rank's output holds
  size_t paramCount;         // the count passed to the call (the count column)
  size_t sendInplaceOffset;  // in place: input at recvbuff + rank * this
  size_t recvInplaceOffset;  // in place: output at recvbuff + rank * this
};

// Where recv element j of `rank` comes from: one input element of one rank
// (srcRank >= 0), or the reduction over all ranks of input element srcIndex
// (srcRank == kAllRanks).
struct Source {
  static constexpr int kAllRanks = -1;
  int srcRank;
  size_t srcIndex;
};

struct CallArgs {
  const void* send;
  void* recv;
  size_t count;  // Layout::paramCount
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank, nranks;
};

// The in-place half of a row: run and checked; run but not checked ("N/A",
// as nccl-tests for send/recv, and all-to-all, whose in-place form NCCL does
// not define); or not run at all.
enum class InPlace { kChecked, kUnchecked, kSkipped };

struct Collective {
  const char* program;  // "all_reduce_perf"
  const char* name;     // "AllReduce"
  bool usesOp;          // the redop column names the op (else "none")
  bool usesRoot;        // the root column shows -r (else -1)
  InPlace inPlace;      // what the in-place half of a row does
  Layout (*layout)(size_t count, int nranks, size_t eltSize);
  // algbw = algBytes / time; busbw = algbw * busFactor (nccl-tests' factors).
  double (*algBytes)(size_t paramCount, size_t eltSize, int nranks);
  double (*busFactor)(int nranks);
  void (*run)(Ops& ops, const CallArgs& a);
  // Whether `rank`'s output is checked (e.g. only the root's for reduce).
  bool (*checked)(int rank, int root);
  Source (*source)(int rank, int nranks, int root, size_t j, const Layout& l);
};

// Per-rank counts rounded down to 16 bytes, as nccl-tests does for the
// collectives that split the size column among ranks.
inline size_t perRankCount(size_t count, int nranks, size_t eltSize) {
  return (count / static_cast<size_t>(nranks)) & ~(16 / eltSize - 1);
}

// Runs the program: parses nccl-tests' flags, launches ranks, sweeps sizes.
int perfMain(int argc, char** argv, const Collective& coll);

}  // namespace perf
