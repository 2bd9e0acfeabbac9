// The GPU backend's host side (cuda and hip flavors). See gpu_engine.h.
#include "core/gpu_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "core/comm.h"
#include "core/connectors.h"
#include "core/enqueue.h"
#include "core/group.h"
#include "core/host_coll.h"
#include "core/lsa_space.h"
#include "core/memory.h"
#include "core/p2p.h"
#include "core/redops.h"
#include "exec/device/launch.h"
#include "platform/gpu.h"
#include "platform/gpu_runtime.h"
#include "topology/trees.h"
#include "transports/p2p/p2p_transport.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

using device::DevChannel;
using device::DevCollArgs;
using device::DevP2pArgs;
using device::kDevMaxChannels;

static_assert(device::kDevTreeChildren == kMaxTreeChildren, "device tree tables match the trees");
static_assert(device::kDevMaxSymRanks == kMaxGpuSymRanks, "GPU zero-copy rank limits match");

constexpr int kPeerChannels = kGpuPeerChannels;  // connectors per pair of ranks for point-to-point
constexpr size_t kP2pBytesPerChannel = 512u << 10;  // a send or receive gets a channel per this many bytes
// Sends to oneself are copied by blocks of the point-to-point kernel, one
// per kSelfCopyBytesPerBlock, at most kSelfCopyMaxBlocks: always up to
// kSelfCopyInKernelMax, larger ones where peer blocks run alongside
// (GpuEngineImpl::p2p).
constexpr size_t kSelfCopyInKernelMax = 1u << 20;
constexpr size_t kSelfCopyBytesPerBlock = 128u << 10;
constexpr size_t kSelfCopyMaxBlocks = 16;

// Whether another GPU of this process may write `buf` of this rank's GPU
// directly: memory of ncclMemAlloc (which grants every GPU that can reach
// it access) or of the runtime's allocator (peer access, enabled when the
// connectors were made, covers it). Other stream-ordered pools and virtual
// memory mappings need access granted per allocation, which is theirs to
// give; an IPC handle exists for none of them, nor for host memory, so
// those stay on the FIFO.
bool peerWritable(const void* buf, int device) {
  int owner = -1;
  if (!gpuPointerDevice(buf, &owner).ok() || owner != device) return false;
  void* base = nullptr;
  size_t bytes = 0;
  if (findGpuAllocation(buf, 0, &base, &bytes)) return true;
  hipIpcMemHandle_t h;
  if (hipIpcGetMemHandle(&h, const_cast<void*>(buf)) == hipSuccess) return true;
  (void)hipGetLastError();
  return false;
}

// Raises the kernels' abort flag (keeping its other bits): every wait ends.
void raiseAbort(int32_t* flag) {
  __atomic_fetch_or(flag, device::kDevAbortRaised, __ATOMIC_SEQ_CST);
}

uint32_t ringTag(int c) { return 0x47520000u + 4u * static_cast<uint32_t>(c); }
uint32_t treeTag(int c, bool up) { return 0x47540000u + 8u * static_cast<uint32_t>(c) + (up ? 0u : 4u); }
uint32_t peerTag(int c) { return 0x47500000u + 4u * static_cast<uint32_t>(c); }

// Connecting, growing a buffer and uploading tables happen on the first
// collective that needs them, which may be the first one captured into a
// graph. They are host work the graph must not contain: this thread's
// capture mode is relaxed around them (allocations allowed) and their device
// work goes to the engine's own setup stream, never to the captured one.
class CaptureTolerant {
 public:
  CaptureTolerant() { (void)hipThreadExchangeStreamCaptureMode(&mode_); }
  ~CaptureTolerant() { (void)hipThreadExchangeStreamCaptureMode(&mode_); }
  CaptureTolerant(const CaptureTolerant&) = delete;
  CaptureTolerant& operator=(const CaptureTolerant&) = delete;

 private:
  hipStreamCaptureMode mode_ = hipStreamCaptureModeRelaxed;
};

device::DevOp devOp(ncclRedOp_t op) {
  switch (static_cast<int>(op)) {
    case ncclProd: return device::DevOp::Prod;
    case ncclMin: return device::DevOp::Min;
    case ncclMax: return device::DevOp::Max;
    case ncclSum:
    case ncclAvg: return device::DevOp::Sum;
    default: return device::DevOp::PreMulSum;
  }
}

// One end of a device connector: p2p to a GPU of this host, or a block of
// host memory the GPU maps, served by the net proxy, to another host.
struct DevEnd {
  DevEnd() = default;
  ~DevEnd() {
    net.reset();  // the proxy lets go of the block first
    if (block.base != nullptr) (void)hipHostFree(block.base);
  }
  DevEnd(const DevEnd&) = delete;
  DevEnd& operator=(const DevEnd&) = delete;

  DevConn conn;  // valid once connected
  P2pEnd p2p;
  std::unique_ptr<NetEnd> net;
  DevNetBlock block;  // a net end's host memory the GPU maps (owned)
};

class GpuEngineImpl final : public GpuEngine {
 public:
  explicit GpuEngineImpl(Communicator* comm) : comm_(comm), device_(comm->device()) {}
  ~GpuEngineImpl() override;
  Status init();

