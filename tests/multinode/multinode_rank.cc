// One rank of a multi-node test, started inside a network namespace by
// netns_harness.sh. Rank 0 writes the unique id to a file all namespaces
// see (they share the file system); the others wait for it.
//
//   multinode_rank MODE RANK NRANKS IDFILE
//   MODE sweep:   the collective sweep (coll_sweep.h), send/receive with every
//                 peer and a large all-reduce, each result checked; then
//                 that every channel's ring left each node once (however
//                 the harness placed the ranks)
//   MODE loop:    all-reduces of 1M floats (checked) until a failure or
//                 BRAID_TEST_LOOP_SECONDS (for faults: a killed rank, a downed
//                 link, stray clients); with BRAID_TEST_SPLIT set, each
//                 iteration also splits off a communicator (new connectors)
//                 and all-reduces on it
// Prints "rank R: net NAME" after init (the Net used for other hosts), then
// "rank R: ok" or "rank R: FAILED after S s: <error>" and exits 0 or 1.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "coll_sweep.h"
#include "core/comm.h"
#include "nccl.h"

namespace {

using Clock = std::chrono::steady_clock;
Clock::time_point gStart;

double elapsed() {
  return std::chrono::duration<double>(Clock::now() - gStart).count();
}

std::string check(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return "";
  const char* last = ncclGetLastError(comm);
  return std::string(what) + ": " + ncclGetErrorString(r) + ": " + (last != nullptr ? last : "");
}

bool getId(int rank, const std::string& file, ncclUniqueId* id) {
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) return false;
    const std::string tmp = file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id->internal, sizeof(id->internal));
    return std::rename(tmp.c_str(), file.c_str()) == 0;
  }
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in(file, std::ios::binary);
    if (in && in.read(id->internal, sizeof(id->internal))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Send/receive with every peer at once (several FIFO steps each way).
std::string p2pAll(ncclComm_t comm, int rank, int n) {
  const size_t count = (1u << 18) + 5;
  std::vector<std::vector<int>> out(n, std::vector<int>(count)), in(n, std::vector<int>(count, -1));
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < count; ++i)
      out[p][i] = static_cast<int>((rank * 1000003 + p * 7919 + i) % 1000033);
  }
  std::string err = check(ncclGroupStart(), comm, "group start");
  for (int p = 0; p < n && err.empty(); ++p) {
    if (p == rank) continue;
    err += check(ncclSend(out[p].data(), count, ncclInt32, p, comm, nullptr), comm, "send");
    err += check(ncclRecv(in[p].data(), count, ncclInt32, p, comm, nullptr), comm, "recv");
  }
  err += check(ncclGroupEnd(), comm, "group end");
  if (!err.empty()) return err;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t i = 0; i < count; ++i) {
      if (in[p][i] != static_cast<int>((p * 1000003 + rank * 7919 + i) % 1000033)) {
        return "send/recv: element " + std::to_string(i) + " from rank " + std::to_string(p) + " is wrong";
      }
    }
  }
  return "";
}

// One all-reduce of `count` floats, checked exactly (small integers).
std::string allReduce(ncclComm_t comm, int rank, int n, size_t count) {
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * (i % 97 + 1) % 1009);
  std::string err = check(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr),
                          comm, "all-reduce");
  if (!err.empty()) return err;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((r + 1) * (i % 97 + 1) % 1009);
    if (buf[i] != want) {
      return "all-reduce of " + std::to_string(count) + ": element " + std::to_string(i) + " is " +
             std::to_string(buf[i]) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

// Every connected channel's ring crosses the network once per node: each
// rank counts its ring hops to the next rank that go over the network, and
// the sums must equal the node count.
std::string ringCrossings(ncclComm_t comm) {
  braid::ChannelSet& channels = comm->channels();
  const int nch = channels.connected();
  std::vector<int> hops(static_cast<size_t>(std::max(nch, 1)), 0);
  for (int c = 0; c < nch; ++c) {
    const braid::RingLink* ring = channels[c].ring.get();
    if (ring != nullptr) hops[static_cast<size_t>(c)] = comm->connectors().usesNet(ring->next) ? 1 : 0;
  }
  std::string err =
      check(ncclAllReduce(hops.data(), hops.data(), hops.size(), ncclInt32, ncclSum, comm, nullptr), comm,
            "crossings");
  if (!err.empty()) return err;
  for (int c = 0; c < nch; ++c) {
    if (channels[c].ring == nullptr) continue;
    if (hops[static_cast<size_t>(c)] != comm->nnodes()) {
      return "channel " + std::to_string(c) + "'s ring crosses the network " +
             std::to_string(hops[static_cast<size_t>(c)]) + " times for " + std::to_string(comm->nnodes()) +
             " nodes";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  gStart = Clock::now();
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s sweep|loop RANK NRANKS IDFILE\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int rank = std::atoi(argv[2]), n = std::atoi(argv[3]);
  ncclUniqueId id;
  if (!getId(rank, argv[4], &id)) {
    std::printf("rank %d: FAILED after %.1f s: no unique id in %s\n", rank, elapsed(), argv[4]);
    return 1;
  }
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), nullptr, "init");
  if (err.empty()) {  // which Net carries the traffic to other hosts (the harness checks it: no silent
                      // fallback)
    for (int p = 0; p < n; ++p) {
      if (p != rank && comm->connectors().usesNet(p)) {
        std::printf("rank %d: net %s\n", rank, comm->connectors().transportName(p));
        std::fflush(stdout);
        break;
      }
    }
  }
  if (err.empty() && mode == "sweep") {
    err = braid::test::collSweep(comm, rank, n, braid::test::SweepCounts::kQuick);
    if (err.empty()) err = p2pAll(comm, rank, n);
    if (err.empty()) err = allReduce(comm, rank, n, (8u << 20) + 3);
    if (err.empty()) err = ringCrossings(comm);
  } else if (err.empty() && mode == "loop") {
    const char* s = std::getenv("BRAID_TEST_LOOP_SECONDS");
    const double seconds = s != nullptr ? std::atof(s) : 10;
    const bool split = std::getenv("BRAID_TEST_SPLIT") != nullptr;
    int iters = 0;
    int stop = 0;
    while (err.empty() && !stop) {
      if (split) {  // a new communicator each time: new connectors, so the listeners accept again
        ncclComm_t sub = nullptr;
        err = check(ncclCommSplit(comm, 0, rank, &sub, nullptr), comm, "split");
        if (err.empty()) err = allReduce(sub, rank, n, 1u << 18);
        if (sub != nullptr) err += check(ncclCommDestroy(sub), sub, "destroy split");
      }
      if (err.empty()) err = allReduce(comm, rank, n, 1u << 20);
      if (++iters == 1 && err.empty()) std::printf("rank %d: running\n", rank), std::fflush(stdout);
      // Stop together: a rank that stopped alone would leave the others in a split or collective.
      stop = elapsed() >= seconds ? 1 : 0;
      if (err.empty())
        err = check(ncclAllReduce(&stop, &stop, 1, ncclInt32, ncclMax, comm, nullptr), comm, "vote");
    }
  }
  if (!err.empty()) {
    std::printf("rank %d: FAILED after %.1f s: %s\n", rank, elapsed(), err.c_str());
    std::fflush(stdout);
    if (comm != nullptr) ncclCommAbort(comm);
    return 1;
  }
  err = check(ncclCommDestroy(comm), comm, "destroy");
  std::printf("rank %d: %s (%.1f s)\n", rank, err.empty() ? "ok" : err.c_str(), elapsed());
  return err.empty() ? 0 : 1;
}
