#include "core/comm.h"

#include <pthread.h>
#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <unordered_set>

#include "bootstrap/root.h"
#include "core/group.h"
#include "platform/gpu.h"
#include "platform/shared_memory.h"
#include "topology/probe/probe.h"
#include "topology/topology.h"
#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid {
namespace {

StringParam paramHostId("HOSTID", "",
                        "Overrides this process's host id (default: hostname and boot id); ranks with "
                        "different host ids are treated as different nodes");
SizeParam paramGpuP2pStep("GPU_P2P_STEP", 256u << 10,
                        "GPU backend: bytes of one point-to-point FIFO step between GPUs (the slot size of "
                        "the peer connectors used by send/receive and the one-shot all-reduce)");
SizeParam paramGpuP2pDirectMin(
    "GPU_P2P_DIRECT_MIN_BYTES", 512u << 10,
    "GPU backend: a send to a rank of the same process is written straight into the receiver's buffer, "
    "skipping the FIFO, where a channel's part of it is at least this large (0: never; every rank uses 0 if "
    "any rank sets 0, else the largest value set)");
SizeParam paramGpuRingDirectMin(
    "GPU_RING_DIRECT_MIN_BYTES", 128u << 10,
    "GPU backend: a ring collective (Simple protocol) between ranks of the same process writes its results "
    "straight into the next rank's output buffer, skipping the FIFO, where a channel's part of it is at "
    "least this large (0: never; every rank uses 0 if any rank sets 0, else the largest value set)");
// About three years: a timeout's nanoseconds stay far inside a deadline's range.
constexpr int64_t kMaxTimeoutSeconds = 100000000;
SizeParam paramBuffSize("BUFFSIZE", 4u << 20,
                         "Bytes of each connector's FIFO (all its steps together); larger moves more per step");
IntParam paramStallTimeout("STALL_TIMEOUT", 300,
                           "Seconds a collective or send/receive may make no progress before the communicator "
                           "fails with an error naming the operation, its sequence number, the channel and the "
                           "peer (1 to 100000000)",
                           1, kMaxTimeoutSeconds);
BoolParam paramDumpOnStall("DUMP_ON_STALL", false,
                            "When an operation stalls past STALL_TIMEOUT, also log every channel's collective "
                            "counters and FIFO state (head, tail) before failing");
BoolParam paramShareGpu("SHARE_GPU", false,
                        "GPU backend: let several ranks of one host use the same GPU (refused by default, as "
                        "NCCL does). For testing with fewer GPUs than ranks: ranks in one process run "
                        "concurrently on their own streams (not the null stream, which serializes them) when "
                        "one thread drives them in a group (from separate threads, a device-wide wait such as "
                        "hipFree in one blocks behind the other rank's kernel); ranks in different processes "
                        "time-slice the GPU");
BoolParam paramP2pDisable("P2P_DISABLE", false,
                          "GPU backend: GPUs of one host never read or write each other's memory: their "
                          "connectors go through host memory both GPUs map (pinned; shared between "
                          "processes), windows are not zero-copy and LL128 is off. For hosts whose "
                          "peer-to-peer path is broken or slow; a pair of ranks uses host memory if either "
                          "sets it");
Status validateP2pLevel(const std::string& text) {
  int rank = 0;
  return parsePathLevel(text, &rank);
}
StringParam paramP2pLevel(
    "P2P_LEVEL", "",
    "GPU backend: the farthest GPU-to-GPU path over which GPUs of one host use each "
    "other's memory: LOC (never, as P2P_DISABLE), NVL, PIX, PXB, PHB or SYS (or 0..5); "
    "farther pairs go through host memory; unset: wherever the runtime grants peer "
    "access. Paths come from the topology (a GPU missing from it counts as SYS); a pair "
    "uses the lower of its two ranks' levels",
    {}, validateP2pLevel);
IntParam paramP2pRead("P2P_READ_ENABLE", -1,
                      "GPU backend: read mode for connectors between GPUs of one host: the sender keeps the "
                      "Simple protocol's slots in its own memory and the receiver reads them across the link "
                      "(1), instead of the sender writing them into the receiver's (0). -1: read mode "
                      "between sm_80 GPUs joined by NVLink, as NCCL. A pair of ranks uses it if both want it",
                      -1, 1);
IntParam paramBootstrapTimeout("BOOTSTRAP_TIMEOUT", 300,
                               "Seconds any bootstrap wait (root, ring, peer messages) may take before init "
                               "fails with an error naming the peer (1 to 100000000)",
                               1, kMaxTimeoutSeconds);

// Each rank lays out its connectors' slots, steps and collective choices
// from these: ranks that differ would stall or misread each other's data in
// some later collective (a different BUFFSIZE surfaced at the tenth, as
// "the ranks called different collectives"), so init refuses them instead.
constexpr const char* kSharedSettings[kSharedSettingCount] = {
    "BUFFSIZE", "CHUNK_SIZE", "ALGO", "PROTO", "MIN_NCHANNELS", "MAX_NCHANNELS", "ZERO_COPY_MAX_BYTES"};

std::string sharedSettingValue(int i) {
  const ParamBase* param = ParamRegistry::instance().find(kSharedSettings[i]);
  return param == nullptr ? std::string() : param->valueText();
}

uint64_t fnv1a(const void* data, size_t len, uint64_t h = 0xcbf29ce484222325ull) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::mutex gRegistryMutex;
std::unordered_set<Communicator*>& registry() {
  static auto* set = new std::unordered_set<Communicator*>();
  return *set;
}

// Bumped (under gRegistryMutex) by every unregistration. A thread remembers
// the last handle it found registered and the count then: while the count is
// unchanged, that handle is still live and the next call on it skips the
// lock (a loop of small collectives on one communicator, the common case).
std::atomic<uint64_t> gUnregistrations{0};
struct LiveHandle {
  Communicator* comm = nullptr;
  uint64_t unregistrations = 0;
};
thread_local LiveHandle tLastLive;

// Bumped in a child by fork(): its communicators' shared memory, sockets
// and threads belong to the parent's job, and using them would corrupt it.
std::atomic<uint32_t> gForks{0};
uint32_t forksSoFar() {
  static const bool watching = [] {
    return pthread_atfork(nullptr, nullptr, [] { gForks.fetch_add(1); }) == 0;
  }();
  (void)watching;
  return gForks.load();
}

std::string describePeer(const PeerInfo& p) {
  return strCat("rank ", p.rank, " (", p.hostId, ", pid ", p.pid, ")");
}

}  // namespace

