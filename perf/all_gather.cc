// all_gather_perf: ncclAllGather; size is the gathered output; busbw = algbw * (n-1)/n.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kAllGather = {
    "all_gather_perf",
    "AllGather",
    /*usesOp=*/false,
    /*usesRoot=*/false,
    InPlace::kChecked,
    [](size_t count, int n, size_t elt) {
      size_t c = perRankCount(count, n, elt);
      return Layout{c, c * n, c, c, 0};
    },
    [](size_t count, size_t elt, int n) { return static_cast<double>(count * elt * n); },
    [](int n) { return (n - 1.0) / n; },
    [](Ops& ops, const CallArgs& a) { ops.allGather(a.send, a.recv, a.count, a.type); },
    [](int, int) { return true; },
    [](int, int, int, size_t j, const Layout& l) {
      return Source{static_cast<int>(j / l.sendCount), j % l.sendCount};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kAllGather);
}
