// The communicator: one rank's membership in a group of ranks.
//
// It composes the parts that later layers fill in (bootstrap today;
// channels, transports and the executor later) and owns their lifetime. It
// is not a god struct: each part keeps its own state behind its own type.
//
// Life cycle. A communicator is created by init (or split) and published in
// the process-wide handle registry, which is how API calls validate handles:
// a destroyed, aborted or made-up handle is never dereferenced. Init runs on
// a worker thread; a blocking init waits for it, a non-blocking one returns
// ncclInProgress and ncclCommGetAsyncError reports progress. Whoever removes
// a communicator from the registry (destroy, abort, or a failed blocking
// init) owns its destruction; abort raises the abort flag first, which every
// bootstrap wait polls, so a blocked init ends within a fraction of a second.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "core/channels.h"
#include "core/config.h"
#include "core/connectors.h"
#include "core/gpu_engine.h"
#include "core/library.h"
#include "core/memory.h"
#include "core/peer_buffers.h"
#include "core/redops.h"
#include "core/symmetric.h"
#include "exec/host/executor.h"
#include "exec/host/host_prims.h"
#include "nccl.h"
#include "topology/search.h"
#include "transports/shm/shm_transport.h"
#include "util/status.h"

namespace braid {

// What every rank tells every other at init (all-gathered; fixed size).
// Parameters every rank of a communicator must set alike (comm.cc names them).
constexpr int kSharedSettingCount = 7;

struct PeerInfo {
  uint32_t braidVersion = 0;  // MAJOR*10000 + MINOR*100 + PATCH
  uint32_t backend = 0;       // Backend
  int32_t rank = -1;
  int32_t pid = 0;
  int32_t device = -1;        // GPU index, -1 on the host backend
  uint64_t pidNamespace = 0;  // pidNamespaceId (platform/shared_memory.h)
  uint64_t hostHash = 0;      // hash of the host id
  char hostId[96] = {};       // hostname + boot id, or BRAID_HOSTID
  char busId[32] = {};        // PCI bus id of the GPU, "" on the host backend
  int32_t numaNode = -1;      // host backend: the NUMA node the rank's CPUs are on (-1: several, unknown)
  // GPU backend: the position of the rank's GPU in each ring the topology
  // search found inside its node (nRingPos of them; 0 when the GPU is not in
  // the topology). Ranks of a node chain in this order.
  int32_t nRingPos = 0;
  int16_t ringPos[kMaxChannels] = {};
  // GPU backend: LL128 may run on this rank's GPU to every GPU of its node
  // (an NVIDIA sm_90 in a cuda build, every other GPU of the node reached
  // over NVLink; transports/transport.h says why).
  int32_t ll128 = 0;
  // GPU backend: NCCL_P2P_DISABLE (or NCCL_P2P_LEVEL=LOC) is set on this
  // rank; NCCL_P2P_LEVEL as a path rank (-1: unset).
  int32_t p2pDisabled = 0;
  int32_t p2pLevel = -1;
  // GPU backend: this rank's connectors may run in read mode
  // (NCCL_P2P_READ_ENABLE, or by default an sm_80 with NVLink to every GPU
  // of its node; transports/p2p/p2p_transport.h).
  int32_t p2pRead = 0;
  // This rank's BRAID_GPU_P2P_DIRECT_MIN_BYTES and
  // BRAID_GPU_RING_DIRECT_MIN_BYTES (GPU backend settings). Both ends of a connector must take the
  // same path, so the communicator uses one value for every rank
  // (agreedDirectMin).
  uint64_t p2pDirectMin = 0;
  uint64_t ringDirectMin = 0;
  // GPU backend: the memory file of this rank's registered-buffer table
  // (core/peer_buffers.h), which its host's other processes map; -1: none.
  int32_t sharedFd = -1;
  // What this rank's host affords, for the communicator's agreed shape:
  // Communicator::hostCores() and allowedCores(), and the bus bandwidth the
  // topology search expects of its node's rings and trees (GPU backend;
  // 0: unknown).
  int32_t hostCores = 0;
  int32_t allowedCores = 0;
  double ringBusGBs = 0, treeBusGBs = 0;
  // A hash of this rank's value of each of kSharedSettings (comm.cc).
  uint64_t settingHash[kSharedSettingCount] = {};
};

// What the selector reads of a communicator, the same on every rank: ranks
// of one collective must choose the same algorithm, protocol, channels and
// steps, though their hosts may hold different numbers of ranks or cores.
// Computed from every rank's PeerInfo.
struct AgreedShape {
  int maxLocalRanks = 1;                  // ranks on the host that holds the most
  int minCores = 0;                       // cores of the smallest host (0: unknown)
  int channels = 1;                       // host channels: the fewest any rank's share of its host affords
  double ringBusGBs = 0, treeBusGBs = 0;  // the slowest node's (0: unknown)
};

// Checks that every rank runs the same Braid release and backend and, on the
// GPU backend, that no two ranks of one host share a GPU unless
// gpuSharingAllowed(). The error names the ranks (host id, pid) concerned.
Status checkPeers(const std::vector<PeerInfo>& peers, int myRank);

// BRAID_SHARE_GPU: several ranks of one host may use the same GPU.
bool gpuSharingAllowed();

// BRAID_BOOTSTRAP_TIMEOUT: the bound on every bootstrap wait.
double bootstrapTimeoutSeconds();

// The host id of this process: BRAID_HOSTID if set, else hostname + boot id.
std::string localHostId();

// Shared between a communicator and the thread waiting for its init, so the
// waiter can read the outcome even after an abort destroyed the communicator.
struct InitOutcome {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

class Communicator : public StallListener {
 public:
  Communicator(int rank, int nranks, int device, const CommConfig& config);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  Backend backend() const { return backend_; }
  const CommConfig& config() const { return config_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  bootstrap::Bootstrap* bootstrap() { return bootstrap_.get(); }
  uint64_t commHash() const { return commHash_; }

  // ncclSuccess when ready, ncclInProgress while initializing, else the error.
  ncclResult_t asyncError() const { return asyncError_.load(); }
  // asyncError() after taking in what the GPU kernels reported (ncclCommGetAsyncError).
  ncclResult_t pollAsyncError();
  // The GPU backend of this communicator, made on first use.
  Status gpuEngine(GpuEngine** out);
  // Launches the GPU collectives a group has gathered (GpuEngine::flush);
  // OK at once without a GPU engine.
  Status flushGpuLaunches() {
    GpuEngine* g = gpuView_.load();
    return g != nullptr ? g->flush() : okStatus();
  }
  // Sets asyncError() to the status's code. A failure is also recorded as
  // the communicator's last error and, when it puts a working communicator
  // in error, kept as the cause that later refused calls repeat.
  void setAsyncError(const Status& status);
  // Why the communicator is in error (empty while it is not).
  std::string asyncErrorCause() const;
  bool finalized() const { return finalized_.load(); }
  void markFinalized() { finalized_.store(true); }
  const std::atomic<bool>& abortFlag() const { return abort_; }

  // Buffers registered with ncclCommRegister (made at init).
  BufferRegistry& buffers() { return *buffers_; }
  // ncclCommRegister / ncclCommDeregister: the registry, and on the GPU
  // backend the registration shared with this host's other processes
  // (core/peer_buffers.h).
  Status registerBuffer(void* buff, size_t size, void** handle);
  Status deregisterBuffer(void* handle);
  // ncclCommWindowRegister / ncclCommWindowDeregister (collective): the
  // registry and the zero-copy map; on the GPU backend the window's device
  // descriptor (core/lsa_space.h), which is what the user holds. Inside a
  // group the registration runs at ncclGroupEnd, which fills *win.
  Status registerWindow(void* buff, size_t size, ncclWindow_t* win);
  Status deregisterWindow(ncclWindow_t win);
  // ncclDevCommCreate / ncclDevCommDestroy (GPU backend; collective).
  Status devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out);
  Status devCommDestroy(const ncclDevComm& devComm);
  // GPU backend, with ranks of this host in other processes: this rank's
  // registered-buffer table and its imports of the peers'; else null.
  PeerBuffers* peerBuffers() { return peerBuffers_.get(); }
  // Rank r's index among the ranks of its host (in rank order).
  int localIndex(int r) const { return localIndex_[static_cast<size_t>(r)]; }
  // Windows mapped into every rank, for zero-copy collectives (host backend).
  SymmetricWindows& windows() { return *windows_; }