bool gpuSharingAllowed() {
  return paramShareGpu.get();
}

double bootstrapTimeoutSeconds() { return static_cast<double>(paramBootstrapTimeout.get()); }

std::string localHostId() {
  std::string override = paramHostId.get();
  if (!override.empty()) return override;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string bootId;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, bootId);
  return bootId.empty() ? std::string(host) : strCat(host, ":", trim(bootId));
}

Communicator::Communicator(int rank, int nranks, int device, const CommConfig& config)
    : rank_(rank),
      nranks_(nranks),
      device_(device),
      config_(config),
      creatorPid_(getpid()),
      forks_(forksSoFar()) {}

Communicator::~Communicator() {
  if (initThread_.joinable()) initThread_.join();
}

void Communicator::setAsyncError(const Status& status) {
  if (revoked_.load()) return;
  if (!status.ok() && status.code() != ncclInProgress) {
    std::lock_guard<std::mutex> lock(errorMutex_);
    const ncclResult_t before = asyncError_.load();
    if (before == ncclSuccess || before == ncclInProgress) asyncErrorCause_ = status.message();
    lastError_ = status.message();
  }
  asyncError_.store(status.code());
}

std::string Communicator::asyncErrorCause() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  const ncclResult_t state = asyncError_.load();
  return state == ncclSuccess || state == ncclInProgress ? std::string() : asyncErrorCause_;
}

void Communicator::abortOperations() {
  abort_.store(true);
  GpuEngine* g = gpuView_.load();
  if (g != nullptr) g->abort();
}

Status Communicator::revoke() {
  if (asyncError() == ncclInProgress && !revoked()) {
    return invalidUsage(
        "the communicator is still initializing (non-blocking init): poll "
        "ncclCommGetAsyncError until it returns ncclSuccess");
  }
  if (revoked_.exchange(true)) {
    return invalidArgument(
        "argument 'comm' was already revoked: ncclCommRevoke is called once per communicator");
  }
  asyncError_.store(ncclInProgress);  // as NCCL's: in progress until quiescent
  abortOperations();
  waitUnused();
  // Quiescent: no call of another thread runs on it, and the GPU kernels
  // launched before end at their flag, which stays raised (the kernels'
  // aborted waits are not reported: pollAsyncError skips them).
  abort_.store(false);
  asyncError_.store(ncclSuccess);
  BRAID_INFO(kLogInit, "comm %p rank %d: revoked; split, shrink and destroy remain", static_cast<void*>(this),
             rank_);
  return okStatus();
}

Status Communicator::refuseIfRevoked() const {
  if (!revoked()) return okStatus();
  return invalidUsage(
      "the communicator was revoked (ncclCommRevoke): it takes no more operations; split, "
      "shrink or destroy it");
}

ncclResult_t Communicator::pollAsyncError() {
  GpuEngine* g = gpuView_.load();
  if (g != nullptr && asyncError_.load() == ncclSuccess && !revoked()) {
    Status s = g->deviceStatus();
    if (!s.ok()) {
      BRAID_WARN("%s", s.message().c_str());
      setAsyncError(s);
    }
  }
  return asyncError();
}

Status Communicator::registerBuffer(void* buff, size_t size, void** handle) {
  BRAID_CHECK(buffers_->add(buff, size, handle));
  if (peerBuffers_ == nullptr || size == 0) return okStatus();
  GpuEngine* engine = nullptr;
  Status s = gpuEngine(&engine);
  if (!s.ok()) {
    (void)buffers_->remove(*handle);
    *handle = nullptr;
    return s;
  }
  engine->shareBuffer(*handle, buff, size);
  return okStatus();
}

