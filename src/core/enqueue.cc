#include "core/enqueue.h"

#include <algorithm>
#include <cstring>

#include "core/gpu_engine.h"
#include "core/group.h"
#include "core/host_coll.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

BoolParam paramCheckColl("CHECK_COLL", false,
                         "Before every collective, compare its operation, count, datatype, root, reduction "
                         "operator and sequence number across ranks (one bootstrap all-gather each) and fail "
                         "with a message naming the ranks that disagree");
SizeParam paramChunkSize(
    "CHUNK_SIZE", 0,
    "Bytes one FIFO step of a ring carries (0: 128K for Simple, 512K on the host backend "
    "where one host's ranks outnumber its cores; at most BUFFSIZE/8); "
    "smaller steps pipeline better, larger ones synchronize less");
SizeParam paramHostStreamBytes("HOST_STREAM_BYTES", 32u << 20,
                               "Host collectives whose output on a rank is at least this many bytes write it "
                               "with non-temporal (streaming) stores, sparing the reads of destination lines "
                               "the caches could not keep anyway (0: never)");

constexpr size_t kDefaultChunkBytes = 128 * 1024;
// Ranks taking turns on the cores hand the core over at every step they
// wait for; longer steps mean fewer hand-overs. On the 2-core CI VM
// (2026-12-05, forked ranks, alternating runs) 512 KiB steps against
// 128 KiB: all-reduce 4 ranks 32 MiB 13.3-14.8 ms against 14.5-16.5, 128
// MiB 56-62 against 66-75; 8 ranks 128 MiB 106 against 138-145;
// reduce-scatter 4 ranks 8 MiB 1.1-1.4 against 1.6-2.2 ms; broadcast 2
// MiB 178-189 against 318-336 us. 2 MiB steps lost (128 MiB 74-75 ms).
// Two ranks on two cores tied. Not measured across hosts, so it stays
// within one.
constexpr size_t kOversubscribedChunkBytes = 512 * 1024;

Status dispatch(Communicator* comm, const CollArgs& a, HostPlan& plan) {
  if (a.type == CollType::AllGather || a.type == CollType::Broadcast) {
    CollArgs bytes = a;  // they move bytes whatever the datatype
    bytes.count = a.count * datatypeSize(a.datatype);
    bytes.datatype = ncclUint8;
    bytes.op = ncclSum;
    return runHostCollective<uint8_t>(comm, bytes, plan);
  }
  switch (a.datatype) {
    case ncclInt8: return runHostCollective<int8_t>(comm, a, plan);
    case ncclUint8: return runHostCollective<uint8_t>(comm, a, plan);
    case ncclInt32: return runHostCollective<int32_t>(comm, a, plan);
    case ncclUint32: return runHostCollective<uint32_t>(comm, a, plan);
    case ncclInt64: return runHostCollective<int64_t>(comm, a, plan);
    case ncclUint64: return runHostCollective<uint64_t>(comm, a, plan);
    case ncclFloat16: return runHostCollective<Half>(comm, a, plan);
    case ncclFloat32: return runHostCollective<float>(comm, a, plan);
    case ncclFloat64: return runHostCollective<double>(comm, a, plan);
    case ncclBfloat16: return runHostCollective<BFloat16>(comm, a, plan);
    case ncclFloat8e4m3: return runHostCollective<Fp8E4M3>(comm, a, plan);
    case ncclFloat8e5m2: return runHostCollective<Fp8E5M2>(comm, a, plan);
    default: return invalidArgument("datatype ", static_cast<int>(a.datatype), " is not supported");
  }
}

// ---- BRAID_CHECK_COLL ------------------------------------------------------------

struct CollRecord {
  uint64_t seq;
  uint64_t count;
  int32_t type, datatype, op, root;
  char name[24];
};

std::string describe(const CollRecord& r) {
  std::string what = strCat(r.name, " #", r.seq, " (count ", r.count, ", ",
                            datatypeName(static_cast<ncclDataType_t>(r.datatype)));
  CollType t = static_cast<CollType>(r.type);
  if (t != CollType::AllGather && t != CollType::Broadcast) what += strCat(", op ", r.op);
  if (t == CollType::Broadcast || t == CollType::Reduce) what += strCat(", root ", r.root);
  return what + ")";
}