  Status collective(const CollArgs& a, const HostPlan& hostPlan) override;
  Status flush() override;
  bool ready(const CollArgs& a, const TuneChoice& choice) const override;
  Status p2p(const std::vector<P2pOp>& ops, void* stream) override;
  Status stage(const void* src, size_t bytes, void* stream, const void** out) override;
  void abort() override {
    if (abortFlag_ != nullptr) raiseAbort(abortFlag_);
  }
  Status deviceStatus() const override;
  int maxChannels() const override { return kDevMaxChannels; }
  Status mapWindow(uint64_t number, void* buff, size_t size, std::vector<char*>* bases,
                   std::string* why) override;
  void unmapWindow(uint64_t number) override;
  void shareBuffer(const void* key, void* buff, size_t size) override;
  Status deviceWindowCreate(void* buff, size_t size, void* host, ncclWindow_t* win) override {
    BRAID_CHECK(useDevice());
    return lsa().windowCreate(buff, size, host, win);
  }
  bool deviceWindowHost(ncclWindow_t win, void** host) const override {
    return lsa_ != nullptr && lsa_->hostOf(win, host);
  }
  void deviceWindowDestroy(ncclWindow_t win) override {
    if (lsa_ == nullptr || !useDevice().ok()) return;
    lsa_->windowDestroy(win);
  }
  Status devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out) override {
    BRAID_CHECK(useDevice());
    return lsa().devCommCreate(reqs, out);
  }
  Status devCommDestroy(const ncclDevComm& devComm) override {
    BRAID_CHECK(useDevice());
    return lsa().devCommDestroy(devComm);
  }

 private:
  // Maps what the ranks of this host's other processes registered since
  // the last call (core/peer_buffers.h); called as work is enqueued.
  void importPeerBuffers();
  struct TreeEnds {
    TreeLinks links;
    DevEnd upSend, downRecv, upRecv[kMaxTreeChildren], downSend[kMaxTreeChildren];
  };
  struct ChannelEnds {
    DevEnd ringSend, ringRecv;
    std::unique_ptr<TreeEnds> tree;
  };
  struct EndRequest {
    int peer;
    bool send;
    uint32_t tag;
    DevEnd* end;
  };

  // A zero-copy collective on the windows holding its buffers.
  Status symmetric(const CollArgs& a, const HostPlan& plan);
  // An allocation of another process mapped here: its rank, its address
  // there and its export (platform/gpu.h). The export tells a new
  // allocation at a freed one's address from the old (whose mapping a peer
  // may not have closed yet), so a mapping is never reused for memory it
  // does not hold.
  using PeerAlloc = std::tuple<int, uint64_t, std::string>;
  static PeerAlloc peerAlloc(int rank, uint64_t base, const GpuExport& e) {
    return PeerAlloc{rank, base, std::string(reinterpret_cast<const char*>(&e), sizeof(e))};
  }
  // Maps rank `key`'s allocation (once per process: later windows and
  // registrations in it share the mapping).
  Status openPeer(const PeerAlloc& key, const GpuExport& e, char** out);
  void closePeer(const PeerAlloc& key);
  // Closes the peers' barrier memory this process opened; forgets every rank's.
  void closeSyncMappings();
  // Makes the communicator's GPU the calling thread's current one.
  Status useDevice() const;
  // The kernel's algorithm and channel count for a collective.
  void plan(const CollArgs& a, const TuneChoice& choice, device::DevAlgo* algo, int* nch) const;
  // Ring direct mode for a ring collective in Simple (dev_work.h,
  // kDevRingDirect bits, and outView) of `bytes` per rank over `nch` channels.
  int32_t ringDirect(const CollArgs& a, uint64_t bytes, int nch, uint64_t seq, int64_t* outView) const;
  // Where rank `peer`'s GPU may write [buf, buf + bytes) of this rank, in
  // the peer's address space; null where it may not. A GPU of this process:
  // buf, if peerWritable; another process's: its mapping of the zero-copy
  // window (core/symmetric.h) or the shared registration
  // (core/peer_buffers.h) holding buf.
  char* writableBy(int peer, void* buf, size_t bytes) const;
  bool peersConnected(int n, const std::vector<int>& sendPeers, const std::vector<int>& recvPeers) const;
  // A group's sends and receives: the peers each way and the peer channels they use.
  struct P2pNeeds {
    std::vector<int> sendPeers, recvPeers;
    int channels = 1;
  };
  P2pNeeds p2pNeeds(const std::vector<P2pOp>& ops) const;
  int p2pChannelsFor(size_t bytes) const;
  Status ensureRing(int n);
  Status ensureTree(int n);
  // Peer connectors of channels 0..n-1 to `sendPeers` / from `recvPeers`.
  Status ensurePeers(int n, const std::vector<int>& sendPeers, const std::vector<int>& recvPeers);
  // Connects `reqs` (every rank of each connector passes its side): p2p
  // for peers on this host, the net for the others. `ll128`: the p2p
  // connectors get LL128 slots (ring connectors of a communicator that may
  // run LL128; never across hosts).
  Status connect(size_t slotBytes, const std::vector<EndRequest>& reqs, bool ll128 = false);
  Status mapNetBlock(size_t slotBytes, DevEnd* end);
  bool onThisHost(int peer) const {
    return nodeOf_[static_cast<size_t>(peer)] == nodeOf_[static_cast<size_t>(comm_->rank())];
  }
  Status uploadChannels();
  // Copies `bytes` from the host to device memory on the setup stream and waits for it.
  Status upload(void* dst, const void* src, size_t bytes, const char* what);
  size_t ringSlotBytes() const { return comm_->p2pSlotBytes(); }
  device::DevCtx ctx() const {
    device::DevCtx c;
    c.abort = abortFlag_;
    c.ended = ended_;
    c.status = status_;
    c.timeoutNs = static_cast<uint64_t>(comm_->stallTimeoutSeconds() * 1e9);
    return c;
  }

  Communicator* comm_;
  int device_;
  std::vector<int> peerDevice_;  // each rank's GPU in this process's numbering (-1: not visible)
  std::vector<int> nodeOf_;      // each rank's host, numbered in order of first appearance
  std::vector<int> others_;      // every rank but this one: a one-shot's peers
  uint64_t netWatch_ = 0;        // the net error sink's call that raises the abort flag
  hipStream_t setup_ = nullptr;           // non-blocking, never captured: setup work only
  int32_t* abortFlag_ = nullptr;          // host-mapped: device::kDevAbortRaised, kDevSomePeerEnded
  uint8_t* ended_ = nullptr;              // host-mapped, per rank: its process ended (DevCtx::ended)
  device::DevStatus* status_ = nullptr;   // host-mapped
  std::vector<std::unique_ptr<ChannelEnds>> channels_;
  int ringConnected_ = 0, treeConnected_ = 0;
  DevChannel* devChannels_ = nullptr;     // device table, kDevMaxChannels entries
  std::vector<DevChannel> hostChannels_;  // its host copy
  // Peer connectors: [channel * nranks + peer].
  std::map<int, std::unique_ptr<DevEnd>> peerSendEnds_, peerRecvEnds_;
  DevConn* devPeerSend_ = nullptr;
  DevConn* devPeerRecv_ = nullptr;
  std::vector<void*> ringTables_;  // device arrays behind DevChannel::ringRankAt / ringPosOf
  void* staging_ = nullptr;  // in-place all-to-all
  size_t stagingBytes_ = 0;
  // Outgrown staging buffers: launches in flight or captured graphs may
  // still read them, so they live as long as the engine.
  std::vector<void*> retiredStaging_;
  // Zero-copy: this rank's barrier memory and every rank's, mapped here.
  device::DevSymSync* sync_ = nullptr;
  std::vector<device::DevSymSync*> syncOf_;
  struct Opened {
    char* ptr;
    int refs;
    GpuExport exp;
  };
  std::map<PeerAlloc, Opened> opened_;  // peers' allocations mapped here
  // Ranks of this host in other processes whose registered buffers this
  // rank maps (peer-to-peer on between them).
  std::vector<int> sharers_;
  std::map<uint64_t, std::vector<PeerAlloc>> windowOpens_;  // by window number
  std::map<uint64_t, GpuExport> windowExports_;             // this rank's, by window number
  std::unique_ptr<LsaSpace> lsa_;  // the device API's windows and communicators, made on first use
  LsaSpace& lsa() {
    if (lsa_ == nullptr) lsa_ = std::make_unique<LsaSpace>(comm_, device_);
    return *lsa_;
  }
  // A group's collectives gathered for one launch (see GpuEngine::collective).
  device::DevCollLaunch gathered_;
  device::KernelKey gatheredKey_{};
  void* gatheredStream_ = nullptr;
};

Status GpuEngineImpl::stage(const void* src, size_t bytes, void* stream, const void** out) {
  BRAID_CHECK(gpuCheck(hipSetDevice(device_), "selecting the communicator's GPU"));
  if (bytes > stagingBytes_) {
    CaptureTolerant tolerant;
    const size_t grown = std::max(bytes, 2 * stagingBytes_);  // retired buffers add up to less than the last
    void* p = nullptr;
    BRAID_CHECK(gpuCheck(hipMalloc(&p, grown), "allocating the all-to-all staging buffer"));
    if (staging_ != nullptr) retiredStaging_.push_back(staging_);
    staging_ = p;
    stagingBytes_ = grown;
  }
  BRAID_CHECK(gpuCheck(hipMemcpyAsync(staging_, src, bytes, hipMemcpyDefault, static_cast<hipStream_t>(stream)),
                       "staging an in-place all-to-all"));
  *out = staging_;
  return okStatus();
}

Status GpuEngineImpl::mapNetBlock(size_t slotBytes, DevEnd* end) {
  const size_t bytes = DevNetLayout::bytes(slotBytes);
  void* p = nullptr;
  BRAID_CHECK(gpuCheck(hipHostMalloc(&p, bytes, hipHostMallocMapped | hipHostMallocPortable),
                       "allocating a net connector in host memory the GPU maps"));
  std::memset(p, 0, bytes);
  end->block.base = static_cast<char*>(p);
  end->block.slotBytes = slotBytes;
  return okStatus();
}