Status Communicator::deregisterBuffer(void* handle) {
  BRAID_CHECK(buffers_->remove(handle));
  if (peerBuffers_ != nullptr) peerBuffers_->withdraw(handle);
  return okStatus();
}

Status Communicator::registerWindow(void* buff, size_t size, ncclWindow_t* win) {
  if (groupDepth() > 0) {  // collective: one thread may register for every rank it drives
    groupDeferTask(this, [this, buff, size, win] { return registerWindowNow(buff, size, win); });
    return okStatus();
  }
  return registerWindowNow(buff, size, win);
}

Status Communicator::registerWindowNow(void* buff, size_t size, ncclWindow_t* win) {
  void* handle = nullptr;
  BRAID_CHECK(buffers_->add(buff, size, &handle, BufferRegistry::Kind::Window));
  Status s = windows_->add(*this, handle, buff, size);
  GpuEngine* engine = nullptr;
  if (s.ok() && backend_ == Backend::Gpu) {
    s = gpuEngine(&engine);
    if (s.ok()) s = engine->deviceWindowCreate(buff, size, handle, win);
    if (!s.ok()) windows_->remove(*this, handle);
  } else if (s.ok()) {
    *win = static_cast<ncclWindow_t>(handle);
  }
  if (!s.ok()) (void)buffers_->remove(handle, BufferRegistry::Kind::Window);
  return s;
}

Status Communicator::deregisterWindow(ncclWindow_t win) {
  void* handle = win;
  GpuEngine* engine = nullptr;
  if (backend_ == Backend::Gpu) {
    BRAID_CHECK(gpuEngine(&engine));
    if (!engine->deviceWindowHost(win, &handle)) {
      return invalidArgument("argument 'win' (", static_cast<void*>(win),
                             ") is no window of this communicator (deregistered already?)");
    }
  }
  BRAID_CHECK(buffers_->remove(handle, BufferRegistry::Kind::Window));
  windows_->remove(*this, handle);
  if (engine != nullptr) engine->deviceWindowDestroy(win);
  return okStatus();
}

Status Communicator::devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out) {
  if (backend_ != Backend::Gpu) {
    return invalidUsage(
        "NCCL's device API (ncclDevCommCreate) needs the GPU backend; this communicator runs on ",
        backendName(backend_));
  }
  GpuEngine* engine = nullptr;
  BRAID_CHECK(gpuEngine(&engine));
  return engine->devCommCreate(reqs, out);
}

Status Communicator::devCommDestroy(const ncclDevComm& devComm) {
  if (backend_ != Backend::Gpu) {
    return invalidArgument("argument 'devComm': this communicator runs on ", backendName(backend_),
                           " and has no device communicators");
  }
  GpuEngine* engine = nullptr;
  BRAID_CHECK(gpuEngine(&engine));
  return engine->devCommDestroy(devComm);
}

Status Communicator::gpuEngine(GpuEngine** out) {
  std::lock_guard<std::mutex> lock(gpuMutex_);
  if (!gpu_) {
    if (backend_ != Backend::Gpu) return internalError("the GPU engine of a host-backend communicator");
    BRAID_CHECK(GpuEngine::create(this, &gpu_));
    gpuView_.store(gpu_.get());
  }
  *out = gpu_.get();
  return okStatus();
}

void Communicator::recordError(const std::string& text) {
  std::lock_guard<std::mutex> lock(errorMutex_);
  lastError_ = text;
}

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return lastError_;
}

void Communicator::stopInit(bool abort) {
  if (abort) abort_.store(true);
  {
    std::unique_lock<std::mutex> lock(outcome_->mutex);
    outcome_->cv.wait(lock, [&] { return outcome_->done; });
  }
  std::lock_guard<std::mutex> lock(initThreadMutex_);
  if (initThread_.joinable()) initThread_.join();
}

Status Communicator::initialize(const std::vector<bootstrap::UniqueIdData>& ids) {
  LogRankScope scope(rank_);
  BRAID_CHECK(selectBackend(&backend_));
  if (backend_ == Backend::Host) device_ = -1;
  buffers_ = std::make_unique<BufferRegistry>(device_);
  windows_ = std::make_unique<SymmetricWindows>();
  commHash_ = fnv1a(ids[0].secret.data(), ids[0].secret.size());

  bootstrap::BootstrapOptions options;
  options.timeoutSec = bootstrapTimeoutSeconds();
  options.abort = &abort_;
  BRAID_CHECK(bootstrap::Bootstrap::create(ids, rank_, nranks_, options, &bootstrap_));
  BRAID_CHECK(exchangePeerInfo());
  bootstrap::reapRoots();  // a root this process served for the job has finished by now
  BRAID_INFO(kLogInit, "comm %p rank %d nranks %d backend %s device %d commHash 0x%llx - Init COMPLETE",
             static_cast<void*>(this), rank_, nranks_, backendName(backend_), device_,
             static_cast<unsigned long long>(commHash_));
  return okStatus();
}

double Communicator::stallTimeoutSeconds() const { return static_cast<double>(paramStallTimeout.get()); }

size_t Communicator::gpuP2pStepBytes() const {
  return std::max<size_t>(64, static_cast<size_t>(paramGpuP2pStep.get()) / 64 * 64);
}

