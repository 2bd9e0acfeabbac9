// scatter_perf: ncclScatter from -r root; busbw = algbw * (n-1)/n.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kScatter = {
    "scatter_perf",
    "Scatter",
    /*usesOp=*/false,
    /*usesRoot=*/true,
    InPlace::kChecked,
    [](size_t count, int n, size_t elt) {
      size_t c = perRankCount(count, n, elt);
      return Layout{c * n, c, c, 0, c};
    },
    [](size_t count, size_t elt, int n) { return static_cast<double>(count * elt * n); },
    [](int n) { return (n - 1.0) / n; },
    [](Ops& ops, const CallArgs& a) { ops.scatter(a.send, a.recv, a.count, a.type, a.root); },
    [](int, int) { return true; },
    [](int rank, int, int root, size_t j, const Layout& l) {
      return Source{root, rank * l.recvCount + j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kScatter);
}