Status GpuEngineImpl::connect(size_t slotBytes, const std::vector<EndRequest>& reqs, bool ll128) {
  // Made on first use, during an operation, whose peers reach it within the stall timeout.
  bootstrap::Bootstrap::StallBound bound(comm_->bootstrap(), comm_->stallTimeoutSeconds());
  std::vector<P2pRequest> local;
  std::vector<const EndRequest*> remoteSend, remoteRecv;
  for (const EndRequest& r : reqs) {
    if (onThisHost(r.peer)) {
      local.push_back(P2pRequest{r.peer, r.send, r.tag, comm_->sameProcess(r.peer),
                                 peerDevice_[static_cast<size_t>(r.peer)], &r.end->p2p, ll128,
                                 comm_->p2pDisabled(r.peer), comm_->p2pRead(r.peer)});
    } else {
      (r.send ? remoteSend : remoteRecv).push_back(&r);
    }
  }
  // The three net steps around the p2p exchange, in the order every
  // transport's setup keeps (core/connectors.h): no step waits for a step
  // a peer takes later.
  ConnectorFactory& f = comm_->connectors();
  for (const EndRequest* r : remoteRecv) {
    BRAID_CHECK(mapNetBlock(slotBytes, r->end));
    BRAID_CHECK(f.postRecvDevice(r->peer, r->tag, r->end->block, &r->end->net));
  }
  if (!local.empty()) BRAID_CHECK(p2pConnect(comm_->bootstrap(), device_, setup_, slotBytes, local));
  for (const EndRequest* r : remoteSend) {
    BRAID_CHECK(mapNetBlock(slotBytes, r->end));
    BRAID_CHECK(f.openSendDevice(r->peer, r->tag, r->end->block, &r->end->net));
  }
  for (const EndRequest* r : remoteRecv) BRAID_CHECK(f.finishRecv(r->peer, r->tag, r->end->net.get()));
  const size_t remote = remoteSend.size() + remoteRecv.size();
  if (remote > 0) {
    BRAID_INFO(kLogNet,
               "GPU %d: %zu connectors to ranks on other hosts through %s (host memory the GPU maps, "
               "served by the proxy), %zu through p2p",
               device_, remote, f.transportName((remoteSend.empty() ? remoteRecv : remoteSend)[0]->peer),
               local.size());
  }
  for (const EndRequest& r : reqs) {
    if (r.end->net == nullptr) {
      r.end->conn = r.end->p2p.conn;
      continue;
    }
    void* device = nullptr;
    BRAID_CHECK(gpuCheck(hipHostGetDevicePointer(&device, r.end->block.base, 0), "mapping a net connector"));
    r.end->conn = r.end->block.conn(static_cast<char*>(device), r.send);
  }
  return okStatus();
}

Status GpuEngineImpl::init() {
  const int n = comm_->nranks();
  BRAID_CHECK(gpuCheck(hipSetDevice(device_), "selecting the communicator's GPU"));
  CaptureTolerant tolerant;
  BRAID_CHECK(gpuCheck(hipStreamCreateWithFlags(&setup_, hipStreamNonBlocking), "creating the setup stream"));
  peerDevice_.assign(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r)
    if (r != comm_->rank()) others_.push_back(r);
  nodeOf_.assign(static_cast<size_t>(n), 0);
  std::vector<uint64_t> hosts;
  for (int r = 0; r < n; ++r) {
    const PeerInfo& p = comm_->peers()[static_cast<size_t>(r)];
    auto it = std::find(hosts.begin(), hosts.end(), p.hostHash);
    nodeOf_[static_cast<size_t>(r)] = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) hosts.push_back(p.hostHash);
  }
  for (int r = 0; r < n; ++r) {
    if (!onThisHost(r)) continue;  // its bus id names a GPU of its own host
    int dev = -1;
    if (hipDeviceGetByPCIBusId(&dev, comm_->peers()[static_cast<size_t>(r)].busId) == hipSuccess) {
      peerDevice_[static_cast<size_t>(r)] = dev;
    } else {
      (void)hipGetLastError();
    }
  }
  for (int r : others_) {
    if (onThisHost(r) && !comm_->sameProcess(r) && !comm_->p2pDisabled(r) &&
        comm_->peers()[static_cast<size_t>(r)].sharedFd >= 0 && comm_->peerBuffers() != nullptr)
      sharers_.push_back(r);
  }
  void* mapped = nullptr;
  BRAID_CHECK(gpuCheck(hipHostMalloc(&mapped, 256, hipHostMallocMapped | hipHostMallocPortable),
                       "allocating the kernels' abort flag and status"));
  std::memset(mapped, 0, 256);
  abortFlag_ = static_cast<int32_t*>(mapped);
  status_ = reinterpret_cast<device::DevStatus*>(static_cast<char*>(mapped) + 64);
  // A failed net connector ends the kernels at once (they would otherwise
  // wait for the stall timeout); deviceStatus() then reports its cause.
  if (hosts.size() > 1) {
    int32_t* flag = abortFlag_;
    netWatch_ = comm_->connectors().errorSink().callOnFailure([flag] { raiseAbort(flag); });
  }
  // So does the end of a peer process of this host (the communicator
  // watches them): the waits on that rank fail, after one more look for
  // what it wrote before it ended; deviceStatus() names it.
  if (comm_->connectors().peerEnded() != nullptr) {
    BRAID_CHECK(
        gpuCheck(hipHostMalloc(&mapped, static_cast<size_t>(n), hipHostMallocMapped | hipHostMallocPortable),
                 "allocating the kernels' table of ended peers"));
    std::memset(mapped, 0, static_cast<size_t>(n));
    ended_ = static_cast<uint8_t*>(mapped);
    int32_t* flag = abortFlag_;
    uint8_t* ended = ended_;
    comm_->connectors().callOnPeerEnd([flag, ended](int rank) {
      __atomic_store_n(&ended[rank], uint8_t{1}, __ATOMIC_RELEASE);
      __atomic_fetch_or(flag, device::kDevSomePeerEnded, __ATOMIC_SEQ_CST);
    });
  }
  void* table = nullptr;
  BRAID_CHECK(gpuCheck(hipMalloc(&table, sizeof(DevChannel) * kDevMaxChannels), "allocating channel tables"));
  devChannels_ = static_cast<DevChannel*>(table);
  hostChannels_.assign(kDevMaxChannels, DevChannel());
  const size_t peerTable = sizeof(DevConn) * kPeerChannels * static_cast<size_t>(n);
  BRAID_CHECK(gpuCheck(hipMalloc(&table, peerTable), "allocating peer tables"));
  devPeerSend_ = static_cast<DevConn*>(table);
  BRAID_CHECK(gpuCheck(hipMalloc(&table, peerTable), "allocating peer tables"));
  devPeerRecv_ = static_cast<DevConn*>(table);
  BRAID_CHECK(gpuCheck(hipMemsetAsync(devPeerSend_, 0, peerTable, setup_), "zeroing peer tables"));
  BRAID_CHECK(gpuCheck(hipMemsetAsync(devPeerRecv_, 0, peerTable, setup_), "zeroing peer tables"));
  return uploadChannels();
}

GpuEngineImpl::~GpuEngineImpl() {
  // Kernels may still run (destroy without a synchronize, or an abort):
  // every wait ends at the abort flag or the timeout, so this returns.
  (void)hipSetDevice(device_);
  if (netWatch_ != 0) comm_->connectors().errorSink().stopCalling(netWatch_);
  if (ended_ != nullptr) comm_->connectors().stopCallingOnPeerEnd();
  if (comm_->abortFlag().load()) abort();
  (void)hipDeviceSynchronize();
  lsa_.reset();
  channels_.clear();
  peerSendEnds_.clear();
  peerRecvEnds_.clear();
  if (devChannels_ != nullptr) (void)hipFree(devChannels_);
  if (devPeerSend_ != nullptr) (void)hipFree(devPeerSend_);
  if (devPeerRecv_ != nullptr) (void)hipFree(devPeerRecv_);
  if (staging_ != nullptr) (void)hipFree(staging_);
  for (void* p : retiredStaging_) (void)hipFree(p);
  for (void* p : ringTables_) (void)hipFree(p);
  if (comm_->peerBuffers() != nullptr) comm_->peerBuffers()->forgetImports();  // closed below
  for (auto& o : opened_) gpuUnimport(o.second.exp, o.second.ptr);
  for (auto& [number, e] : windowExports_) gpuUnexport(e);
  closeSyncMappings();
  if (sync_ != nullptr) (void)hipFree(sync_);
  if (setup_ != nullptr) (void)hipStreamDestroy(setup_);
  if (abortFlag_ != nullptr) (void)hipHostFree(abortFlag_);
  if (ended_ != nullptr) (void)hipHostFree(ended_);
}