namespace {
// One threshold for every rank: 0 (never) if any rank says so, else the largest.
size_t agreedDirectMin(const std::vector<PeerInfo>& peers, uint64_t PeerInfo::*field) {
  uint64_t v = 0;
  for (const PeerInfo& p : peers) {
    if (p.*field == 0) return 0;
    v = std::max(v, p.*field);
  }
  return static_cast<size_t>(v);
}
}  // namespace

size_t Communicator::gpuP2pDirectMinBytes() const {
  return agreedDirectMin(peers_, &PeerInfo::p2pDirectMin);
}

size_t Communicator::gpuRingDirectMinBytes() const {
  return agreedDirectMin(peers_, &PeerInfo::ringDirectMin);
}

size_t Communicator::p2pSlotBytes() const {
  size_t slot = static_cast<size_t>(paramBuffSize.get()) / kConnectorSteps;
  return std::max<size_t>(64, slot / 64 * 64);
}

Status Communicator::ensureP2p(const std::vector<int>& sendPeers, const std::vector<int>& recvPeers) {
  std::vector<int> newSends, newRecvs;
  for (int p : sendPeers) {
    if (!p2pSend_[p]) newSends.push_back(p);
  }
  for (int p : recvPeers) {
    if (!p2pRecv_[p]) newRecvs.push_back(p);
  }
  if (newSends.empty() && newRecvs.empty()) return okStatus();
  // Made during an operation, whose peers reach it within the stall timeout.
  bootstrap::Bootstrap::StallBound bound(bootstrap_.get(), stallTimeoutSeconds());
  auto from = [](int p) { return strCat("connecting the point-to-point connector from rank ", p); };
  auto to = [](int p) { return strCat("connecting the point-to-point connector to rank ", p); };
  // The transports' three steps, each over every new connector (core/connectors.h).
  const size_t slot = p2pSlotBytes();
  for (int p : newRecvs) {
    BRAID_CHECK(connectors_->postRecv(p, kShmP2pTag, slot, &p2pRecv_[p]).withContext(from(p)));
  }
  for (int p : newSends) {
    BRAID_CHECK(connectors_->openSend(p, kShmP2pTag, slot, &p2pSend_[p]).withContext(to(p)));
  }
  for (int p : newRecvs) {
    BRAID_CHECK(connectors_->finishRecv(p, kShmP2pTag, p2pRecv_[p].get()).withContext(from(p)));
  }
  return okStatus();
}

bool Communicator::sameProcess(int peer) const {
  const PeerInfo& p = peers_[static_cast<size_t>(peer)];
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  return p.hostHash == me.hostHash && p.pid == me.pid;
}

bool Communicator::p2pRead(int peer) const {
  const PeerInfo& p = peers_[static_cast<size_t>(peer)];
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  return p.p2pRead != 0 && me.p2pRead != 0 && p.p2pDisabled == 0 && me.p2pDisabled == 0;
}

bool Communicator::p2pDisabled(int peer) const {
  const PeerInfo& p = peers_[static_cast<size_t>(peer)];
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  if (p.p2pDisabled != 0 || me.p2pDisabled != 0) return true;
  const int level = p.p2pLevel < 0    ? me.p2pLevel
                    : me.p2pLevel < 0 ? p.p2pLevel
                                      : std::min(p.p2pLevel, me.p2pLevel);
  if (level < 0 || std::strcmp(p.busId, me.busId) == 0) return false;
  auto it = gpuPathRank_.find(toUpper(p.busId));
  return (it == gpuPathRank_.end() ? pathRank(PathType::Sys) : it->second) > level;
}

Status Communicator::explainFailure(Status s) const {
  if (s.ok() || connectors_ == nullptr) return s;
  Status cause = connectors_->netError();
  if (cause.ok() || s.message().rfind(cause.message(), 0) == 0) return s;  // none, or explained already
  return Status(cause.code(), strCat(cause.message(), " (so: ", s.message(), ")"));
}

Status Communicator::ensureChannels(Algo algo, int n) {
  // Made by the first collective that needs them, whose peers reach it
  // within the stall timeout.
  bootstrap::Bootstrap::StallBound bound(bootstrap_.get(), stallTimeoutSeconds());
  return channels_->ensure(algo, n);
}

Status Communicator::ensureDirect() {
  if (directReady_) return okStatus();
  std::vector<int> all;
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_) all.push_back(p);
  }
  BRAID_CHECK(ensureP2p(all, all));
  directReady_ = true;
  return okStatus();
}

int Communicator::hostCores() {
  // hardware_concurrency() reads sysfs (microseconds): once per process.
  static const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return cores;
}

int Communicator::allowedCores() {
  // The CPUs this process may run on (mpirun binds ranks to a core by
  // default for 2 ranks): read once, at the first communicator.
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return hostCores();
    return std::max(1, CPU_COUNT(&set));
  }();
  return cores;
}