Status checkAcrossRanks(Communicator* comm, const CollArgs& a, uint64_t seq) {
  std::vector<CollRecord> all(static_cast<size_t>(comm->nranks()));
  CollRecord& mine = all[static_cast<size_t>(comm->rank())];
  std::memset(&mine, 0, sizeof(mine));
  mine.seq = seq;
  mine.count = a.count;
  mine.type = static_cast<int32_t>(a.type);
  mine.datatype = static_cast<int32_t>(a.datatype);
  const bool reduces = a.type != CollType::AllGather && a.type != CollType::Broadcast;
  mine.op = reduces ? static_cast<int32_t>(a.op) : -1;
  mine.root = (a.type == CollType::Broadcast || a.type == CollType::Reduce) ? a.root : -1;
  std::strncpy(mine.name, a.name, sizeof(mine.name) - 1);
  // A rank that never makes the call fails this wait in the stall timeout,
  // as the collective itself would.
  bootstrap::Bootstrap::StallBound bound(comm->bootstrap(), comm->stallTimeoutSeconds());
  BRAID_CHECK(comm->bootstrap()
                  ->allGather(all.data(), sizeof(CollRecord))
                  .withContext(strCat("BRAID_CHECK_COLL: comparing ", a.name, " #", seq, " across ranks")));
  // Everyone compares against rank 0, so every rank reports the same thing.
  const CollRecord& ref = all[0];
  std::string diff;
  int differing = 0;
  for (size_t r = 1; r < all.size(); ++r) {
    const CollRecord& x = all[r];
    if (x.seq == ref.seq && x.count == ref.count && x.type == ref.type && x.datatype == ref.datatype &&
        x.op == ref.op && x.root == ref.root) {
      continue;
    }
    if (++differing <= 4) diff += strCat("; rank ", r, " called ", describe(x));
  }
  if (differing == 0) return okStatus();
  return invalidUsage("BRAID_CHECK_COLL: ranks disagree: rank 0 called ", describe(ref), diff,
                      differing > 4 ? strCat("; and ", differing - 4, " more ranks") : "");
}

// Bytes of one rank's input, as the selector counts them.
size_t tuneBytes(const CollArgs& a, int nranks) {
  size_t bytes = a.count * datatypeSize(a.datatype);
  return a.type == CollType::ReduceScatter ? bytes * static_cast<size_t>(nranks) : bytes;
}

// Whether both buffers of a collective that can run zero-copy are in
// zero-copy windows (every rank decides alike when every rank passes
// windowed buffers, as NCCL requires of symmetric windows).
bool inWindows(Communicator* comm, const CollArgs& a, HostPlan* plan) {
  const size_t bytes = a.count * datatypeSize(a.datatype), all = bytes * static_cast<size_t>(comm->nranks());
  size_t sendBytes = bytes, recvBytes = bytes;
  switch (a.type) {
    case CollType::AllReduce: break;
    case CollType::AllGather: recvBytes = all; break;
    case CollType::ReduceScatter: sendBytes = all; break;
    default: return false;  // broadcast and reduce: non-roots need not pass both buffers
  }
  return comm->windows().find(a.send, sendBytes, &plan->sendWindow, &plan->sendOffset) &&
         comm->windows().find(a.recv, recvBytes, &plan->recvWindow, &plan->recvOffset);
}

// The selector's choice for one collective, and where a zero-copy choice
// finds its buffers (plan's windows).
void choose(Communicator* comm, const CollArgs& a, HostPlan* plan) {
  const bool gpu = comm->backend() == Backend::Gpu;
  // Every rank must choose alike: the communicator's agreed shape, not
  // this rank's host.
  const AgreedShape& shape = comm->agreedShape();
  TuneInput in{a.type,
               tuneBytes(a, comm->nranks()),
               comm->nranks(),
               comm->nnodes(),
               shape.maxLocalRanks,
               gpu ? kMaxChannels : shape.channels,
               gpu ? 0 : shape.minCores};
  in.gpu = gpu;
  const int op = static_cast<int>(a.op);
  in.fewAlgos = gpu && a.type == CollType::AllReduce && op != ncclSum && op != ncclAvg;
  // LL128 kernels: sum (and average) and the data movers (docs/gpu.md, "Building").
  in.ll128 =
      gpu && comm->ll128() &&
      (a.type == CollType::AllGather || a.type == CollType::Broadcast || op == ncclSum || op == ncclAvg);
  in.ringBusGBs = shape.ringBusGBs;
  in.treeBusGBs = shape.treeBusGBs;
  // Where the communicator has windows, first the choice as if the buffers
  // were in them: only when that is zero-copy are the buffers looked up (a
  // lock each), so small collectives skip the lookup. Otherwise the best
  // choice without windows (which may be a Direct/Simple that the
  // zero-copy candidate displaced).
  in.windows = comm->nranks() > 1 && comm->windows().any() && (!gpu || gpuZeroCopyAllowed());
  plan->choice = comm->choices().select(in);
  if (in.windows && (!plan->choice.zeroCopy || !inWindows(comm, a, plan))) {
    in.windows = false;
    plan->choice = comm->choices().select(in);
  }
}