Status GpuEngineImpl::upload(void* dst, const void* src, size_t bytes, const char* what) {
  BRAID_CHECK(gpuCheck(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, setup_), what));
  return gpuCheck(hipStreamSynchronize(setup_), what);
}

Status GpuEngineImpl::uploadChannels() {
  return upload(devChannels_, hostChannels_.data(), sizeof(DevChannel) * kDevMaxChannels,
                "uploading channel tables");
}

Status GpuEngineImpl::ensureRing(int n) {
  if (n <= ringConnected_) return okStatus();
  const int rank = comm_->rank(), nr = comm_->nranks();
  // Channel c follows ring c of the communicator's schedule (cycling when
  // there are more channels than rings): each node's ranks in the order of
  // the topology's rings, the nodes in turn.
  const Schedule& sched = comm_->schedule();
  auto ringOf = [&](int c) -> const std::vector<int>& {
    return sched.rings[static_cast<size_t>(c % sched.nChannels())];
  };
  while (static_cast<int>(channels_.size()) < n) channels_.push_back(std::make_unique<ChannelEnds>());
  std::vector<EndRequest> reqs;
  for (int c = ringConnected_; c < n; ++c) {
    const std::vector<int>& ring = ringOf(c);
    const int p = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
    if (p == nr) return internalError("rank ", rank, " is missing from ring ", c % sched.nChannels());
    DevChannel& d = hostChannels_[static_cast<size_t>(c)];
    d.ringNext = ring[static_cast<size_t>((p + 1) % nr)];
    d.ringPrev = ring[static_cast<size_t>((p - 1 + nr) % nr)];
    d.ringPos = p;
    reqs.push_back({d.ringPrev, false, ringTag(c), &channels_[static_cast<size_t>(c)]->ringRecv});
    reqs.push_back({d.ringNext, true, ringTag(c), &channels_[static_cast<size_t>(c)]->ringSend});
  }
  BRAID_CHECK(connect(ringSlotBytes(), reqs, comm_->ll128()));
  for (int c = ringConnected_; c < n; ++c) {
    DevChannel& d = hostChannels_[static_cast<size_t>(c)];
    d.ringSend = channels_[static_cast<size_t>(c)]->ringSend.conn;
    d.ringRecv = channels_[static_cast<size_t>(c)]->ringRecv.conn;
    // The ring's rank at each position and position of each rank, for the kernel.
    const std::vector<int>& ring = ringOf(c);
    std::vector<int32_t> table(2 * static_cast<size_t>(nr));
    for (int q = 0; q < nr; ++q) {
      table[static_cast<size_t>(q)] = ring[static_cast<size_t>(q)];
      table[static_cast<size_t>(nr + ring[static_cast<size_t>(q)])] = q;
    }
    void* t = nullptr;
    BRAID_CHECK(gpuCheck(hipMalloc(&t, table.size() * sizeof(int32_t)), "allocating a ring table"));
    ringTables_.push_back(t);
    BRAID_CHECK(upload(t, table.data(), table.size() * sizeof(int32_t), "uploading a ring table"));
    d.ringRankAt = static_cast<const int32_t*>(t);
    d.ringPosOf = static_cast<const int32_t*>(t) + nr;
    BRAID_INFO(kLogP2p, "GPU %d: ring channel %d connected, %d -> %d -> %d (position %d), %zu-byte steps",
               device_, c, d.ringPrev, rank, d.ringNext, d.ringPos, ringSlotBytes());
  }
  ringConnected_ = n;
  return uploadChannels();
}

Status GpuEngineImpl::ensureTree(int n) {
  if (n <= treeConnected_) return okStatus();
  while (static_cast<int>(channels_.size()) < n) channels_.push_back(std::make_unique<ChannelEnds>());
  const auto trees = buildDoubleTree(nodeOf_, comm_->rank());
  std::vector<EndRequest> reqs;
  for (int c = treeConnected_; c < n; ++c) {
    auto t = std::make_unique<TreeEnds>();
    t->links = trees[static_cast<size_t>(c % 2)];
    const TreeLinks& l = t->links;
    if (l.up >= 0) {
      reqs.push_back({l.up, true, treeTag(c, true), &t->upSend});
      reqs.push_back({l.up, false, treeTag(c, false), &t->downRecv});
    }
    for (int i = 0; i < l.ndown; ++i) {
      reqs.push_back({l.down[i], false, treeTag(c, true), &t->upRecv[i]});
      reqs.push_back({l.down[i], true, treeTag(c, false), &t->downSend[i]});
    }
    channels_[static_cast<size_t>(c)]->tree = std::move(t);
  }
  BRAID_CHECK(connect(ringSlotBytes(), reqs));
  for (int c = treeConnected_; c < n; ++c) {
    TreeEnds& t = *channels_[static_cast<size_t>(c)]->tree;
    DevChannel& d = hostChannels_[static_cast<size_t>(c)];
    d.treeParent = t.links.up;
    d.nTreeChildren = t.links.ndown;
    if (t.links.up >= 0) d.treeUpSend = t.upSend.conn, d.treeDownRecv = t.downRecv.conn;
    for (int i = 0; i < t.links.ndown; ++i) {
      d.treeChild[i] = t.links.down[i];
      d.treeUpRecv[i] = t.upRecv[i].conn;
      d.treeDownSend[i] = t.downSend[i].conn;
    }
  }
  treeConnected_ = n;
  return uploadChannels();
}

Status GpuEngineImpl::ensurePeers(int n, const std::vector<int>& sendPeers, const std::vector<int>& recvPeers) {
  const int nr = comm_->nranks();
  std::vector<EndRequest> reqs;
  std::vector<std::pair<int, bool>> added;  // (table index, send)
  for (int c = 0; c < n; ++c) {
    for (int p : recvPeers) {
      const int key = c * nr + p;
      if (peerRecvEnds_.count(key) != 0) continue;
      auto& end = peerRecvEnds_[key] = std::make_unique<DevEnd>();
      reqs.push_back({p, false, peerTag(c), end.get()});
      added.push_back({key, false});
    }
    for (int p : sendPeers) {
      const int key = c * nr + p;
      if (peerSendEnds_.count(key) != 0) continue;
      auto& end = peerSendEnds_[key] = std::make_unique<DevEnd>();
      reqs.push_back({p, true, peerTag(c), end.get()});
      added.push_back({key, true});
    }
  }
  if (reqs.empty()) return okStatus();
  Status s = connect(comm_->gpuP2pStepBytes(), reqs);
  if (!s.ok()) {
    for (auto [key, send] : added) (send ? peerSendEnds_ : peerRecvEnds_).erase(key);
    return s;
  }
  for (auto [key, send] : added) {
    const DevConn& conn = (send ? peerSendEnds_ : peerRecvEnds_)[key]->conn;
    DevConn* table = send ? devPeerSend_ : devPeerRecv_;
    BRAID_CHECK(upload(table + key, &conn, sizeof(DevConn), "uploading a peer connector"));
  }
  return okStatus();
}

