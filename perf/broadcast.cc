// broadcast_perf: ncclBroadcast from -r root; busbw = algbw.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kBroadcast = {
    "broadcast_perf",
    "Broadcast",
    /*usesOp=*/false,
    /*usesRoot=*/true,
    InPlace::kChecked,
    [](size_t count, int, size_t) {
      return Layout{count, count, count, 0, 0};
    },
    [](size_t count, size_t elt, int) { return static_cast<double>(count * elt); },
    [](int) { return 1.0; },
    [](Ops& ops, const CallArgs& a) { ops.broadcast(a.send, a.recv, a.count, a.type, a.root); },
    [](int, int) { return true; },
    [](int, int, int root, size_t j, const Layout&) {
      return Source{root, j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kBroadcast);
}
