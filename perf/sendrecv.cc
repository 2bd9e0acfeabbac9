// sendrecv_perf: each rank sends to rank+1 and receives from rank-1 (grouped
// ncclSend/ncclRecv); in place is timed, not checked (N/A), as nccl-tests;
// busbw = algbw.
#include "common/collective.h"

namespace {

using namespace perf;

const Collective kSendRecv = {
    "sendrecv_perf",
    "SendRecv",
    /*usesOp=*/true,
    /*usesRoot=*/false,
    InPlace::kUnchecked,
    [](size_t count, int, size_t) {
      return Layout{count, count, count, 0, 0};
    },
    [](size_t count, size_t elt, int) { return static_cast<double>(count * elt); },
    [](int) { return 1.0; },
    [](Ops& ops, const CallArgs& a) {
      ops.sendRecv(a.send, a.recv, a.count, a.type, (a.rank + 1) % a.nranks,
                   (a.rank + a.nranks - 1) % a.nranks);
    },
    [](int, int) { return true; },
    [](int rank, int n, int, size_t j, const Layout&) {
      return Source{(rank + n - 1) % n, j};
    },
};

}  // namespace

int main(int argc, char** argv) {
  return perfMain(argc, argv, kSendRecv);
}