namespace {
int channelsFor(int localRanks, int nnodes, int allowedCores, int hostCores) {
  // Across nodes the proxy thread moves every byte to and from the network:
  // it gets a core of the rank's share (2 cores, 1 rank per node: 0.9 against
  // 0.5 GB/s all-reduce busbw with one channel instead of two). A rank bound
  // to fewer CPUs than its share gets what it is bound to: channels beyond
  // those would take turns on them (16 cores, 2 ranks bound to a core each,
  // 2 MiB all-reduce: 4.8 GB/s busbw on 8 channels).
  const int cores = std::min(allowedCores, hostCores / std::max(1, localRanks));
  return std::max(1, nnodes > 1 ? cores - 1 : cores);
}

// The selector's inputs from every rank's host, so that each rank computes
// the same (the ranks of a node counted from `nodeOf`).
AgreedShape agreeShape(const std::vector<PeerInfo>& peers, const std::vector<int>& nodeOf, int nnodes) {
  AgreedShape shape;
  std::vector<int> onNode(static_cast<size_t>(nnodes), 0);
  for (int node : nodeOf) ++onNode[static_cast<size_t>(node)];
  shape.maxLocalRanks = *std::max_element(onNode.begin(), onNode.end());
  shape.channels = kMaxChannels;
  auto least = [](double* agreed, double mine) {
    if (mine > 0) *agreed = *agreed > 0 ? std::min(*agreed, mine) : mine;
  };
  for (size_t r = 0; r < peers.size(); ++r) {
    const PeerInfo& p = peers[r];
    if (p.hostCores > 0)
      shape.minCores = shape.minCores > 0 ? std::min(shape.minCores, p.hostCores) : p.hostCores;
    shape.channels = std::min(shape.channels, channelsFor(onNode[static_cast<size_t>(nodeOf[r])], nnodes,
                                                          p.allowedCores, p.hostCores));
    least(&shape.ringBusGBs, p.ringBusGBs);
    least(&shape.treeBusGBs, p.treeBusGBs);
  }
  return shape;
}
}  // namespace

void Communicator::onStall(int channel) {
  if (!paramDumpOnStall.get()) return;
  BRAID_WARN(
      "comm %p rank %d: stalled on %s; collectives issued %llu, point-to-point batches %llu; FIFO state "
      "follows",
      static_cast<void*>(this), rank_, channel >= 0 ? strCat("channel ", channel).c_str() : "point-to-point",
      static_cast<unsigned long long>(collectiveSeq_), static_cast<unsigned long long>(p2pSeq_));
  if (channels_ != nullptr) channels_->dump(channel);
  std::string p2p;
  for (const auto& [peer, end] : p2pSend_) p2p += fifoState("send to", peer, end.get());
  for (const auto& [peer, end] : p2pRecv_) p2p += fifoState("recv from", peer, end.get());
  if (!p2p.empty()) BRAID_WARN("point-to-point:%s", p2p.c_str());
}

