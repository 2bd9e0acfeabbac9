// all_reduce_perf: ncclAllReduce; busbw = algbw * 2(n-1)/n.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kAllReduce = {
    "all_reduce_perf",
    "AllReduce",
    /*usesOp=*/true,
    /*usesRoot=*/false,
    InPlace::kChecked,
    [](size_t count, int, size_t) {
      return Layout{count, count, count, 0, 0};
    },
    [](size_t count, size_t elt, int) { return static_cast<double>(count * elt); },
    [](int n) { return 2.0 * (n - 1) / n; },
    [](Ops& ops, const CallArgs& a) { ops.allReduce(a.send, a.recv, a.count, a.type, a.op); },
    [](int, int) { return true; },
    [](int, int, int, size_t j, const Layout&) {
      return Source{Source::kAllRanks, j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kAllReduce);
}
