#include "core/init.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "core/group.h"
#include "platform/gpu.h"
#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"
#include "util/threads.h"

#if defined(BRAID_GPU_CUDA) || defined(BRAID_GPU_HIP)
#include "platform/gpu_runtime.h"
#endif

static_assert(braid::kMaxCommRanks == static_cast<int>(braid::bootstrap::kMaxRanks),
              "the API's rank limit is the bootstrap's");

namespace braid {
namespace {

Status randomSecret(bootstrap::Secret* secret) {
  size_t got = 0;
  while (got < secret->size()) {
    ssize_t n = getrandom(secret->data() + got, secret->size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoError("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  return okStatus();
}

// Same value in every process that sees the same NCCL_COMM_ID.
bootstrap::Secret derivedSecret(const std::string& text) {
  bootstrap::Secret s{};
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t h = 0xcbf29ce484222325ull ^ (i * 0x9e3779b97f4a7c15ull);
    for (char c : text) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    std::memcpy(s.data() + i, &h, 8);
  }
  return s;
}

int currentDevice(Backend backend) {
#if defined(BRAID_GPU_CUDA) || defined(BRAID_GPU_HIP)
  if (backend == Backend::Gpu) {
    int dev = 0;
    if (hipGetDevice(&dev) == hipSuccess) return dev;
    (void)hipGetLastError();
  }
#endif
  (void)backend;
  return -1;
}

Status setDevice(int device) {
#if defined(BRAID_GPU_CUDA) || defined(BRAID_GPU_HIP)
  if (device >= 0) {
    hipError_t err = hipSetDevice(device);
    if (err != hipSuccess) return invalidArgument("cannot use GPU ", device, ": ", hipGetErrorString(err));
  }
#endif
  (void)device;
  return okStatus();
}

// Runs init and signals the outcome. Signalling is the last thing that
// touches `comm`: after it, an aborter may destroy it.
void runInit(Communicator* comm, const std::vector<bootstrap::UniqueIdData>& ids,
             const std::shared_ptr<InitOutcome>& outcome) {
  Status s = setDevice(comm->device());
  if (s.ok()) s = catchExceptions([&] { return comm->initialize(ids); });
  if (!s.ok()) BRAID_WARN("rank %d: init failed: %s", comm->rank(), s.message().c_str());
  comm->setAsyncError(s);  // a failure is also the communicator's last error
  std::lock_guard<std::mutex> lock(outcome->mutex);
  outcome->status = s;
  outcome->done = true;
  outcome->cv.notify_all();
}

// The handle is stored atomically (release): a blocking init publishes it
// before it waits, and another thread may read it to call ncclCommAbort.
void publishHandle(ncclComm_t* out, ncclComm_t value) { __atomic_store_n(out, value, __ATOMIC_RELEASE); }

void destroyNow(Communicator* comm) {
  comm->stopInit(/*abort=*/false);
  delete static_cast<ncclComm*>(comm);
}

}  // namespace

Status getUniqueId(ncclUniqueId* id) {
  bootstrap::UniqueIdData data;
  std::string commId = commIdSetting();
  if (!commId.empty()) {
    BRAID_CHECK(SocketAddress::parse(commId, &data.root).withContext("NCCL_COMM_ID"));
    data.flags = bootstrap::kIdFlagRootOnRank0;
    data.secret = derivedSecret(commId);
  } else {
    std::vector<NetInterface> nics;
    BRAID_CHECK(findInterfaces(&nics));
    SocketAddress bind = nics.front().address;
    bind.setPort(0);
    BRAID_CHECK(randomSecret(&data.secret));
    // The root lives as long as init may take; it ends once every rank joined.
    BRAID_CHECK(bootstrap::startRoot(bind, data.secret, bootstrapTimeoutSeconds(), &data.root));
    BRAID_INFO(kLogBootstrap, "unique id: root on %s (%s)", data.root.toString().c_str(), nics.front().name.c_str());
  }
  bootstrap::encodeUniqueId(data, id);
  return okStatus();
}

Status commInitRank(ncclComm_t* out, int nranks, const std::vector<ncclUniqueId>& rawIds, int rank,
                    const CommConfig& config) {
  publishHandle(out, nullptr);
  std::vector<bootstrap::UniqueIdData> ids(rawIds.size());
  for (size_t i = 0; i < rawIds.size(); ++i) {
    BRAID_CHECK(bootstrap::decodeUniqueId(rawIds[i], &ids[i]).withContext(strCat("unique id ", i)));
  }
  Backend backend;
  BRAID_CHECK(selectBackend(&backend));
  auto* comm = new ncclComm(rank, nranks, currentDevice(backend), config);
  registerComm(comm);
  publishHandle(out, comm);
  std::shared_ptr<InitOutcome> outcome = comm->outcome();
  if (groupDepth() > 0 || !config.blocking) {
    std::thread thread;
    Status started = startThread("the communicator's init thread", &thread,
                                 [comm, ids = std::move(ids), outcome] { runInit(comm, ids, outcome); });
    if (!started.ok()) {
      {
        std::lock_guard<std::mutex> lock(outcome->mutex);
        outcome->done = true;  // nothing runs: destroying it must not wait
      }
      if (unregisterComm(comm)) destroyNow(comm);
      publishHandle(out, nullptr);
      return started;
    }
    comm->setInitThread(std::move(thread));
    if (groupDepth() > 0) {  // ncclGroupEnd waits for it (group.h)
      groupDeferInit(comm, config.blocking != 0);
      if (config.blocking) return okStatus();
    }
    return Status(ncclInProgress, "initialization continues in the background");
  }
  // Blocking: init runs on this thread; another thread may abort it through
  // the already published handle.
  runInit(comm, ids, outcome);
  Status result;
  {
    std::lock_guard<std::mutex> lock(outcome->mutex);
    result = outcome->status;
  }
  if (result.ok()) return okStatus();
  // Failed: whoever unregisters owns the communicator. If an abort got there
  // first, it destroys it; we only report.
  if (unregisterComm(comm)) destroyNow(comm);
  publishHandle(out, nullptr);
  return result;
}

Status commInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  std::fill(comms, comms + ndev, nullptr);
  ncclUniqueId id;
  BRAID_CHECK(getUniqueId(&id));
  std::vector<ncclUniqueId> ids{id};
  std::vector<Status> results(static_cast<size_t>(ndev));
  BRAID_CHECK(runTogether(static_cast<size_t>(ndev), "a thread for ncclCommInitAll's ranks", [&](size_t i) {
    int device = devlist ? devlist[i] : static_cast<int>(i);
    Backend backend = Backend::Host;
    Status s = selectBackend(&backend);
    if (s.ok() && backend == Backend::Gpu) s = setDevice(device);
    if (s.ok()) s = commInitRank(&comms[i], ndev, ids, static_cast<int>(i), CommConfig());
    results[i] = s;
  }));
  for (int i = 0; i < ndev; ++i) {
    if (!results[static_cast<size_t>(i)].ok()) {
      for (int j = 0; j < ndev; ++j) {
        if (comms[j] != nullptr) {
          commDestroy(comms[j]).ignore();
          comms[j] = nullptr;
        }
      }
      return results[static_cast<size_t>(i)].withContext(strCat("ncclCommInitAll rank ", i));
    }
  }
  // Every rank has its table: the root is done, join it now.
  bootstrap::UniqueIdData data;
  if (bootstrap::decodeUniqueId(id, &data).ok()) bootstrap::awaitRoot(data.root);
  return okStatus();
}

namespace {

constexpr uint32_t kShrinkTag = 0x53484b00u;  // the new id, from the first remaining rank

// Joins a communicator made from a parent (split, shrink) whose id its new
// rank 0 made.
Status initChild(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const CommConfig& cfg) {
  const std::vector<ncclUniqueId> ids{id};
  Status init = commInitRank(out, nranks, ids, rank, cfg);
  if (rank == 0 && init.ok() && groupDepth() == 0 && cfg.blocking) {
    // Init is complete, so every member has the new table and the root this
    // rank started is done: join its thread now rather than leave it for exit.
    bootstrap::UniqueIdData data;
    if (bootstrap::decodeUniqueId(id, &data).ok()) bootstrap::awaitRoot(data.root);
  }
  return init;
}

Status splitNow(Communicator* parent, int color, int key, ncclComm_t* out, const CommConfig* config) {
  bootstrap::Bootstrap* bs = parent->bootstrap();
  int n = parent->nranks();
  struct Entry {
    int32_t color, key, rank;
  };
  std::vector<Entry> all(static_cast<size_t>(n));
  all[static_cast<size_t>(parent->rank())] = {color, key, parent->rank()};
  BRAID_CHECK(bs->allGather(all.data(), sizeof(Entry)).withContext("ncclCommSplit: exchanging colors"));

  std::vector<Entry> mine;
  for (const Entry& e : all) {
    if (e.color == color && color != NCCL_SPLIT_NOCOLOR) mine.push_back(e);
  }
  std::sort(mine.begin(), mine.end(),
            [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
  int newRank = -1;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].rank == parent->rank()) newRank = static_cast<int>(i);
  }
  // The first member of each color creates the new communicator's id.
  std::vector<ncclUniqueId> ids(static_cast<size_t>(n));
  std::memset(ids.data(), 0, ids.size() * sizeof(ncclUniqueId));
  Status created = okStatus();
  if (newRank == 0) created = getUniqueId(&ids[static_cast<size_t>(parent->rank())]);
  // Everyone must take part in the exchange even if creating the id failed,
  // or the others would wait for us; the failure is reported after it.
  BRAID_CHECK(bs->allGather(ids.data(), sizeof(ncclUniqueId)).withContext("ncclCommSplit: exchanging ids"));
  BRAID_CHECK(created);
  if (color == NCCL_SPLIT_NOCOLOR) return okStatus();