  // This communicator's last error text (ncclGetLastError(comm)).
  void recordError(const std::string& text);
  std::string lastError() const;

  // Channels and their connectors (host backend), connected by the first
  // collective that needs them, which every rank calls.
  Status ensureChannels(Algo algo, int n);
  ChannelSet& channels() { return *channels_; }
  // The rings and trees the channels follow (logged at init, NCCL's
  // format): each node's ranks contiguous, chained by NUMA node (host
  // backend) or in the order of the topology search's rings inside the node
  // (GPU backend).
  const Schedule& schedule() const { return schedule_; }
  // GPU backend: the topology search's schedule for this node (empty on the
  // host backend), over the node's GPUs. The selector reads its expected
  // bandwidth; schedule() follows its rings.
  const Schedule& topologySchedule() const { return topoSchedule_; }
  HostExecutor& executor() { return executor_; }
  RedOpTable& redOps() { return redOps_; }
  ChoiceCache& choices() { return choices_; }
  // Connectors to every peer, for direct algorithms (set up once).
  Status ensureDirect();
  uint64_t nextCollectiveSeq() { return ++collectiveSeq_; }
  // Numbers the host's send/receive batches that involve other ranks (a
  // group's, or one call's), for their error messages.
  uint64_t nextP2pSeq() { return ++p2pSeq_; }
  int nnodes() const { return nnodes_; }
  int localRanks() const { return localRanks_; }
  // NCCL's load-store-accessible team (ncclTeamLsa): the ranks of this node
  // when every node's ranks are one block of consecutive ranks, all nodes
  // alike, and no rank turned peer-to-peer off (PeerInfo::p2pDisabled);
  // otherwise this rank alone. Its members are ranks
  // lsaSize() * (rank() / lsaSize()) on.
  int lsaSize() const { return lsaSize_; }
  // GPU backend: the ring may run the LL128 protocol (one node, every rank's
  // PeerInfo::ll128; the same answer on every rank).
  bool ll128() const { return ll128_; }
  // GPU backend: this rank and `peer` never touch each other's GPU memory
  // (NCCL_P2P_DISABLE on either, or their GPUs farther apart than the lower
  // of their NCCL_P2P_LEVELs): their connectors are in host memory, no
  // window maps the other's buffers. Both ranks answer alike given one
  // topology of their host; the connectors agree even if not (each end
  // places its own block and tells the other).
  bool p2pDisabled(int peer) const;
  // GPU backend: the connectors between this rank and `peer` (of this
  // host) keep their Simple slots in the sender's memory (read mode): both
  // ranks' PeerInfo::p2pRead and neither's p2pDisabled, so both answer
  // alike, as their connectors need.
  bool p2pRead(int peer) const;
  // The selector's view of the communicator, agreed by all ranks (known
  // once the ranks' hosts are; read by every collective). Its channels: the
  // host channels every rank can run in parallel, cores per local rank less
  // one for the proxy when there are several nodes, the least of any rank.
  const AgreedShape& agreedShape() const { return shape_; }
  // More ranks on this host than it has cores: a waiting rank should give
  // its core away at once, the rank it waits for may be queued behind it.
  bool oversubscribed() const { return localRanks_ > cores_; }
  static int hostCores();
  // CPUs in this process's affinity mask (mpirun's binding).
  static int allowedCores();
  // A wait of `channel` (-1: a send/receive batch) timed out: with
  // BRAID_DUMP_ON_STALL=1, logs every channel's counters and FIFO state and
  // the point-to-point connectors'.
  void onStall(int channel) override;
  // Point-to-point connectors, set up with the peers' matching calls.
  Status ensureP2p(const std::vector<int>& sendPeers, const std::vector<int>& recvPeers);
  ConnectorEnd* p2pSend(int peer) { return p2pSend_[peer].get(); }
  ConnectorEnd* p2pRecv(int peer) { return p2pRecv_[peer].get(); }
  // The transports: shm for peers on this host, net for the others.
  ConnectorFactory& connectors() { return *connectors_; }
  // A failed operation's status, with the cause the connectors recorded (a
  // net connector's dead peer or dropped link, a peer process that ended)
  // put first when there is one and it is not there already.
  Status explainFailure(Status s) const;
  size_t p2pSlotBytes() const;
  // GPU backend: the slot of a point-to-point connector (BRAID_GPU_P2P_STEP).
  size_t gpuP2pStepBytes() const;
  // GPU backend: the smallest channel part of a send written straight into
  // a receiver of this process (BRAID_GPU_P2P_DIRECT_MIN_BYTES; 0: never).
  // Agreed: 0 if any rank set 0, else the largest any rank set.
  size_t gpuP2pDirectMinBytes() const;
  // GPU backend: the smallest channel part of a ring collective (Simple)
  // whose output ranks of this process write into each other directly
  // (BRAID_GPU_RING_DIRECT_MIN_BYTES; 0: never), agreed the same way.
  size_t gpuRingDirectMinBytes() const;
  // BRAID_STALL_TIMEOUT: how long an operation may make no progress.
  double stallTimeoutSeconds() const;

