#include "tuning/tuning.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid {
namespace {

// Names NCCL_ALGO accepts: Braid's algorithms first (in Algo order), then
// NCCL's that Braid does not have.
const char* const kAlgoNames[] = {"Ring",         "Tree", "Direct",   "TwoShot", "CollNetDirect",
                                  "CollNetChain", "NVLS", "NVLSTree", "PAT"};
constexpr int kNumAlgoNames = sizeof(kAlgoNames) / sizeof(kAlgoNames[0]);
static_assert(kNumAlgoNames <= kNumAlgos + 5, "AlgoFilter holds every name");
const char* const kProtoNames[] = {"Simple", "LL", "LL128"};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    parts.push_back(trim(s.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// Parsers run under the parameter registry's lock: no logging, so no
// BRAID_CHECK (it logs) in them.

// One list ("Ring,Tree" or "^Tree") into allowed[0..n).
Status parseList(const std::string& list, const char* const* names, int n, const char* what, bool* allowed) {
  std::string body = trim(list);
  const bool exclude = !body.empty() && body[0] == '^';
  if (exclude) body = body.substr(1);
  for (int i = 0; i < n; ++i) allowed[i] = exclude;
  int named = 0;
  for (const std::string& name : split(body, ',')) {
    if (name.empty()) continue;
    ++named;
    int found = -1;
    for (int i = 0; i < n; ++i) {
      if (lower(name) == lower(names[i])) found = i;
    }
    if (found < 0) {
      std::string known;
      for (int i = 0; i < n; ++i) known += strCat(i ? ", " : "", names[i]);
      return invalidArgument("unknown ", what, " '", name, "' (known: ", known, ")");
    }
    allowed[found] = !exclude;
  }
  // "," or "allreduce:" would allow nothing (or, as "^", exclude nothing):
  // a mistake, not a setting.
  if (named == 0) return invalidArgument("no ", what, " named in '", trim(list), "'");
  return okStatus();
}

Status parseFilter(const std::string& text, const char* const* names, int n, const char* what,
                   AlgoFilter* out) {
  for (auto& row : out->allowed) std::fill(std::begin(row), std::end(row), true);
  if (trim(text).empty()) return okStatus();
  if (text.find(':') == std::string::npos) {
    for (auto& row : out->allowed) {
      Status s = parseList(text, names, n, what, row);
      if (!s.ok()) return s;
    }
    return okStatus();
  }
  for (const std::string& entry : split(text, ';')) {
    if (entry.empty()) continue;
    size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      return invalidArgument("'", entry, "' is not of the form collective:", what,
                             "s (e.g. allreduce:ring,tree)");
    }
    std::string key = lower(trim(entry.substr(0, colon)));
    int coll = -1;
    for (int c = 0; c < kNumCollTypes; ++c) {
      if (key == collTypeKey(static_cast<CollType>(c))) coll = c;
    }
    if (coll < 0) {
      return invalidArgument("unknown collective '", key,
                             "' (known: allreduce, allgather, reducescatter, broadcast, reduce)");
    }
    Status s = parseList(entry.substr(colon + 1), names, n, what, out->allowed[coll]);
    if (!s.ok()) return s;
  }
  return okStatus();
}

Status validateAlgo(const std::string& text) {
  AlgoFilter f;
  return parseAlgoFilter(text, &f);
}
Status validateProto(const std::string& text) {
  AlgoFilter f;
  return parseProtoFilter(text, &f);
}

StringParam paramAlgo(
    "ALGO", "",
    "Algorithms collectives may use: a list (Ring,Tree,Direct,TwoShot), an exclusion (^Tree) or per "
    "collective (allreduce:tree;broadcast:ring); empty lets the selector choose",
    {}, &validateAlgo);
StringParam paramProto("PROTO", "",
                       "Protocols collectives may use: a list (Simple,LL,LL128), an exclusion (^LL) or per "
                       "collective; the host backend speaks Simple and LL; GPU rings run LL128 only when "
                       "this is set and allows it "
                       "(and the GPUs qualify: docs/gpu.md)",
                       {}, &validateProto);
// Counts above the 32 channels Braid has are taken as 32.
IntParam paramMinChannels("MIN_NCHANNELS", 1, "Fewest channels a collective runs on (at most 32 are used)", 0,
                          INT32_MAX);
IntParam paramMaxChannels(
    "MAX_NCHANNELS", 0,
    "Most channels a collective runs on (0: as many as the machine affords: on the host "
    "backend, cores per local rank; on GPUs 32)",
    0, INT32_MAX);

// Host backend constants (microseconds, bytes per microsecond and channel),
// from the 2-rank sweeps: Ring/Simple 8 B 1.0 us and 128 KiB 15.7 us,
// Direct/Simple 8 B 0.58 us, 4 KiB 1.7 us and 128 KiB 21.6 us. Direct/LL
// (data packed after the header unit, 2026-12-06) 8 B 0.43-0.50 us, 2 KiB
// 0.85-1.0 us, 8 KiB 1.3-2.1 us: LL pays up to about 3 KiB, while every
// rank has a core (with ranks taking turns a step costs the same either way).
struct ProtoCost {
  double stepUs;
  double bytesPerUs;
};
constexpr ProtoCost kHostCost[] = {{0.50, 9000.0} /* Simple */, {0.43, 7600.0} /* LL */};
// With more ranks than cores a step waits for the peer to be scheduled
// (4 ranks on 2 cores: Ring/Simple 8 B takes 50 us for 6 steps).
constexpr double kOversubscribedStepUs = 8.0;
// There LL's deeper FIFO (kHostLLSteps) lets a rank run further ahead
// before it hands its core over: 4 ranks on 2 cores, LL against Simple,
// broadcast 8 B-8 KiB 1.0-1.5 against 2.5-3.6 us, reduce 0.75-1.0 against
// 2.1-3.5, all-reduce 8.0-12 against 12-15. Where the busiest rank moves
// more, LL lost: 4 ranks' all-reduce of 4 KiB (16 KiB through a rank)
// 13.5-14.8 against 12.0-13.5 us, of 8 KiB (two-shot) 25-26 against 14, and
// from 32 KiB every collective. So LL's steps cost less there up to 8 KiB
// through the busiest rank.
constexpr double kOversubscribedLLStepFactor = 0.6;
constexpr double kOversubscribedLLMaxBytes = 8192;
// GPU backend: a step is a barrier, a system fence and a flag over the
// link (Simple) or one polled line (LL); a channel is one block.
// LL128's figures are from one H200 with two ranks sharing it (graphs: a
// step 0.25 us more than LL's; 300 GB/s busbw at 512 MB on 32 channels),
// not from NVLink, where it is meant to run: until it is measured there it
// is a candidate only when NCCL_PROTO is set and allows it (see below).
constexpr ProtoCost kGpuCost[] = {
    {3.0, 15000.0} /* Simple */, {1.0, 3000.0} /* LL */, {1.25, 9400.0} /* LL128 */};
// A channel is worth its thread (block) only past this many bytes. Across
// nodes each channel is a connection of its own with its own proxy helper
// (on 8+ cores), and more of them fill the wire sooner: on 16 cores over
// loopback, 1 MB all-reduces between two host ids made 3.3-3.9 GB/s busbw on
// 4 channels against 2.5-3.1 on the 2 that 512 KiB gave (Open MPI 2.2-2.3),
// while 256 KB ones lost on more than one.
constexpr double kBytesPerChannel = 512.0 * 1024;
constexpr double kNetBytesPerChannel = 256.0 * 1024;
constexpr double kGpuBytesPerChannel = 16.0 * 1024;  // blocks are free: spread mid sizes wide
constexpr int kDirectMaxRanks = 8;
// Zero-copy all-reduce on the host (windows): two meetings of all ranks,
// and each rank reads and writes its share of every rank's buffers. On the
// 2-core CI machine, 2 ranks: 128 KiB in 3.2 us, 2 MiB in 73 us, 8 MiB in
// 580 us; past the caches the ring's FIFOs are faster (32 MiB: 6.2 against
// 7.7 GB/s), hence the limit.
constexpr ProtoCost kZeroCopyCost = {0.35, 28000.0};
// Zero-copy on GPU windows: two barriers (a flag each way over the link);
// each block reads its share of every rank's input and writes every rank's
// output with 16-byte accesses. Off unless asked for: on one H200 with two
// ranks sharing it, the all-reduces it would take (8 KiB to 16 MiB) tie
// with the ring and one-shot when launched one by one and lose 1-1.5 us
// from 8 KiB to 512 KiB in graphs (docs/performance.md); it is meant for
// NVLink, where it has not run yet.
constexpr ProtoCost kGpuZeroCopyCost = {1.0, 15000.0};
SizeParam paramGpuZeroCopyMaxBytes("GPU_ZERO_COPY_MAX_BYTES", 0,
                                   "Largest GPU collective on windows (ncclCommWindowRegister) that runs "
                                   "zero-copy (0: never; also bounded by BRAID_ZERO_COPY_MAX_BYTES)");
SizeParam paramZeroCopyMaxBytes("ZERO_COPY_MAX_BYTES", 16u << 20,
                                "Largest all-reduce on windows (ncclCommWindowRegister) that runs "
                                "zero-copy, reading and writing the peers' buffers directly (0: never)");

double log2Ceil(int n) {
  return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n)));
}

