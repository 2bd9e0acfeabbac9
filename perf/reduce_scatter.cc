// reduce_scatter_perf: ncclReduceScatter; size is the input; busbw = algbw * (n-1)/n.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kReduceScatter = {
    "reduce_scatter_perf",
    "ReduceScatter",
    /*usesOp=*/true,
    /*usesRoot=*/false,
    InPlace::kChecked,
    [](size_t count, int n, size_t elt) {
      size_t c = perRankCount(count, n, elt);
      return Layout{c * n, c, c, 0, c};
    },
    [](size_t count, size_t elt, int n) { return static_cast<double>(count * elt * n); },
    [](int n) { return (n - 1.0) / n; },
    [](Ops& ops, const CallArgs& a) { ops.reduceScatter(a.send, a.recv, a.count, a.type, a.op); },
    [](int, int) { return true; },
    [](int rank, int, int, size_t j, const Layout& l) {
      return Source{Source::kAllRanks, rank * l.recvCount + j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kReduceScatter);
}
