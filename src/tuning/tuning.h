// The algorithm catalogue and the selector (DESIGN.md §6).
//
// Every algorithm of the catalogue has a name, a one-line description, the
// collectives it implements and the conditions it needs. For one collective
// the selector estimates, for every algorithm and protocol that applies and
// that NCCL_ALGO / NCCL_PROTO allow,
//     time = steps x latency(protocol) + bytes on the busiest link / bandwidth(protocol, channels)
// (the bandwidth capped by what the topology expects of the links for that
// algorithm, when known) and takes the fastest; the channel count grows with the message so each
// channel has enough work (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS bound it).
// When the environment allows nothing that applies (NCCL_ALGO=Tree for an
// all-gather), the best unrestricted choice runs and the reason is logged.
//
// NCCL_ALGO and NCCL_PROTO take NCCL's forms: a comma list ("Ring,Tree"),
// an exclusion ("^Tree"), or per collective ("allreduce:tree,ring;
// broadcast:ring"); names ignore case. NCCL's algorithms that Braid does not
// have (CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT) are accepted and
// never chosen; an unknown name fails init naming the variable.
//
// Constants: GPU backend, from all_reduce_perf sweeps with each algorithm
// and protocol forced on 2x H200 (NVLink); host backend, fitted to all_reduce_perf sweeps of each
// algorithm and protocol forced through NCCL_ALGO/NCCL_PROTO on the 2-core
// CI machine, 2 and 4 ranks (docs/performance.md). When ranks outnumber
// cores every step costs a context switch, which changes the choice.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "collectives/coll_type.h"
#include "transports/transport.h"
#include "util/status.h"

namespace braid {

enum class Algo { Ring, Tree, Direct, TwoShot };
constexpr int kNumAlgos = 4;
const char* algoName(Algo a);
const char* algoDescription(Algo a);
// Whether GPU collectives on windows may run zero-copy at all
// (BRAID_GPU_ZERO_COPY_MAX_BYTES > 0): when not, the caller need not offer
// the selector its windows.
bool gpuZeroCopyAllowed();

constexpr int kMaxChannels = 32;
// The GPU engine keeps this many channels of point-to-point connectors per
// pair of ranks; its direct (one-shot) all-reduce runs over them, so it
// gets at most this many channels where a ring gets kMaxChannels.
constexpr int kGpuPeerChannels = 16;

struct TuneInput {
  CollType coll;
  size_t bytes;  // bytes of one rank's input (all-gather: its block; reduce-scatter: all blocks)
  int nranks;
  int nnodes;        // hosts the ranks run on
  int localRanks;    // ranks on the host that holds the most (every rank must choose alike)
  int maxChannels;   // what the machine affords (cores per local rank), before NCCL_MAX_NCHANNELS
  int cores = 0;     // cores of the smallest host (0: unknown); fewer than localRanks means ranks share cores
  bool gpu = false;  // the GPU backend (its own cost constants)
  // GPU all-reduce with an operator other than sum and average (prod, min,
  // max, PreMulSum): the kernels of those operators hold Ring, and Direct
  // for 2 ranks, only (docs/gpu.md, "Building").
  bool fewAlgos = false;
  // GPU: the ring may run LL128 (Communicator::ll128(), and a kernel that
  // has it: sum, average, or a collective that only moves data).
  bool ll128 = false;
  // Host all-reduce, all-gather or reduce-scatter whose buffers are in
  // zero-copy windows on every rank (ncclCommWindowRegister): Direct may
  // run zero-copy.
  bool windows = false;
  // What the topology search expects the links to carry for each algorithm
  // (bus bandwidth of all channels together, GB/s; 0: unknown). The
  // engine's own rate is capped by it, so a machine whose links are slower
  // than the engine (PCIe) is estimated by its links.
  double ringBusGBs = 0, treeBusGBs = 0;
};

struct TuneChoice {
  Algo algo = Algo::Ring;
  Protocol proto = Protocol::Simple;
  int nChannels = 1;
  size_t chunkBytes = 0;  // bytes one Simple step carries (0: a whole slot)
  bool zeroCopy = false;  // Direct reading and writing the peers' windows (collectives/symmetric.h)
  double estimatedUs = 0;
  // Why the environment's restriction was not followed, if it was not: text
  // that lives as long as the process, so a choice copies as plain data
  // (every collective copies the cached one).
  std::string_view note;
};

// Chooses for one collective; never fails (Ring/Simple implements everything).
TuneChoice selectAlgorithm(const TuneInput& in);

// A communicator's memory of its last choice per collective, with and
// without windows: a loop of equal calls (the common case) skips the
// selector, also when the caller asks both ways (runNow does when windows
// were offered but the buffers are outside them).
class ChoiceCache {
 public:
  const TuneChoice& select(const TuneInput& in) {
    Entry& e = entries_[static_cast<int>(in.coll)][in.windows ? 1 : 0];
    if (!e.valid || e.in.bytes != in.bytes || e.in.nranks != in.nranks || e.in.nnodes != in.nnodes ||
        e.in.localRanks != in.localRanks || e.in.maxChannels != in.maxChannels || e.in.cores != in.cores ||
        e.in.gpu != in.gpu || e.in.fewAlgos != in.fewAlgos || e.in.ll128 != in.ll128 ||
        e.in.windows != in.windows || e.in.ringBusGBs != in.ringBusGBs || e.in.treeBusGBs != in.treeBusGBs) {
      e.in = in;
      e.choice = selectAlgorithm(in);
      e.valid = true;
    }
    return e.choice;
  }

 private:
  struct Entry {
    bool valid = false;
    TuneInput in{};
    TuneChoice choice;
  };
  Entry entries_[kNumCollTypes][2];
};

// Parses a NCCL_ALGO / NCCL_PROTO value (exposed for the parameter
// validators and tests). `allowed[c][x]` says whether collective c may use
// algorithm (protocol) x.
struct AlgoFilter {
  bool allowed[kNumCollTypes][kNumAlgos + 5];  // Braid's algorithms, then NCCL's others
};
Status parseAlgoFilter(const std::string& text, AlgoFilter* out);
Status parseProtoFilter(const std::string& text, AlgoFilter* out);

}  // namespace braid