  // Operations in flight on other threads (see CommUse); destroy and abort
  // wait for them to end (abort first raises the flag that ends them).
  void waitUnused() const;

  // Runs the init steps: bootstrap, peer info exchange, consistency checks.
  Status initialize(const std::vector<bootstrap::UniqueIdData>& ids);

  std::shared_ptr<InitOutcome> outcome() const { return outcome_; }
  void setInitThread(std::thread t) { initThread_ = std::move(t); }
  // Raises the abort flag, waits for init to end and joins its thread.
  void stopInit(bool abort);
  // Raises the abort flag (and the GPU kernels'): operations in flight end
  // with an error and later ones fail; the communicator stays registered
  // for its owner to destroy or abort (ncclCommShrink's NCCL_SHRINK_ABORT).
  void abortOperations();
  // ncclCommRevoke: refuses operations from now on (revoked(),
  // refuseIfRevoked), ends those in flight as an abort does (their waits,
  // the GPU kernels'), waits until no other call uses the communicator
  // (ncclInProgress meanwhile), then leaves it quiescent: ncclSuccess, its
  // bootstrap usable again for ncclCommSplit and ncclCommShrink, its
  // kernels' flag still raised. Errors of the operations it stopped are not
  // the communicator's.
  Status revoke();
  bool revoked() const { return revoked_.load(); }
  // invalidUsage naming ncclCommRevoke once revoked, else OK: every
  // operation's first check (also for a group's operations queued before).
  Status refuseIfRevoked() const;
  bool sameProcess(int peer) const;  // a thread of this process (ncclCommInitAll)