Status GpuEngineImpl::deviceStatus() const {
  if (status_ == nullptr) return okStatus();
  const volatile device::DevStatus* v = status_;
  device::DevStatus s;
  s.code = v->code;
  // Claimed: a block is still writing why; it fails on a later poll.
  if (s.code == device::kDevOk || s.code == device::kDevClaimed) return okStatus();
  std::atomic_thread_fence(std::memory_order_acquire);  // the fields after the code
  Status net = comm_->connectors().netError();
  if (!net.ok()) return net;  // a net connector failed: the kernels were stopped for it
  s.channel = v->channel;
  s.peer = v->peer;
  s.waitingFor = v->waitingFor;
  s.step = v->step;
  if (s.code == device::kDevAborted) return invalidUsage("a GPU kernel was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)");
  if (s.code == device::kDevMismatch && s.waitingFor == 4) {
    return invalidUsage("a send to rank ", s.peer, " on channel ", s.channel,
                        " differs in size from the receive that rank posted for it: a send and its receive "
                        "must have the same count and datatype");
  }
  if (s.code == device::kDevMismatch && s.waitingFor == 5) {
    return invalidUsage("a ring collective's part on channel ", s.channel, " differs in size from rank ",
                        s.peer, "'s: every rank must pass the same count and datatype");
  }
  if (s.code == device::kDevMismatch && s.waitingFor == 0) {
    return invalidUsage("step ", s.step, " from rank ", s.peer, " on channel ", s.channel,
                        " differs in size from what this rank's receive expects: rank ", s.peer,
                        " sent another count or datatype, or ran another operation (a send and its "
                        "receive must have the same count and datatype)");
  }
  if (s.code == device::kDevMismatch) {
    return invalidUsage("zero-copy collective #", s.step, " on channel ", s.channel, ": rank ", s.peer,
                        " runs another collective or passed other windows or offsets "
                        "(ncclCommWindowRegister): every rank must pass its buffers at the same offsets "
                        "of the same windows");
  }
  std::string what;  // what the failed wait waited for from rank s.peer
  switch (s.waitingFor) {
    case 1: what = strCat("to free a slot (step ", s.step, ")"); break;
    case 2: what = strCat("to enter zero-copy collective #", s.step); break;
    case 3: what = strCat("to finish zero-copy collective #", s.step); break;
    case 4: what = strCat("to post the receive of a large send (step ", s.step, ")"); break;
    case 5: what = strCat("to start its part of a ring collective (step ", s.step, ")"); break;
    default: what = strCat("to send data (step ", s.step, ")"); break;
  }
  if (s.code == device::kDevPeerEnded) {
    return remoteError("the process of rank ", s.peer, " ended while a GPU kernel waited on channel ",
                       s.channel, " for it ", what);
  }
  const char* why = s.waitingFor == 4   ? "that rank may be stuck or may not receive it"
                    : s.waitingFor == 5 ? "that rank may be stuck or may not have called it"
                    : s.waitingFor >= 2
                        ? "that rank may have died, be stuck, or have passed buffers outside its "
                          "windows (and run another algorithm)"
                        : "that rank may have died or be stuck";
  return remoteError("a GPU kernel made no progress for ", comm_->stallTimeoutSeconds(), " s on channel ",
                     s.channel, " waiting for rank ", s.peer, " ", what, "; ", why);
}

void GpuEngineImpl::plan(const CollArgs& a, const TuneChoice& choice, device::DevAlgo* algo, int* nch) const {
  *nch = std::max(1, std::min(choice.nChannels, kDevMaxChannels));
  if (comm_->nranks() == 1 || choice.algo == Algo::Direct) {
    *algo = device::DevAlgo::Direct;  // alone: a copy (through PreMulSum's scaling)
    *nch = std::min(*nch, kPeerChannels);
  } else if (choice.algo == Algo::TwoShot) {
    *algo = device::DevAlgo::TwoShot;
    *nch = std::min(*nch, kPeerChannels);
  } else {
    *algo = choice.algo == Algo::Tree ? device::DevAlgo::Tree : device::DevAlgo::Ring;
  }
  (void)a;
}

bool GpuEngineImpl::peersConnected(int n, const std::vector<int>& sendPeers, const std::vector<int>& recvPeers) const {
  const int nr = comm_->nranks();
  for (int c = 0; c < n; ++c) {
    for (int p : sendPeers)
      if (peerSendEnds_.count(c * nr + p) == 0) return false;
    for (int p : recvPeers)
      if (peerRecvEnds_.count(c * nr + p) == 0) return false;
  }
  return true;
}

bool GpuEngineImpl::ready(const CollArgs& a, const TuneChoice& choice) const {
  device::DevAlgo algo;
  int nch = 1;
  plan(a, choice, &algo, &nch);
  // Zero-copy needs no connectors: the windows were mapped at registration.
  if (comm_->nranks() == 1 || choice.zeroCopy) return true;
  switch (algo) {
    case device::DevAlgo::Ring: return nch <= ringConnected_;
    case device::DevAlgo::Tree: return nch <= treeConnected_;
    default: return peersConnected(nch, others_, others_);
  }
}

int GpuEngineImpl::p2pChannelsFor(size_t bytes) const {
  // As many as the bytes want, bounded so that a rank's links to every peer
  // both ways fit in one launch. A function of the size and the rank count
  // only, so both ends cut a message alike.
  const int perLink =
      std::clamp(device::kDevMaxP2pBlocks / (2 * std::max(1, comm_->nranks() - 1)), 1, kPeerChannels);
  return static_cast<int>(
      std::clamp<size_t>((bytes + kP2pBytesPerChannel - 1) / kP2pBytesPerChannel, 1, static_cast<size_t>(perLink)));
}