Status Communicator::exchangePeerInfo() {
  PeerInfo me;
  me.braidVersion = BRAID_MAJOR * 10000 + BRAID_MINOR * 100 + BRAID_PATCH;
  me.backend = static_cast<uint32_t>(backend_);
  me.rank = rank_;
  me.pid = static_cast<int32_t>(getpid());
  me.pidNamespace = pidNamespaceId();
  me.device = device_;
  std::string host = localHostId();
  std::strncpy(me.hostId, host.c_str(), sizeof(me.hostId) - 1);
  me.hostHash = fnv1a(me.hostId, std::strlen(me.hostId));
  me.p2pDirectMin = static_cast<uint64_t>(paramGpuP2pDirectMin.get());
  me.ringDirectMin = static_cast<uint64_t>(paramGpuRingDirectMin.get());
  me.hostCores = hostCores();
  me.allowedCores = allowedCores();
  me.ringBusGBs = topoSchedule_.ringBusBw;
  me.treeBusGBs = topoSchedule_.treeBusBw;
  for (int i = 0; i < kSharedSettingCount; ++i) {
    const std::string value = sharedSettingValue(i);
    me.settingHash[i] = fnv1a(value.data(), value.size());
  }
  if (backend_ == Backend::Gpu && nranks_ > 1) {
    BRAID_CHECK(PeerBuffers::create(commHash_, rank_, &peerBuffers_));
    me.sharedFd = peerBuffers_->fd();
  }
  if (backend_ == Backend::Gpu) {
    GpuInfo gpu;
    BRAID_CHECK(gpuDeviceInfo(device_, &gpu));
    std::strncpy(me.busId, gpu.busId.c_str(), sizeof(me.busId) - 1);
    bool nvlinkToAll = false;
    const int g = searchLocalTopology(gpu.busId, &nvlinkToAll);
    int level = -1;
    BRAID_CHECK(parsePathLevel(paramP2pLevel.get(), &level));
    me.p2pLevel = level;
    me.p2pDisabled = paramP2pDisable.get() || level == pathRank(PathType::Loc) ? 1 : 0;
    me.ll128 = std::strcmp(gpuFlavorName(), "cuda") == 0 && gpu.arch.rfind("sm_90", 0) == 0 && nvlinkToAll &&
               me.p2pDisabled == 0;
    const int read = static_cast<int>(paramP2pRead.get());
    me.p2pRead =
        read >= 0 ? read : std::strcmp(gpuFlavorName(), "cuda") == 0 && gpu.arch == "sm_80" && nvlinkToAll;
    if (g >= 0 && topoSchedule_.nodes == 1) {
      me.nRingPos = std::min(topoSchedule_.nChannels(), kMaxChannels);
      for (int c = 0; c < me.nRingPos; ++c) {
        const std::vector<int>& ring = topoSchedule_.rings[static_cast<size_t>(c)];
        me.ringPos[c] = static_cast<int16_t>(std::find(ring.begin(), ring.end(), g) - ring.begin());
      }
    }
  } else {
    me.numaNode = affinityNumaNode();
  }
  peers_.assign(static_cast<size_t>(nranks_), PeerInfo());
  peers_[static_cast<size_t>(rank_)] = me;
  BRAID_CHECK(bootstrap_->allGather(peers_.data(), sizeof(PeerInfo)).withContext("exchanging peer info"));
  BRAID_CHECK(checkPeers(peers_, rank_));
  // Nodes, numbered in order of first appearance: the trees' layout.
  std::vector<int> nodeOf(static_cast<size_t>(nranks_));
  std::vector<uint64_t> hosts;
  for (int r = 0; r < nranks_; ++r) {
    uint64_t h = peers_[static_cast<size_t>(r)].hostHash;
    auto it = std::find(hosts.begin(), hosts.end(), h);
    nodeOf[static_cast<size_t>(r)] = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) hosts.push_back(h);
  }
  nnodes_ = static_cast<int>(hosts.size());
  localIndex_.assign(static_cast<size_t>(nranks_), 0);
  for (int r = 0; r < nranks_; ++r) {
    for (int q = 0; q < r; ++q)
      localIndex_[static_cast<size_t>(r)] += nodeOf[static_cast<size_t>(q)] == nodeOf[static_cast<size_t>(r)];
  }
  localRanks_ = static_cast<int>(std::count(nodeOf.begin(), nodeOf.end(), nodeOf[static_cast<size_t>(rank_)]));
  shape_ = agreeShape(peers_, nodeOf, nnodes_);
  // The registered-buffer table serves only ranks of this host in other
  // processes (which read the descriptor from the peer info just sent).
  bool tableUsed = false;
  for (int r = 0; r < nranks_ && peerBuffers_ != nullptr; ++r)
    tableUsed = tableUsed ||
                (nodeOf[static_cast<size_t>(r)] == nodeOf[static_cast<size_t>(rank_)] && !sameProcess(r));
  if (!tableUsed) peerBuffers_.reset();
  // The load-store team: every node holds localRanks_ ranks in one block of
  // consecutive ranks (node j: ranks j*localRanks_ on), and no rank keeps
  // its GPU memory to itself.
  lsaSize_ = nranks_ % localRanks_ == 0 ? localRanks_ : 1;
  for (int r = 0; r < nranks_ && lsaSize_ > 1; ++r) {
    if (nodeOf[static_cast<size_t>(r)] != r / lsaSize_ || peers_[static_cast<size_t>(r)].p2pDisabled != 0) {
      lsaSize_ = 1;
    }
  }
  ll128_ = backend_ == Backend::Gpu && nnodes_ == 1 && nranks_ > 1 &&
           std::all_of(peers_.begin(), peers_.end(), [](const PeerInfo& p) { return p.ll128 != 0; });
  if (backend_ == Backend::Gpu && nranks_ > 1) {
    const bool noP2p =
        std::any_of(peers_.begin(), peers_.end(), [](const PeerInfo& p) { return p.p2pDisabled != 0; });
    BRAID_INFO(
        kLogInit, "LL128 %s",
        ll128_        ? "on: one node, every GPU an sm_90 with NVLink to the node's others"
        : nnodes_ > 1 ? "off: ranks on several hosts"
        : noP2p       ? "off: NCCL_P2P_DISABLE (or NCCL_P2P_LEVEL=LOC) is set on some rank"
                : "off: some rank's GPU is not an sm_90 (cuda build) with NVLink to every GPU of the node");
    if (me.p2pRead != 0 && me.p2pDisabled == 0) {
      BRAID_INFO(kLogInit | kLogP2p,
                 "P2P read mode: connectors to this host's GPUs whose ranks want it too keep their Simple "
                 "slots in the sender's memory (NCCL_P2P_READ_ENABLE)");
    }
    if (me.p2pDisabled != 0) {
      BRAID_INFO(kLogInit | kLogP2p,
                 "NCCL_P2P_DISABLE or NCCL_P2P_LEVEL=LOC: connectors to the GPUs of this host go through "
                 "host memory");
    }
  }
  std::vector<PeerPlace> places(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = peers_[static_cast<size_t>(r)];
    const bool sameHost = p.hostHash == me.hostHash;
    places[static_cast<size_t>(r)] = {sameHost, sameProcess(r),
                                      sameHost && p.pidNamespace != 0 && p.pidNamespace == me.pidNamespace,
                                      p.pid, describePeer(p)};
  }
  // Connectors are made on first use, during operations: their waits end
  // within the stall timeout too (Bootstrap::StallBound).
  connectors_ = std::make_unique<ConnectorFactory>(bootstrap_.get(), std::move(places), &abort_,
                                                   std::min(bootstrapTimeoutSeconds(), stallTimeoutSeconds()));
  connectors_->useNet(config_.netName);
  if (backend_ == Backend::Gpu) {
    connectors_->preferNics(nearNics_, strCat("GPU ", me.busId));
  } else {
    connectors_->preferNicsOnNuma(me.numaNode);
  }
  // A rank waits on its host's peers through shared memory alone (host
  // memory, or GPU memory the peer maps): a peer's process that ends must
  // fail those waits at once. Watched from here, so that a rank that dies
  // before the first collective is seen too.
  connectors_->watchPeerProcesses();
  bootstrap_->watchPeerEnded(connectors_->peerEnded());
  BRAID_CHECK(connectors_->init());
  // Host ranks of one node chain by NUMA node, so a ring crosses the socket
  // interconnect once each way however the launcher bound them; GPU ranks in
  // the order of the topology's rings (fastest links, spread over channels).
  std::vector<std::vector<int>> keys(static_cast<size_t>(nranks_));
  int nch = std::min(shape_.channels, kMaxChannels);
  if (backend_ == Backend::Gpu) {
    nch = 1;
    for (int r = 0; r < nranks_; ++r) {
      const PeerInfo& p = peers_[static_cast<size_t>(r)];
      keys[static_cast<size_t>(r)].assign(p.ringPos, p.ringPos + std::clamp(p.nRingPos, 0, kMaxChannels));
      nch = std::max(nch, static_cast<int>(keys[static_cast<size_t>(r)].size()));
    }
  } else {
    for (int r = 0; r < nranks_; ++r)
      keys[static_cast<size_t>(r)] = {peers_[static_cast<size_t>(r)].numaNode};
  }
  schedule_ = commSchedule(nodeOf, keys, nch);
  channels_ = std::make_unique<ChannelSet>(bootstrap_.get(), schedule_, connectors_.get(), p2pSlotBytes());
  logSchedule();
  return okStatus();
}