// Steps on the critical path and bytes through the busiest rank, or false
// if the algorithm cannot run this collective here.
bool model(Algo a, const TuneInput& in, double* steps, double* bytes) {
  const double n = in.nranks, b = static_cast<double>(in.bytes);
  switch (a) {
    case Algo::Ring:
      switch (in.coll) {
        case CollType::AllReduce: *steps = 2 * (n - 1), *bytes = 2 * (n - 1) / n * b; return true;
        case CollType::AllGather: *steps = n - 1, *bytes = (n - 1) * b; return true;
        case CollType::ReduceScatter: *steps = n - 1, *bytes = (n - 1) / n * b; return true;
        default: *steps = n - 1, *bytes = b; return true;  // broadcast, reduce: a pipelined chain
      }
    case Algo::Tree: {
      if (in.coll != CollType::AllReduce || in.fewAlgos) return false;
      const double depth = (in.localRanks - 1) + log2Ceil(in.nnodes);
      *steps = 2 * depth, *bytes = 2 * b;
      return true;
    }
    case Algo::Direct:
      // One exchange; every rank copies its input to n-1 peers and reduces n inputs.
      if (in.nnodes > 1 || in.nranks > kDirectMaxRanks) return false;
      if (in.coll != CollType::AllReduce) {
        // The host's other collectives in one exchange (collectives/direct.h):
        // the busiest rank (a root, or every rank of an all-gather or
        // reduce-scatter) moves its n-1 peers' shares.
        if (in.gpu) return false;
        const double share = in.coll == CollType::ReduceScatter ? b / n : b;
        *steps = 1 + 0.15 * (n - 1), *bytes = 1.3 * (n - 1) * share;
        return true;
      }
      if (in.fewAlgos && in.nranks > 2) return false;
      if (in.gpu) {
        *steps = 1, *bytes = (n - 1) * b;  // n-1 peers written at once, each through its own link
      } else {
        *steps = 1 + 0.15 * (n - 1), *bytes = 1.3 * (n - 1) * b;
      }
      return true;
    case Algo::TwoShot:
      // Two exchanges with every peer at once, a ring's bytes. With 2 ranks it is the ring.
      if (in.coll != CollType::AllReduce || in.nnodes > 1 || in.nranks < 3 || in.nranks > kDirectMaxRanks ||
          in.fewAlgos) {
        return false;
      }
      *steps = 2, *bytes = 2 * (n - 1) / n * b;
      // Host: each phase touches every peer's FIFO; past the caches that
      // costs (2 cores, 8 ranks: 512 KiB in 530-610 us against the ring's
      // 310-380; 4 ranks at 32 KiB 14-20 us against 18-38).
      if (!in.gpu) *steps += 0.3 * (n - 1), *bytes *= 1 + 0.1 * (n - 1);
      return true;
  }
  return false;
}

