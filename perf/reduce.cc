// reduce_perf: ncclReduce to -r root (only the root's output is checked); busbw = algbw.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kReduce = {
    "reduce_perf",
    "Reduce",
    /*usesOp=*/true,
    /*usesRoot=*/true,
    InPlace::kChecked,
    [](size_t count, int, size_t) {
      return Layout{count, count, count, 0, 0};
    },
    [](size_t count, size_t elt, int) { return static_cast<double>(count * elt); },
    [](int) { return 1.0; },
    [](Ops& ops, const CallArgs& a) { ops.reduce(a.send, a.recv, a.count, a.type, a.op, a.root); },
    [](int rank, int root) { return rank == root; },
    [](int, int, int, size_t j, const Layout&) {
      return Source{Source::kAllRanks, j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kReduce);
}