int Communicator::searchLocalTopology(const std::string& busId, bool* nvlinkToAll) {
  *nvlinkToAll = false;
  // The topology search inside this node (GPU backend); also honours
  // NCCL_TOPO_FILE and writes NCCL_TOPO_DUMP_FILE.
  TopoSystem sys;
  std::vector<std::string> notes;
  SearchOptions opt;
  opt.ringsOverride = ringsOverride();
  Status s = localTopology(&sys, &notes);
  if (s.ok() && sys.nGpus() > 0) s = searchSchedule(sys, opt, &topoSchedule_);
  if (!s.ok()) {
    BRAID_INFO(kLogGraph, "topology search skipped: %s", s.message().c_str());
    return -1;
  }
  for (int g = 0; g < sys.nGpus(); ++g) {
    if (strcasecmp(sys.gpu(g).busId.c_str(), busId.c_str()) == 0) {
      nearNics_ = nicsNearestFirst(sys, g);
      *nvlinkToAll = true;
      for (int h = 0; h < sys.nGpus(); ++h) {
        *nvlinkToAll = *nvlinkToAll && (h == g || sys.gpuPath(g, h).type == PathType::Nvl);
        if (h != g) gpuPathRank_[toUpper(sys.gpu(h).busId)] = pathRank(sys.gpuPath(g, h).type);
      }
      return g;
    }
  }
  BRAID_INFO(kLogGraph, "GPU %s is not in the topology: its ranks chain in rank order", busId.c_str());
  return -1;
}

void Communicator::logSchedule() const {
  if (!logEnabled(LogLevel::Info, kLogInit | kLogGraph)) return;
  for (const std::string& line : scheduleLogLines(schedule_, {rank_})) {
    // As NCCL: rank 0 lists the channels, every rank its trees.
    if (line.rfind("Channel", 0) == 0 && rank_ != 0) continue;
    BRAID_INFO(kLogInit, "%s", line.c_str());
  }
  if (topoSchedule_.nChannels() == 0) return;
  for (const std::string& line : scheduleLogLines(topoSchedule_, {})) {
    if (line.rfind("Channel", 0) == 0 && rank_ == 0) {
      BRAID_INFO(kLogGraph, "topology (%s; GPU rings follow it) %s", topoSchedule_.pattern.c_str(),
                 line.c_str());
    }
  }
}