// A note's text, kept for the life of the process (a handful of distinct
// texts: one per collective and NCCL_ALGO/NCCL_PROTO setting); each is
// logged as a warning the first time, since the user's setting is not
// followed.
std::string_view keepNote(std::string text) {
  static std::mutex mutex;
  static std::set<std::string> notes;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, first] = notes.insert(std::move(text));
  if (first) BRAID_WARN("%s", it->c_str());
  return *it;
}

}  // namespace

const char* algoName(Algo a) {
  return kAlgoNames[static_cast<int>(a)];
}

const char* algoDescription(Algo a) {
  switch (a) {
    case Algo::Ring:
      return "ring: reduce-scatter then all-gather around a ring (pipelined chain for broadcast/reduce); "
             "best bandwidth";
    case Algo::Tree:
      return "tree: reduce up then broadcast down; chains inside a node, a double binary tree across nodes";
    case Algo::Direct:
      return "direct (one-shot): every rank sends its input to every peer and reduces all in rank order "
             "(host: every collective in one exchange with every peer, or with the root); "
             "lowest latency, one node, at most 8 ranks";
    default:
      return "two-shot: reduce-scatter then all-gather, each one exchange with every peer at once; "
             "medium sizes, one node, 3 to 8 ranks";
  }
}

bool gpuZeroCopyAllowed() {
  return paramGpuZeroCopyMaxBytes.get() > 0;
}