 private:
  Status exchangePeerInfo();
  Status registerWindowNow(void* buff, size_t size, ncclWindow_t* win);

  int rank_, nranks_, device_;
  Backend backend_ = Backend::Host;
  CommConfig config_;
  uint64_t commHash_ = 0;
  std::unique_ptr<bootstrap::Bootstrap> bootstrap_;
  std::vector<PeerInfo> peers_;
  int nnodes_ = 1, localRanks_ = 1, lsaSize_ = 1;
  AgreedShape shape_;
  const int cores_ = hostCores();
  bool ll128_ = false;
  std::unique_ptr<ConnectorFactory> connectors_;
  std::unique_ptr<BufferRegistry> buffers_;
  std::unique_ptr<SymmetricWindows> windows_;
  std::unique_ptr<PeerBuffers> peerBuffers_;
  std::vector<int> localIndex_;
  std::unique_ptr<ChannelSet> channels_;
  Schedule schedule_, topoSchedule_;
  // GPU backend: the PCI addresses of the NICs nearest the GPU, nearest first.
  std::vector<std::string> nearNics_;
  // GPU backend: the path rank (topology/model.h) from this rank's GPU to
  // each other GPU of the host, by upper-case bus id.
  std::map<std::string, int> gpuPathRank_;
  // Runs the search inside this node; returns the index of the GPU with bus
  // id `busId` in its topology, -1 if absent. `*nvlinkToAll`: that GPU
  // reaches every other GPU of the node over NVLink.
  int searchLocalTopology(const std::string& busId, bool* nvlinkToAll);
  void logSchedule() const;
  HostExecutor executor_;
  RedOpTable redOps_;
  ChoiceCache choices_;
  bool directReady_ = false;
  std::map<int, std::unique_ptr<ConnectorEnd>> p2pSend_, p2pRecv_;
  uint64_t collectiveSeq_ = 0;
  uint64_t p2pSeq_ = 0;

