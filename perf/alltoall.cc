// alltoall_perf: ncclAlltoAll (NCCL 2.28 and Braid; grouped send/recv before);
// size is each rank's whole buffer; busbw = algbw * (n-1)/n. In place runs
// (Braid stages the outgoing blocks; NCCL leaves it undefined) but is not
// checked, so the .nccl build reports comparable columns.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kAllToAll = {
    "alltoall_perf",
    "AlltoAll",
    /*usesOp=*/false,
    /*usesRoot=*/false,
    InPlace::kUnchecked,
    [](size_t count, int n, size_t elt) {
      size_t c = perRankCount(count, n, elt);
      return Layout{c * n, c * n, c, 0, 0};
    },
    [](size_t count, size_t elt, int n) { return static_cast<double>(count * elt * n); },
    [](int n) { return (n - 1.0) / n; },
    [](Ops& ops, const CallArgs& a) { ops.allToAll(a.send, a.recv, a.count, a.type); },
    [](int, int) { return true; },
    [](int rank, int, int, size_t j, const Layout& l) {
      return Source{static_cast<int>(j / l.paramCount), rank * l.paramCount + j % l.paramCount};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kAllToAll);
}