GpuEngineImpl::P2pNeeds GpuEngineImpl::p2pNeeds(const std::vector<P2pOp>& ops) const {
  P2pNeeds n;
  for (const P2pOp& op : ops) {
    if (op.peer == comm_->rank()) continue;
    (op.isSend ? n.sendPeers : n.recvPeers).push_back(op.peer);
    n.channels = std::max(n.channels, p2pChannelsFor(op.bytes));
  }
  for (auto* v : {&n.sendPeers, &n.recvPeers}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  return n;
}

Status GpuEngineImpl::useDevice() const {
  int current = -1;
  if (hipGetDevice(&current) == hipSuccess && current == device_) return okStatus();
  return gpuCheck(hipSetDevice(device_), "selecting the communicator's GPU");
}

Status GpuEngineImpl::collective(const CollArgs& a, const HostPlan& hostPlan) {
  BRAID_CHECK(useDevice());
  BRAID_CHECK(deviceStatus());
  if (hostPlan.choice.zeroCopy) return symmetric(a, hostPlan);
  importPeerBuffers();
  const TuneChoice& choice = hostPlan.choice;
  const ScalarBits& scalar = hostPlan.scalar;
  const int n = comm_->nranks();
  DevCollArgs d;
  d.send = a.send;
  d.recv = a.recv;
  d.count = a.count;
  d.coll = static_cast<device::DevColl>(static_cast<int>(a.type));
  d.rank = comm_->rank();
  d.nranks = n;
  d.root = a.root;
  std::memcpy(&d.scalar, scalar.bytes, sizeof(d.scalar));
  d.scalarPtr = scalar.pointer;
  const bool reduces = a.type == CollType::AllReduce || a.type == CollType::ReduceScatter ||
                       (a.type == CollType::Reduce && comm_->rank() == a.root);
  if (a.op == ncclAvg && reduces && n > 1) d.avgDivisor = n;
  d.channels = devChannels_;
  d.peerSend = devPeerSend_;
  d.peerRecv = devPeerRecv_;
  d.ctx = ctx();
  // All-gather and broadcast run on bytes, whatever the datatype.
  const device::KernelKey key{a.datatype, devOp(a.op), choice.proto, device::moveOnly(d.coll)};
  const uint64_t elemSize = key.move ? 1 : datatypeSize(a.datatype);
  if (key.move) d.count *= datatypeSize(a.datatype);
  d.chunkElems = choice.chunkBytes / elemSize;
  int nch = 1;
  plan(a, choice, &d.algo, &nch);
  d.nChannels = nch;
  if (!device::kernelsRun(key.move ? device::DevOp::Sum : key.op, d.algo, n, choice.proto)) {
    return internalError(a.name, ": the GPU kernels of operator ", static_cast<int>(a.op), " do not run ",
                         algoName(choice.algo), "/", protocolName(choice.proto), " with ", n,
                         " ranks, yet the selector chose it");
  }
  if (!ready(a, choice)) {
    if (groupMustNotBlock()) return groupWouldBlock();
    CaptureTolerant tolerant;
    if (n > 1 && (d.algo == device::DevAlgo::Direct || d.algo == device::DevAlgo::TwoShot)) {
      BRAID_CHECK(ensurePeers(nch, others_, others_));
    } else if (d.algo == device::DevAlgo::Tree) {
      BRAID_CHECK(ensureTree(nch));
    } else if (n > 1) {
      BRAID_CHECK(ensureRing(nch));
    }
  }
  if (d.algo == device::DevAlgo::Ring && choice.proto == Protocol::Simple && n > 1) {
    d.ringDirect = ringDirect(a, d.count * elemSize, nch, hostPlan.seq, &d.outView);
  }
  const bool fusable =
      groupFuses() && device::fusable(key.move ? device::DevOp::Sum : key.op, d.algo, n, choice.proto);
  if (fusable && gathered_.n > 0 && gathered_.n < device::kDevMaxFused && gatheredKey_ == key &&
      gatheredStream_ == a.stream) {
    gathered_.items[gathered_.n++] = d;
    return okStatus();
  }
  BRAID_CHECK(flush());
  gathered_.items[0] = d;
  gathered_.n = 1;
  gatheredKey_ = key, gatheredStream_ = a.stream;
  return fusable ? okStatus() : flush();
}

int32_t GpuEngineImpl::ringDirect(const CollArgs& a, uint64_t bytes, int nch, uint64_t seq,
                                  int64_t* outView) const {
  // The same on every rank: the collective, its size, the agreed threshold.
  const size_t min = comm_->gpuRingDirectMinBytes();
  const bool carries =
      a.type == CollType::AllReduce || a.type == CollType::AllGather || a.type == CollType::Broadcast;
  uint64_t lo = 0, len = 0;
  device::channelPart(bytes, 1, nch, 0, &lo, &len);  // channel 0's part (the largest)
  if (min == 0 || !carries || len < min) return 0;
  // This rank's own: where may the previous rank's GPU write its output?
  // (Asked only where some channel's previous rank is a GPU of this host
  // whose connector carries a mailbox.) One answer serves every channel.
  const size_t outBytes =
      a.type == CollType::AllGather ? bytes * static_cast<size_t>(comm_->nranks()) : bytes;
  bool box = false;
  char* at = nullptr;
  for (int c = 0; c < nch; ++c) {
    const DevChannel& d = hostChannels_[static_cast<size_t>(c)];
    if (d.ringRecv.box == nullptr) continue;
    char* v = writableBy(d.ringPrev, a.recv, outBytes);
    at = box && v != at ? nullptr : v;
    box = true;
  }
  if (!box) return device::kDevRingDirect;
  *outView = at == nullptr ? 0 : at - static_cast<char*>(a.recv);
  BRAID_TRACE(kLogColl | kLogP2p, "%s #%llu: the ring %s", a.name, static_cast<unsigned long long>(seq),
              at != nullptr
                  ? "writes results straight into this rank's output"
                  : "brings results through the FIFO (not memory the previous rank's GPU may write)");
  return device::kDevRingDirect | (at != nullptr ? device::kDevRingWritable : 0);
}

char* GpuEngineImpl::writableBy(int peer, void* buf, size_t bytes) const {
  if (comm_->sameProcess(peer)) return peerWritable(buf, device_) ? static_cast<char*>(buf) : nullptr;
  if (char* v = comm_->windows().peerView(peer, buf, bytes)) return v;
  PeerBuffers* shared = comm_->peerBuffers();
  return shared != nullptr ? shared->viewOf(comm_->localIndex(peer), buf, bytes) : nullptr;
}

void GpuEngineImpl::shareBuffer(const void* key, void* buff, size_t size) {
  if (sharers_.empty()) return;
  void* base = nullptr;
  size_t bytes = 0;
  SharedRegistration reg;
  std::string why;
  Status found = useDevice();
  if (found.ok() && !findGpuAllocation(buff, size, &base, &bytes))
    found = gpuAllocationRange(buff, &base, &bytes);
  if (found.ok()) found = gpuExport(base, bytes, &reg.exp);
  if (!found.ok()) {
    why = found.message();
  } else {
    reg.allocBase = reinterpret_cast<uint64_t>(base);
    reg.allocBytes = bytes;
    if (!comm_->peerBuffers()->publish(key, buff, size, reg)) {
      gpuUnexport(reg.exp);
      why = strCat(kSharedSlots, " registrations are shared already");
    }
  }
  BRAID_INFO(
      kLogAlloc, "registered buffer %p (%zu bytes): %s%s", buff, size,
      why.empty() ? "shared with this host's other processes (direct writes)" : "not shared: ", why.c_str());
}

void GpuEngineImpl::importPeerBuffers() {
  PeerBuffers* shared = comm_->peerBuffers();
  for (size_t i = 0; i < sharers_.size(); ++i) {
    const int r = sharers_[i];
    auto open = [this, r](const SharedRegistration& reg, char** mapped) {
      CaptureTolerant tolerant;  // may run while a graph is captured
      return openPeer(peerAlloc(r, reg.allocBase, reg.exp), reg.exp, mapped);
    };
    auto close = [this, r](const SharedRegistration& reg) {
      closePeer(peerAlloc(r, reg.allocBase, reg.exp));
    };
    const PeerInfo& p = comm_->peers()[static_cast<size_t>(r)];
    Status s = shared->refresh(r, p.pid, p.sharedFd, comm_->localIndex(comm_->rank()), open, close);
    if (!s.ok()) {  // its table cannot be mapped: its buffers stay on the FIFO
      BRAID_INFO(kLogAlloc, "rank %d's registered buffers stay on the FIFO: %s", r, s.message().c_str());
      sharers_.erase(sharers_.begin() + static_cast<std::ptrdiff_t>(i--));
    }
  }
}

namespace {
// What a rank tells the others about one window (all-gathered).
struct GpuWindowRecord {
  GpuExport buff;          // the allocation holding the window
  hipIpcMemHandle_t sync;  // the rank's barrier memory
  uint64_t allocBase = 0;  // the allocation's address in its process (0: not ncclMemAlloc memory)
  uint64_t offset = 0;     // the window's offset in it
  uint64_t window = 0;     // the window's and the barrier memory's addresses in its process
  uint64_t syncPtr = 0;
  int32_t device = -1;
};
}  // namespace

Status GpuEngineImpl::openPeer(const PeerAlloc& key, const GpuExport& e, char** out) {
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    char* p = nullptr;
    BRAID_CHECK(gpuImport(e, kGpuImportTimeoutMs, &p)
                    .withContext(strCat("mapping rank ", std::get<0>(key), "'s buffer")));
    it = opened_.emplace(key, Opened{p, 0, e}).first;
  }
  ++it->second.refs;
  *out = it->second.ptr;
  return okStatus();
}

void GpuEngineImpl::closePeer(const PeerAlloc& key) {
  auto it = opened_.find(key);
  if (it == opened_.end() || --it->second.refs > 0) return;
  gpuUnimport(it->second.exp, it->second.ptr);
  opened_.erase(it);
}