  friend class CommUse;
  friend Status lookupComm(ncclComm_t, Communicator**, bool, class CommUse*);
  std::atomic<int> users_{0};
  // The process that made it, and how many forks had happened in this
  // process then: a forked child inherits the handle but not the job.
  pid_t creatorPid_ = 0;
  uint32_t forks_ = 0;
  std::atomic<ncclResult_t> asyncError_{ncclInProgress};
  std::atomic<bool> finalized_{false};
  std::atomic<bool> abort_{false};
  std::atomic<bool> revoked_{false};
  mutable std::mutex errorMutex_;
  std::string lastError_;
  std::string asyncErrorCause_;  // guarded by errorMutex_

  std::shared_ptr<InitOutcome> outcome_ = std::make_shared<InitOutcome>();
  std::mutex initThreadMutex_;  // stopInit may race between an aborter and the init caller
  std::thread initThread_;

  std::mutex gpuMutex_;
  std::atomic<GpuEngine*> gpuView_{nullptr};  // for pollAsyncError on other threads
  std::unique_ptr<GpuEngine> gpu_;            // last: destroyed first (its kernels use the rest)
};

// ---- the handle registry ------------------------------------------------------

// Marks a communicator in use by an operation (a collective, a group's
// end) for its lifetime, so that an abort from another thread waits for the
// operation to notice the abort flag and return before freeing it.
class CommUse {
 public:
  CommUse() = default;
  ~CommUse() {
    if (comm_ != nullptr) comm_->users_.fetch_sub(1);
  }
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;
  // Takes `comm` if it is still registered (destroy and abort unregister first).
  Status acquire(Communicator* comm);

 private:
  friend Status lookupComm(ncclComm_t, Communicator**, bool, CommUse*);
  Communicator* comm_ = nullptr;
};

void registerComm(Communicator* comm);
// Removes comm; false if it was not (or no longer) registered.
bool unregisterComm(Communicator* comm);
// Validates a handle from the API. `needReady` also requires init to have
// completed successfully and the communicator not to be finalized. With
// `use`, also marks it in use (atomically with the lookup).
Status lookupComm(ncclComm_t handle, Communicator** out, bool needReady, CommUse* use = nullptr);
// Error text of the communicator behind a handle, "" if none or invalid.
std::string commLastError(ncclComm_t handle);
void recordCommError(ncclComm_t handle, const std::string& text);

}  // namespace braid

// The public handle type is the communicator itself.
struct ncclComm final : public braid::Communicator {
  using braid::Communicator::Communicator;
};