Status checkPeers(const std::vector<PeerInfo>& peers, int myRank) {
  const PeerInfo& me = peers[static_cast<size_t>(myRank)];
  for (size_t r = 0; r < peers.size(); ++r) {
    const PeerInfo& p = peers[r];
    if (p.rank != static_cast<int>(r)) return internalError("peer info slot ", r, " holds rank ", p.rank);
    for (int i = 0; i < kSharedSettingCount; ++i) {
      if (p.settingHash[i] == me.settingHash[i]) continue;
      const ParamBase* param = ParamRegistry::instance().find(kSharedSettings[i]);
      const std::string var = param == nullptr || param->sourceVariable().empty()
                                  ? strCat("NCCL_", kSharedSettings[i])
                                  : param->sourceVariable();
      return invalidUsage("ranks disagree on ", var, ": ", describePeer(me), " has '", sharedSettingValue(i), "', ",
                          describePeer(p), " another value; each rank's collectives are laid out from it, so "
                          "set it alike on every rank (or on none)");
    }
    if (p.braidVersion != me.braidVersion) {
      return invalidUsage("Braid versions differ: ", describePeer(p), " runs ", p.braidVersion / 10000, ".",
                          p.braidVersion / 100 % 100, ".", p.braidVersion % 100, ", ", describePeer(me), " runs ",
                          me.braidVersion / 10000, ".", me.braidVersion / 100 % 100, ".", me.braidVersion % 100,
                          "; use one Braid build for the whole job");
    }
    if (p.backend != me.backend) {
      return invalidUsage("backends differ: ", describePeer(p), " uses the ",
                          backendName(static_cast<Backend>(p.backend)), " backend, ", describePeer(me), " the ",
                          backendName(static_cast<Backend>(me.backend)),
                          " backend; set BRAID_BACKEND the same on every rank");
    }
    if (me.backend == static_cast<uint32_t>(Backend::Gpu) && static_cast<int>(r) != myRank &&
        p.hostHash == me.hostHash && std::strcmp(p.busId, me.busId) == 0 && !gpuSharingAllowed()) {
      return invalidUsage(describePeer(p), " and ", describePeer(me), " use the same GPU (", me.busId,
                          "); give every rank its own GPU (or set BRAID_SHARE_GPU=1 to test on fewer GPUs)");
    }
  }
  return okStatus();
}

// ---------------------------------------------------------------- registry

void registerComm(Communicator* comm) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  registry().insert(comm);
}

bool unregisterComm(Communicator* comm) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  gUnregistrations.fetch_add(1);  // before the caller's waitUnused reads users_
  return registry().erase(comm) == 1;
}

void Communicator::waitUnused() const {
  while (users_.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

Status CommUse::acquire(Communicator* comm) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  if (registry().count(comm) == 0) {
    return invalidUsage("the communicator was destroyed or aborted while the operation was pending");
  }
  comm->users_.fetch_add(1);
  comm_ = comm;
  return okStatus();
}

Status lookupComm(ncclComm_t handle, Communicator** out, bool needReady, CommUse* use) {
  if (handle == nullptr) return invalidArgument("argument 'comm' is NULL");
  Communicator* comm = static_cast<Communicator*>(handle);
  bool live = false;
  if (tLastLive.comm == comm && tLastLive.unregistrations == gUnregistrations.load()) {
    live = true;
    if (use != nullptr && use->comm_ == nullptr) {
      // Marked in use, then the count read again: an unregistration that
      // this read misses comes after it, and its waitUnused sees the mark
      // (both sides sequentially consistent).
      comm->users_.fetch_add(1);
      if (tLastLive.unregistrations == gUnregistrations.load()) {
        use->comm_ = comm;
      } else {
        comm->users_.fetch_sub(1);
        live = false;
      }
    }
  }
  if (!live) {
    std::lock_guard<std::mutex> lock(gRegistryMutex);
    if (registry().count(comm) == 0) {
      return invalidArgument("argument 'comm' (", static_cast<void*>(handle),
                             ") is not a live communicator: it was destroyed or aborted, or never created");
    }
    if (use != nullptr && use->comm_ == nullptr) {
      comm->users_.fetch_add(1);
      use->comm_ = comm;
    }
    tLastLive = {comm, gUnregistrations.load()};
  }
  if (needReady) {
    if (comm->forks_ != gForks.load(std::memory_order_relaxed)) {
      return invalidUsage("the communicator belongs to process ", comm->creatorPid_, " and this process (",
                          getpid(),
                          ") is a fork of it: a communicator cannot be used "
                          "across fork(); destroy it here and make a new one in this process");
    }
    ncclResult_t state = comm->asyncError();
    // The codes are NCCL's (ncclCommEnsureReady): ncclInvalidArgument for a
    // communicator not ready yet, the failure's own code for one in error.
    if (state == ncclInProgress) {
      return invalidArgument("the communicator is still initializing (non-blocking init): poll "
                             "ncclCommGetAsyncError until it returns ncclSuccess");
    }
    if (state != ncclSuccess) {
      const std::string cause = comm->asyncErrorCause();
      return Status(state, strCat("the communicator is in error (", ncclGetErrorString(state), ")",
                                  cause.empty() ? std::string() : strCat(" since: ", cause),
                                  "; destroy or abort it"));
    }
    if (comm->finalized()) return invalidUsage("the communicator was finalized (ncclCommFinalize)");
  }
  *out = comm;
  return okStatus();
}

std::string commLastError(ncclComm_t handle) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  Communicator* comm = static_cast<Communicator*>(handle);
  if (handle == nullptr || registry().count(comm) == 0) return "";
  return comm->lastError();
}

void recordCommError(ncclComm_t handle, const std::string& text) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  Communicator* comm = static_cast<Communicator*>(handle);
  if (handle != nullptr && registry().count(comm) != 0) comm->recordError(text);
}

}  // namespace braid