Status GpuEngineImpl::mapWindow(uint64_t number, void* buff, size_t size, std::vector<char*>* bases,
                                std::string* why) {
  BRAID_CHECK(useDevice());
  const int n = comm_->nranks(), me = comm_->rank();
  if (sync_ == nullptr) {
    CaptureTolerant tolerant;
    void* p = nullptr;
    BRAID_CHECK(gpuCheck(hipMalloc(&p, sizeof(device::DevSymSync)), "allocating zero-copy barrier memory"));
    sync_ = static_cast<device::DevSymSync*>(p);
    BRAID_CHECK(
        gpuCheck(hipMemsetAsync(p, 0, sizeof(device::DevSymSync), setup_), "clearing barrier memory"));
    BRAID_CHECK(gpuCheck(hipStreamSynchronize(setup_), "clearing barrier memory"));
  }
  std::vector<GpuWindowRecord> records(static_cast<size_t>(n), GpuWindowRecord{});
  GpuWindowRecord& mine = records[static_cast<size_t>(me)];
  mine.window = reinterpret_cast<uint64_t>(buff);
  mine.syncPtr = reinterpret_cast<uint64_t>(sync_);
  mine.device = device_;
  BRAID_CHECK(gpuCheck(hipIpcGetMemHandle(&mine.sync, sync_), "making an IPC handle of barrier memory"));
  void* base = nullptr;
  size_t allocBytes = 0;
  if (findGpuAllocation(buff, size, &base, &allocBytes)) {
    Status s = gpuExport(base, allocBytes, &mine.buff);
    if (s.ok()) {
      windowExports_.emplace(number, mine.buff);  // until the window goes: peers map it during this call
      mine.allocBase = reinterpret_cast<uint64_t>(base);
      mine.offset = static_cast<uint64_t>(static_cast<char*>(buff) - static_cast<char*>(base));
    } else {
      BRAID_INFO(kLogAlloc, "window %p: its allocation cannot be shared: %s", buff, s.message().c_str());
    }
  }
  BRAID_CHECK(comm_->bootstrap()
                  ->allGather(records.data(), sizeof(GpuWindowRecord))
                  .withContext("ncclCommWindowRegister"));
  bases->assign(static_cast<size_t>(n), nullptr);
  const bool firstWindow = syncOf_.empty();
  if (firstWindow) syncOf_.assign(static_cast<size_t>(n), nullptr);
  std::vector<PeerAlloc>& opens = windowOpens_[number];
  for (int r = 0; r < n && why->empty(); ++r) {
    const GpuWindowRecord& rec = records[static_cast<size_t>(r)];
    char* sync = reinterpret_cast<char*>(rec.syncPtr);
    if (r != me && comm_->p2pDisabled(r)) {
      *why = strCat("peer-to-peer is off between ranks ", me, " and ", r,
                    " (NCCL_P2P_DISABLE or NCCL_P2P_LEVEL)");
    } else if (r == me || comm_->sameProcess(r)) {
      (*bases)[static_cast<size_t>(r)] = reinterpret_cast<char*>(rec.window);
      if (rec.device != device_) {  // another GPU of this process: its memory must be mapped here
        hipError_t e = hipDeviceEnablePeerAccess(rec.device, 0);
        if (e != hipSuccess && e != hipErrorPeerAccessAlreadyEnabled) {
          *why = strCat("GPU ", device_, " cannot map GPU ", rec.device, "'s memory: ", hipGetErrorString(e));
        }
        (void)hipGetLastError();
      }
    } else if (rec.allocBase == 0) {
      *why = strCat("rank ", r, "'s buffer is not memory from ncclMemAlloc");
    } else {
      char* p = nullptr;
      const PeerAlloc key = peerAlloc(r, rec.allocBase, rec.buff);
      Status s = openPeer(key, rec.buff, &p);
      if (!s.ok()) {
        *why = s.message();
        break;
      }
      opens.push_back(key);
      (*bases)[static_cast<size_t>(r)] = p + rec.offset;
      if (firstWindow) {
        void* q = nullptr;
        Status t = gpuCheck(hipIpcOpenMemHandle(&q, rec.sync, hipIpcMemLazyEnablePeerAccess),
                            "opening a peer's barrier memory (IPC handle)");
        if (!t.ok()) {
          *why = t.message();
          break;
        }
        sync = static_cast<char*>(q);
      }
    }
    // A rank whose window failed keeps no pointer of its process (only
    // ranks mapped here are closed or reused by later windows).
    if (firstWindow && why->empty()) {
      syncOf_[static_cast<size_t>(r)] = reinterpret_cast<device::DevSymSync*>(sync);
    }
  }
  if (!why->empty()) {
    (void)hipGetLastError();  // a failed open must not fail the next launch
    unmapWindow(number);
  }
  if (firstWindow && std::find(syncOf_.begin(), syncOf_.end(), nullptr) != syncOf_.end()) {
    closeSyncMappings();  // a later window maps them again
  }
  return okStatus();
}

void GpuEngineImpl::closeSyncMappings() {
  for (size_t r = 0; r < syncOf_.size(); ++r) {
    const int rank = static_cast<int>(r);
    if (syncOf_[r] != nullptr && rank != comm_->rank() && !comm_->sameProcess(rank))
      (void)hipIpcCloseMemHandle(syncOf_[r]);
  }
  syncOf_.clear();
}

void GpuEngineImpl::unmapWindow(uint64_t number) {
  auto e = windowExports_.find(number);
  if (e != windowExports_.end()) {
    gpuUnexport(e->second);
    windowExports_.erase(e);
  }
  auto it = windowOpens_.find(number);
  if (it == windowOpens_.end()) return;
  (void)useDevice();
  for (const PeerAlloc& o : it->second) closePeer(o);
  windowOpens_.erase(it);
}

Status GpuEngineImpl::symmetric(const CollArgs& a, const HostPlan& plan) {
  const int n = comm_->nranks();
  if (n > device::kDevMaxSymRanks || static_cast<int>(syncOf_.size()) != n) {
    return internalError(a.name, ": zero-copy chosen without every rank's barrier memory mapped");
  }
  device::DevSymArgs d;
  d.coll = static_cast<device::DevColl>(static_cast<int>(a.type));
  d.rank = comm_->rank();
  d.nranks = n;
  d.nChannels = std::max(1, std::min(plan.choice.nChannels, kDevMaxChannels));
  const bool move = a.type == CollType::AllGather;
  d.count = a.count * (move ? datatypeSize(a.datatype) : 1);
  if (a.op == ncclAvg && !move) d.avgDivisor = n;
  std::memcpy(&d.scalar, plan.scalar.bytes, sizeof(d.scalar));
  d.scalarPtr = plan.scalar.pointer;
  // A peer's buffer is found at this rank's offset in the peer's window, so
  // every rank must pass the same windows at the same offsets where peers
  // use them: the kernel compares keys. Peers read the inputs of all-reduce
  // and reduce-scatter and write the outputs of all-reduce and all-gather
  // (in-place all-gather and reduce-scatter put a rank's own buffer at its
  // own offset).
  const bool peersRead = a.type != CollType::AllGather, peersWrite = a.type != CollType::ReduceScatter;
  d.key = (peersRead ? (plan.sendWindow * 0x9E3779B97F4A7C15ull) ^ (plan.sendOffset << 1) : 0) ^
          (peersWrite ? (plan.recvWindow * 0xC2B2AE3D27D4EB4Full) ^ (plan.recvOffset << 17) : 0);
  char* ins[device::kDevMaxSymRanks];
  char* outs[device::kDevMaxSymRanks];
  const SymmetricWindows& w = comm_->windows();
  if (!w.bases(plan.sendWindow, ins) || !w.bases(plan.recvWindow, outs))
    return internalError(a.name, ": a zero-copy window is not mapped");
  for (int q = 0; q < n; ++q) {
    if (ins[q] == nullptr || outs[q] == nullptr)
      return internalError(a.name, ": a zero-copy window is not mapped");
    d.inputs[q] = ins[q] + plan.sendOffset;
    d.outputs[q] = outs[q] + plan.recvOffset;
    d.sync[q] = syncOf_[static_cast<size_t>(q)];
  }
  d.inputs[d.rank] = a.send;
  d.outputs[d.rank] = a.recv;
  d.ctx = ctx();
  BRAID_CHECK(flush());  // the group's gathered collectives come first on the stream
  return device::launchSymmetric(a.datatype, devOp(a.op), move, d, a.stream);
}

Status GpuEngineImpl::flush() {
  if (gathered_.n == 0) return okStatus();
  const int n = gathered_.n;
  if (n > 1) BRAID_INFO(kLogColl, "%d collectives of a group in one launch", n);
  Status s = useDevice();
  if (s.ok()) s = device::launchCollectives(gatheredKey_, gathered_, gatheredStream_);
  gathered_.n = 0;
  return s;
}