Status parseAlgoFilter(const std::string& text, AlgoFilter* out) {
  return parseFilter(text, kAlgoNames, kNumAlgoNames, "algorithm", out);
}
Status parseProtoFilter(const std::string& text, AlgoFilter* out) {
  return parseFilter(text, kProtoNames, 3, "protocol", out);
}

TuneChoice selectAlgorithm(const TuneInput& in) {
  // Parsed once per value (the parameters are read once; tests reload them).
  static thread_local std::string algoText = "\x01", protoText = "\x01";
  static thread_local AlgoFilter algos, protos;
  std::string a = paramAlgo.get(), p = paramProto.get();
  if (a != algoText) algoText = a, (void)parseAlgoFilter(a, &algos);  // validated at init
  if (p != protoText) protoText = p, (void)parseProtoFilter(p, &protos);

  int maxCh = std::clamp(in.maxChannels, 1, kMaxChannels);
  if (paramMaxChannels.get() > 0) maxCh = std::min<int>(maxCh, static_cast<int>(paramMaxChannels.get()));
  const int minCh = std::clamp<int>(static_cast<int>(paramMinChannels.get()), 1, kMaxChannels);
  maxCh = std::max(maxCh, minCh);
  const int c = static_cast<int>(in.coll);

  TuneChoice best;
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass) {  // pass 1 ignores the environment
    for (int ai = 0; ai < kNumAlgos; ++ai) {
      for (int pi = 0; pi < 3; ++pi) {  // the host speaks Simple and LL; GPU rings also LL128 where allowed
        if (pass == 0 && (!algos.allowed[c][ai] || !protos.allowed[c][pi])) continue;
        // LL128: GPU rings where the communicator allows it, and only when
        // NCCL_PROTO is set and allows it (not measured over NVLink yet; docs/gpu.md).
        if (pi == static_cast<int>(Protocol::LL128) &&
            !(in.gpu && in.ll128 && ai == static_cast<int>(Algo::Ring) && pass == 0 && !protoText.empty()))
          continue;
        // GPU two-shot: only when NCCL_ALGO is set and allows it. With 4
        // ranks sharing one H200 it lost to the ring at every size
        // (docs/gpu.md), and it has not run on separate GPUs.
        if (ai == static_cast<int>(Algo::TwoShot) && in.gpu && !(pass == 0 && !algoText.empty())) continue;
        double steps = 0, bytes = 0;
        // Zero-copy (windows): two meetings; each rank moves its share
        // of every rank's buffers (all-gather: its block to n-1 peers).
        const bool zeroCopy = ai == static_cast<int>(Algo::Direct) && in.windows && pi == 0 &&
                              in.bytes <= paramZeroCopyMaxBytes.get() &&
                              (!in.gpu || in.bytes <= paramGpuZeroCopyMaxBytes.get()) &&
                              (in.coll == CollType::AllReduce || in.coll == CollType::AllGather ||
                               in.coll == CollType::ReduceScatter);
        if (zeroCopy) {
          steps = 2;
          bytes = static_cast<double>(in.bytes) * (in.coll == CollType::AllGather ? in.nranks - 1 : 1);
        } else if (!model(static_cast<Algo>(ai), in, &steps, &bytes)) {
          continue;
        }
        int nch = 1;
        if (in.gpu) {
          nch = std::clamp(static_cast<int>(static_cast<double>(in.bytes) / kGpuBytesPerChannel), minCh, maxCh);
          // Direct and TwoShot run over the point-to-point channels. With 2
          // ranks Direct moves a ring's bytes in half the steps: unbounded
          // here, it would win at every size and then run on half the channels.
          const bool peers = ai == static_cast<int>(Algo::Direct) || ai == static_cast<int>(Algo::TwoShot);
          if (peers && !zeroCopy) nch = std::min(nch, kGpuPeerChannels);
        } else if ((ai != static_cast<int>(Algo::Direct) && ai != static_cast<int>(Algo::TwoShot)) ||
                   zeroCopy) {  // windows: one node
          const double per = in.nnodes > 1 ? kNetBytesPerChannel : kBytesPerChannel;
          nch = std::clamp(static_cast<int>(static_cast<double>(in.bytes) / per), minCh, maxCh);
        }
        const ProtoCost& cost = zeroCopy ? (in.gpu ? kGpuZeroCopyCost : kZeroCopyCost)
                                : in.gpu ? kGpuCost[pi]
                                         : kHostCost[pi];
        const bool shared = in.cores > 0 && in.localRanks > in.cores;  // ranks take turns on the cores
        const double share = shared ? static_cast<double>(in.cores) / in.localRanks : 1.0;
        double rate = cost.bytesPerUs * share * nch;  // bytes per us
        const double links = ai == static_cast<int>(Algo::Tree) ? in.treeBusGBs : in.ringBusGBs;
        if (links > 0) rate = std::min(rate, links * 1000.0);  // GB/s = 1000 bytes per us
        double stepUs = shared ? kOversubscribedStepUs : cost.stepUs;
        if (shared && !in.gpu && pi == static_cast<int>(Protocol::LL) && bytes <= kOversubscribedLLMaxBytes)
          stepUs *= kOversubscribedLLStepFactor;
        const double us = steps * stepUs + bytes / rate;
        if (!found || us < best.estimatedUs) {
          best.algo = static_cast<Algo>(ai);
          best.proto = static_cast<Protocol>(pi);
          best.nChannels = nch;
          best.zeroCopy = zeroCopy;
          best.estimatedUs = us;
          found = true;
        }
      }
    }
    if (!found && pass == 0) {
      best.note = keepNote(strCat("NCCL_ALGO='", algoText, "' and NCCL_PROTO='", protoText,
                                  "' allow nothing that runs ", collTypeKey(in.coll),
                                  " here; using the selector's choice"));
    }
  }
  return best;
}

}  // namespace braid