  BRAID_INFO(kLogInit, "split: parent rank %d color %d key %d -> rank %d of %zu", parent->rank(), color, key,
             newRank, mine.size());
  return initChild(out, static_cast<int>(mine.size()), ids[static_cast<size_t>(mine[0].rank)], newRank,
                   config ? *config : parent->config());
}

Status shrinkNow(Communicator* parent, const std::vector<int>& remain, int nexclude, ncclComm_t* out,
                 const CommConfig* config, bool abortParent) {
  const int n = parent->nranks();
  const int newRank =
      static_cast<int>(std::find(remain.begin(), remain.end(), parent->rank()) - remain.begin());
  // The first remaining rank makes the id and sends it to each other one,
  // point to point over the parent's bootstrap: no excluded rank is asked
  // for anything. It sends even when making the id failed, so that nobody
  // waits for it; the others then fail with its reason.
  struct IdMessage {
    int32_t ok;
    ncclUniqueId id;
  };
  IdMessage msg;
  std::memset(&msg, 0, sizeof(msg));
  bootstrap::Bootstrap* bs = parent->bootstrap();
  if (newRank == 0) {
    Status created = getUniqueId(&msg.id);
    msg.ok = created.ok() ? 1 : 0;
    for (size_t i = 1; i < remain.size(); ++i) {
      BRAID_CHECK(bs->send(remain[i], kShrinkTag, &msg, sizeof(msg))
                      .withContext(strCat("ncclCommShrink: sending the new id to rank ", remain[i])));
    }
    BRAID_CHECK(created.withContext("ncclCommShrink: making the new communicator's id"));
  } else {
    BRAID_CHECK(bs->recv(remain[0], kShrinkTag, &msg, sizeof(msg))
                    .withContext(strCat("ncclCommShrink: receiving the new id from rank ", remain[0])));
    if (msg.ok == 0) {
      return internalError("ncclCommShrink: rank ", remain[0], " could not make the new communicator's id");
    }
  }
  if (abortParent) parent->abortOperations();
  BRAID_INFO(kLogInit, "shrink: parent rank %d of %d, %d excluded -> rank %d of %zu%s", parent->rank(), n,
             nexclude, newRank, remain.size(), abortParent ? " (parent's operations aborted)" : "");
  return initChild(out, static_cast<int>(remain.size()), msg.id, newRank,
                   config ? *config : parent->config());
}

}  // namespace

// Inside a group, a split or shrink runs at ncclGroupEnd (as NCCL's), each
// parent on its own thread there: one thread may split or shrink every
// communicator it drives, whose exchanges wait for one another. The handle
// is set then.
Status commSplit(Communicator* parent, int color, int key, ncclComm_t* out, const CommConfig* config) {
  *out = nullptr;
  if (groupDepth() == 0) return splitNow(parent, color, key, out, config);
  std::optional<CommConfig> cfg;
  if (config != nullptr) cfg = *config;
  groupDeferTask(parent, [=] { return splitNow(parent, color, key, out, cfg ? &*cfg : nullptr); });
  return okStatus();
}

Status commShrink(Communicator* parent, const int* exclude, int nexclude, ncclComm_t* out,
                  const CommConfig* config, bool abortParent) {
  *out = nullptr;
  const int n = parent->nranks();
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int i = 0; i < nexclude; ++i) {
    const int r = exclude[i];
    if (r < 0 || r >= n) {
      return invalidArgument("argument 'excludeRanksList' holds rank ", r, "; the communicator has ranks 0..",
                             n - 1);
    }
    if (excluded[static_cast<size_t>(r)]) {
      return invalidArgument("argument 'excludeRanksList' holds rank ", r, " twice");
    }
    excluded[static_cast<size_t>(r)] = true;
  }
  if (excluded[static_cast<size_t>(parent->rank())]) {
    return invalidUsage("rank ", parent->rank(),
                        " is in 'excludeRanksList': only the ranks that remain call ncclCommShrink");
  }
  std::vector<int> remain;
  for (int r = 0; r < n; ++r)
    if (!excluded[static_cast<size_t>(r)]) remain.push_back(r);
  if (groupDepth() == 0) return shrinkNow(parent, remain, nexclude, out, config, abortParent);
  std::optional<CommConfig> cfg;
  if (config != nullptr) cfg = *config;
  groupDeferTask(parent, [=] { return shrinkNow(parent, remain, nexclude, out, cfg ? &*cfg : nullptr, abortParent); });
  return okStatus();
}

Status commFinalize(Communicator* comm) {
  if (comm->revoked()) {
    return invalidArgument(
        "argument 'comm' was revoked (ncclCommRevoke): it cannot be finalized; destroy it");
  }
  if (comm->finalized()) return invalidUsage("the communicator was already finalized");
  comm->markFinalized();
  return okStatus();
}

Status commRevoke(Communicator* comm) {
  BRAID_CHECK(comm->revoke());
  // Quiescent already; a non-blocking communicator says so as NCCL's does.
  return comm->config().blocking
             ? okStatus()
             : Status(ncclInProgress, "revoked; ncclCommGetAsyncError says when it is quiescent");
}

Status commDestroy(Communicator* comm) {
  if (!unregisterComm(comm)) return invalidArgument("argument 'comm' is not a live communicator");
  comm->waitUnused();
  destroyNow(comm);
  return okStatus();
}

Status commAbort(Communicator* comm) {
  if (!unregisterComm(comm)) return invalidArgument("argument 'comm' is not a live communicator");
  comm->stopInit(/*abort=*/true);
  comm->waitUnused();  // operations on other threads see the flag and return
  delete static_cast<ncclComm*>(comm);
  return okStatus();
}

}  // namespace braid
