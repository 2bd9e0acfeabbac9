// gather_perf: ncclGather to -r root (only the root's output is checked); busbw = algbw * (n-1)/n.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kGather = {
    "gather_perf",
    "Gather",
    /*usesOp=*/false,
    /*usesRoot=*/true,
    InPlace::kChecked,
    [](size_t count, int n, size_t elt) {
      size_t c = perRankCount(count, n, elt);
      return Layout{c, c * n, c, c, 0};
    },
    [](size_t count, size_t elt, int n) { return static_cast<double>(count * elt * n); },
    [](int n) { return (n - 1.0) / n; },
    [](Ops& ops, const CallArgs& a) { ops.gather(a.send, a.recv, a.count, a.type, a.root); },
    [](int rank, int root) { return rank == root; },
    [](int, int, int, size_t j, const Layout& l) {
      return Source{static_cast<int>(j / l.sendCount), j % l.sendCount};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kGather);
}