Status runNow(Communicator* comm, const CollArgs& a) {
  // Comparing across ranks blocks on them (see groupMustNotBlock).
  const bool check = paramCheckColl.get() && comm->nranks() > 1;
  if (check && groupMustNotBlock()) return groupWouldBlock();
  HostPlan plan;
  LogRankScope scope(comm->rank());
  const bool gpu = comm->backend() == Backend::Gpu;
  Status s = [&]() -> Status {
    // On GPUs a device-resident PreMulSum scalar is read by the kernel.
    if (a.opTaken) {
      plan.scalar = a.opScalar;
      if (!gpu) loadScalar(&plan.scalar, a.datatype);
    } else {
      BRAID_CHECK(comm->redOps().resolve(a.op, a.datatype, &plan.scalar, /*leavePointer=*/gpu));
    }
    choose(comm, a, &plan);
    const AgreedShape& shape = comm->agreedShape();
    // A channel gets at least a cache line's worth, so tiny counts use one.
    const size_t align = std::max<size_t>(1, kChannelAlignBytes / datatypeSize(a.datatype));
    plan.choice.nChannels = static_cast<int>(std::max<size_t>(
        1, std::min<size_t>(static_cast<size_t>(plan.choice.nChannels), (a.count + align - 1) / align)));
    GpuEngine* engine = nullptr;
    if (gpu) {
      BRAID_CHECK(comm->gpuEngine(&engine));
      plan.choice.chunkBytes = static_cast<size_t>(paramChunkSize.get());
      if (groupMustNotBlock() && !engine->ready(a, plan.choice)) return groupWouldBlock();
    }
    plan.seq = comm->nextCollectiveSeq();
    if (check) BRAID_CHECK(checkAcrossRanks(comm, a, plan.seq));
    BRAID_INFO(
        kLogColl,
        "%s #%llu count %zu datatype %d op %d root %d: %s/%s%s, %d channel%s (estimated %.1f us)%s%.*s",
        a.name, static_cast<unsigned long long>(plan.seq), a.count, static_cast<int>(a.datatype),
        static_cast<int>(a.op), a.root, algoName(plan.choice.algo), protocolName(plan.choice.proto),
        plan.choice.zeroCopy ? " zero-copy" : "", plan.choice.nChannels,
        plan.choice.nChannels == 1 ? "" : "s", plan.choice.estimatedUs, plan.choice.note.empty() ? "" : "; ",
        static_cast<int>(plan.choice.note.size()), plan.choice.note.data());
    if (gpu) return engine->collective(a, plan);
    if (comm->nranks() > 1) {
      // Named only on failure: every collective passes here.
      Status connected = comm->ensureChannels(plan.choice.algo, plan.choice.nChannels);
      const bool peers = plan.choice.algo == Algo::Direct || plan.choice.algo == Algo::TwoShot;
      if (connected.ok() && peers && !plan.choice.zeroCopy) connected = comm->ensureDirect();
      if (!connected.ok()) BRAID_CHECK(connected.withContext(strCat(a.name, " #", plan.seq)));
    }
    plan.ringChunkBytes = paramChunkSize.get() > 0 ? static_cast<size_t>(paramChunkSize.get())
                          : shape.maxLocalRanks > shape.minCores && comm->nnodes() == 1
                              ? kOversubscribedChunkBytes
                              : kDefaultChunkBytes;
    plan.streamBytes = hostStreamBytes();
    // A failed net connector raises plan.cancel, ending the channels' waits at once.
    comm->connectors().watch(&plan.cancel);
    Status run = dispatch(comm, a, plan);
    comm->connectors().unwatch(&plan.cancel);
    return run;
  }();
  if (s.ok() || isGroupWouldBlock(s)) return s;
  s = comm->explainFailure(std::move(s));
  comm->setAsyncError(s);  // the communicator is unusable now: say so to every caller
  return s;
}

}  // namespace

size_t hostStreamBytes() {
  return static_cast<size_t>(paramHostStreamBytes.get());
}

double estimateCollectiveUs(Communicator* comm, const CollArgs& a) {
  HostPlan plan;
  choose(comm, a, &plan);
  return plan.choice.estimatedUs;
}

Status enqueueCollective(Communicator* comm, const CollArgs& args) {
  if ((args.type == CollType::Broadcast || args.type == CollType::Reduce) && args.root >= comm->nranks()) {
    return invalidArgument("argument 'root' is ", args.root, "; the communicator has ", comm->nranks(),
                           " ranks");
  }
  const bool reduces = args.type != CollType::AllGather && args.type != CollType::Broadcast;
  ScalarBits scalar;
  if (reduces) BRAID_CHECK(comm->redOps().resolve(args.op, args.datatype, &scalar, /*leavePointer=*/true));
  // An empty collective moves nothing: it is not run, nor matched across
  // ranks (NCCL discards it too), unless BRAID_CHECK_COLL compares it.
  if (args.count == 0 && !paramCheckColl.get()) return okStatus();
  if (groupDepth() > 0) {
    CollArgs deferred = args;
    // A PreMulSum operator may be destroyed before the group runs.
    deferred.opTaken = reduces && static_cast<int>(args.op) >= ncclNumOps;
    deferred.opScalar = scalar;
    groupDefer(comm, deferred, runNow);
    return okStatus();
  }
  return runNow(comm, args);
}

}  // namespace braid