Status GpuEngineImpl::p2p(const std::vector<P2pOp>& ops, void* stream) {
  const P2pNeeds needs = p2pNeeds(ops);
  const bool connected = peersConnected(needs.channels, needs.sendPeers, needs.recvPeers);
  if (groupMustNotBlock() && !connected) return groupWouldBlock();
  BRAID_CHECK(useDevice());
  BRAID_CHECK(deviceStatus());
  importPeerBuffers();
  hipStream_t s = static_cast<hipStream_t>(stream);
  const int me = comm_->rank();
  // Sends to and receives from oneself pair up in call order: copies.
  std::vector<const P2pOp*> selfSends, selfRecvs;
  std::vector<const P2pOp*> remote;
  remote.reserve(ops.size());
  for (const P2pOp& op : ops) {
    if (op.peer == me) {
      (op.isSend ? selfSends : selfRecvs).push_back(&op);
    } else {
      remote.push_back(&op);
    }
  }
  if (selfSends.size() != selfRecvs.size()) {
    return invalidUsage("the group has ", selfSends.size(), " sends to this rank itself but ", selfRecvs.size(),
                        " receives from it; they must pair up");
  }
  for (size_t i = 0; i < selfSends.size(); ++i) {
    if (selfSends[i]->bytes != selfRecvs[i]->bytes) {
      return invalidUsage("a send to this rank itself of ", selfSends[i]->bytes, " bytes meets a receive of ",
                          selfRecvs[i]->bytes, " bytes");
    }
  }
  // Every link (peer, direction) gets its messages cut into parts over its
  // peer channels, in call order; one block per connector used moves its
  // parts in order. The peer cuts its matching messages the same way.
  auto linkBefore = [](const P2pOp* x, const P2pOp* y) {
    return x->peer != y->peer ? x->peer < y->peer : x->isSend < y->isSend;
  };
  std::stable_sort(remote.begin(), remote.end(), linkBefore);
  size_t links = 0;
  for (size_t i = 0; i < remote.size(); ++i) links += i == 0 || linkBefore(remote[i - 1], remote[i]) ? 1 : 0;
  if (links > static_cast<size_t>(device::kDevMaxP2pBlocks)) {
    return invalidUsage("a group on one communicator sends to or receives from ", links,
                        " peers; one GPU launch serves at most ", device::kDevMaxP2pBlocks,
                        " in this release");
  }
  if (!connected) {
    CaptureTolerant tolerant;
    BRAID_CHECK(ensurePeers(needs.channels, needs.sendPeers, needs.recvPeers));
  }
  DevP2pArgs args;
  args.nranks = comm_->nranks();
  args.directMinBytes = comm_->gpuP2pDirectMinBytes();
  args.ctx = ctx();
  args.sendConns = devPeerSend_;
  args.recvConns = devPeerRecv_;
  // Receives large enough for direct writes: where may the sender's GPU
  // write them (null: through the FIFO)? Connectors without a mailbox
  // ignore the answer.
  std::vector<char*> writable(remote.size(), nullptr);
  size_t busiestPeerBlock = 0;  // bytes of the peer block that moves the most
  for (size_t i = 0; i < remote.size() && args.directMinBytes != 0; ++i) {
    const P2pOp* op = remote[i];
    if (op->isSend) continue;
    uint64_t lo = 0, len = 0;
    device::channelPart(op->bytes, 1, p2pChannelsFor(op->bytes), 0, &lo, &len);
    if (len < args.directMinBytes) continue;
    writable[i] = writableBy(op->peer, op->recvBuf, op->bytes);
    BRAID_TRACE(
        kLogP2p, "receive of %zu bytes from rank %d: %s", op->bytes, op->peer,
        writable[i] != nullptr ? "direct writes" : "through the FIFO (not memory the peer's GPU may write)");
  }
  for (size_t first = 0; first < remote.size();) {
    size_t last = first + 1;
    while (last < remote.size() && !linkBefore(remote[first], remote[last])) ++last;
    int used = 0;
    for (size_t i = first; i < last; ++i) used = std::max(used, p2pChannelsFor(remote[i]->bytes));
    for (int c = 0; c < used; ++c) {
      device::DevP2pBlock& b = args.blocks[args.nBlocks++];
      b.peer = remote[first]->peer;
      b.isSend = remote[first]->isSend ? 1 : 0;
      b.channel = c;
      b.segBegin = static_cast<int16_t>(args.nSegs);
      size_t blockBytes = 0;
      for (size_t i = first; i < last; ++i) {
        const P2pOp* op = remote[i];
        const int k = p2pChannelsFor(op->bytes);
        if (c >= k) continue;
        if (args.nSegs == device::kDevMaxP2pSegs) {
          return invalidUsage(
              "a group on one communicator holds more sends and receives than one GPU launch "
              "serves in this release (",
              device::kDevMaxP2pSegs, " message parts)");
        }
        char* buf = op->isSend ? const_cast<char*>(static_cast<const char*>(op->sendBuf))
                               : static_cast<char*>(op->recvBuf);
        uint64_t lo = 0, len = 0;
        device::channelPart(op->bytes, 1, k, c, &lo, &len);
        blockBytes += len;
        // A direct receive hands the sender its buffer as the sender's
        // process addresses it; the kernel only posts it.
        if (writable[i] != nullptr && len >= args.directMinBytes) {
          buf = writable[i];
          len |= device::kDevP2pWritable;
        }
        args.segs[args.nSegs++] = {buf + lo, len};
      }
      busiestPeerBlock = std::max(busiestPeerBlock, blockBytes);
      b.segEnd = static_cast<int16_t>(args.nSegs);
    }
    first = last;
  }
  // Sends to oneself: copy blocks of this launch (a copy of its own would
  // cost a launch, and the blocks overlap the peers' traffic), one per
  // kSelfCopyBytesPerBlock up to kSelfCopyMaxBlocks and the blocks left, if
  // the copy is small or its blocks carry at most twice what the busiest
  // peer block does; otherwise a copy on the stream, which is faster than
  // a few blocks.
  for (size_t i = 0; i < selfSends.size(); ++i) {
    const char* from = static_cast<const char*>(selfSends[i]->sendBuf);
    char* to = static_cast<char*>(selfRecvs[i]->recvBuf);
    const size_t bytes = selfSends[i]->bytes;
    if (bytes == 0 || from == to) continue;
    const int k =
        std::min({static_cast<int>(std::clamp<size_t>(
                      (bytes + kSelfCopyBytesPerBlock - 1) / kSelfCopyBytesPerBlock, 1, kSelfCopyMaxBlocks)),
                  device::kDevMaxP2pBlocks - args.nBlocks, (device::kDevMaxP2pSegs - args.nSegs) / 2});
    const bool inKernel =
        k >= 1 && (bytes <= kSelfCopyInKernelMax || bytes <= 2 * static_cast<size_t>(k) * busiestPeerBlock);
    if (!inKernel) {
      BRAID_CHECK(
          gpuCheck(hipMemcpyAsync(to, from, bytes, hipMemcpyDefault, s), "copying a send to oneself"));
      continue;
    }
    for (int c = 0; c < k; ++c) {
      uint64_t lo = 0, len = 0;
      device::channelPart(bytes, 1, k, c, &lo, &len);
      device::DevP2pBlock& b = args.blocks[args.nBlocks++];
      b.peer = me;
      b.isSend = device::kDevP2pCopy;
      b.channel = 0;
      b.segBegin = static_cast<int16_t>(args.nSegs);
      args.segs[args.nSegs++] = {const_cast<char*>(from) + lo, len};
      args.segs[args.nSegs++] = {to + lo, len};
      b.segEnd = static_cast<int16_t>(args.nSegs);
    }
  }
  return device::launchP2p(args, stream);
}

}  // namespace

Status GpuEngine::create(Communicator* comm, std::unique_ptr<GpuEngine>* out) {
  auto e = std::make_unique<GpuEngineImpl>(comm);
  BRAID_CHECK(e->init());
  *out = std::move(e);
  return okStatus();
}

}  // namespace braid
