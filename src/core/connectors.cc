#include "core/connectors.h"

#include <signal.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>

#include "transports/shm/shm_transport.h"
#include "util/log.h"
#include "util/sysfs.h"

namespace braid {

Status ConnectorFactory::init() {
  net_.timeoutSec = timeoutSec_;
  net_.abort = abort_;
  net_.sink = sink_;
  int others = 0;
  for (const PeerPlace& p : peers_) others += p.sameHost ? 0 : 1;
  if (others > 0) ended_ = sink_->peerFlags(peers_.size());  // raised by goodbyes
  if (others == 0) {
    BRAID_INFO(kLogNet, "transport: shared memory for every peer (all ranks on this host)");
    return okStatus();
  }
  BRAID_CHECK(selectNet(&net_.net, netName_).withContext(strCat(others, " ranks run on other hosts")));
  std::vector<NetProperties> devs(static_cast<size_t>(std::max(net_.net->devices(), 0)));
  for (size_t d = 0; d < devs.size(); ++d) BRAID_CHECK(net_.net->properties(static_cast<int>(d), &devs[d]));
  if (devs.empty()) return internalError(net_.net->name(), " net has no device");
  if (nearNics_.empty() && numa_ >= 0) {
    for (const NetProperties& d : devs) {
      if (pciNumaNode(d.busId) == numa_) nearNics_.push_back(d.busId);
    }
    near_ = strCat("this rank's CPUs (NUMA node ", numa_, ")");
  }
  net_.dev = nearestNetDevice(devs, nearNics_);
  std::string why = strCat("the NIC nearest ", near_);
  if (net_.dev < 0) {
    why = near_.empty() ? "its first device" : strCat("its first device, none being near ", near_);
    net_.dev = 0;
  }
  const NetProperties& props = devs[static_cast<size_t>(net_.dev)];
  BRAID_INFO(
      kLogNet,
      "transport: shared memory for the %zu ranks on this host, %s over %s (%s; %s) for the %d on other "
      "hosts (their host ids differ)",
      peers_.size() - static_cast<size_t>(others), net_.net->name(), props.name.c_str(),
      props.address.c_str(), why.c_str(), others);
  return okStatus();
}

void ConnectorFactory::watchPeerProcesses() {
  std::vector<pid_t> pids;
  std::vector<int> ranks;
  for (size_t r = 0; r < peers_.size(); ++r) {
    const PeerPlace& p = peers_[r];
    if (p.sameHost && p.samePidNamespace && !p.inProcess) {
      pids.push_back(p.pid);
      ranks.push_back(static_cast<int>(r));
    }
  }
  if (pids.empty()) return;
  std::atomic<bool>* ended = ended_ = sink_->peerFlags(peers_.size());
  std::shared_ptr<PeerEndHook> hook = onEnd_;
  Status s;
  while (true) {
    s = ProcessWatch::start(
        pids,
        [ended, ranks, hook](size_t i) {
          ended[ranks[i]].store(true, std::memory_order_release);
          std::lock_guard<std::mutex> lock(hook->mutex);
          if (hook->f) hook->f(ranks[i]);
        },
        &processWatch_);
    if (s.ok() || s.code() != ncclRemoteError) break;
    // A peer's process is gone already (a rank may end right after init):
    // it counts as ended, and the others are watched.
    size_t kept = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (::kill(pids[i], 0) != 0 && errno == ESRCH) {
        ended[ranks[i]].store(true, std::memory_order_release);
      } else {
        pids[kept] = pids[i];
        ranks[kept++] = ranks[i];
      }
    }
    if (kept == pids.size()) break;
    pids.resize(kept);
    ranks.resize(kept);
    if (pids.empty()) return;
  }
  if (!s.ok()) {
    if (!anyNet_) ended_ = nullptr;  // nothing raises these
    BRAID_INFO(kLogInit,
               "not watching the processes of this host's peers (%s): a wait on a rank that died ends at "
               "BRAID_STALL_TIMEOUT",
               s.message().c_str());
  }
}

void ConnectorFactory::callOnPeerEnd(std::function<void(int)> f) {
  std::lock_guard<std::mutex> lock(onEnd_->mutex);
  onEnd_->f = std::move(f);
  if (ended_ == nullptr) return;
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (ended_[r].load(std::memory_order_acquire)) onEnd_->f(static_cast<int>(r));
  }
}

void ConnectorFactory::stopCallingOnPeerEnd() {
  std::lock_guard<std::mutex> lock(onEnd_->mutex);
  onEnd_->f = nullptr;
}

int nearestNetDevice(const std::vector<NetProperties>& devs, const std::vector<std::string>& busIds) {
  for (const std::string& bus : busIds) {
    for (size_t d = 0; d < devs.size(); ++d) {
      if (!bus.empty() && strcasecmp(devs[d].busId.c_str(), bus.c_str()) == 0) return static_cast<int>(d);
    }
  }
  return -1;
}

const char* ConnectorFactory::transportName(int peer) const {
  if (usesNet(peer)) return net_.net != nullptr ? net_.net->name() : "net";
  return peers_[static_cast<size_t>(peer)].inProcess ? "process memory" : "shared memory";
}

Status ConnectorFactory::postRecv(int peer, uint32_t tag, size_t slotBytes,
                                  std::unique_ptr<ConnectorEnd>* out) {
  const PeerPlace& p = peers_[static_cast<size_t>(peer)];
  if (usesNet(peer)) {
    auto end = std::make_unique<NetEnd>();
    BRAID_CHECK(netPostRecv(bs_, net_, peer, p.name, tag, slotBytes, end.get()));
    *out = std::move(end);
    return okStatus();
  }
  auto end = std::make_unique<ShmEnd>();
  BRAID_CHECK(shmPostRecv(bs_, peer, tag, slotBytes, p.inProcess, p.samePidNamespace, end.get()));
  *out = std::move(end);
  return okStatus();
}

Status ConnectorFactory::openSend(int peer, uint32_t tag, size_t slotBytes,
                                  std::unique_ptr<ConnectorEnd>* out) {
  const PeerPlace& p = peers_[static_cast<size_t>(peer)];
  if (usesNet(peer)) {
    auto end = std::make_unique<NetEnd>();
    BRAID_CHECK(netOpenSend(bs_, net_, peer, p.name, tag, slotBytes, end.get()));
    *out = std::move(end);
    return okStatus();
  }
  auto end = std::make_unique<ShmEnd>();
  BRAID_CHECK(shmOpenSend(bs_, peer, tag, slotBytes, end.get()));
  *out = std::move(end);
  return okStatus();
}

Status ConnectorFactory::postRecvDevice(int peer, uint32_t tag, const DevNetBlock& block,
                                        std::unique_ptr<NetEnd>* out) {
  auto end = std::make_unique<NetEnd>();
  end->useDeviceBlock(block);
  BRAID_CHECK(
      netPostRecv(bs_, net_, peer, peers_[static_cast<size_t>(peer)].name, tag, block.slotBytes, end.get()));
  *out = std::move(end);
  return okStatus();
}

Status ConnectorFactory::openSendDevice(int peer, uint32_t tag, const DevNetBlock& block,
                                        std::unique_ptr<NetEnd>* out) {
  auto end = std::make_unique<NetEnd>();
  end->useDeviceBlock(block);
  BRAID_CHECK(
      netOpenSend(bs_, net_, peer, peers_[static_cast<size_t>(peer)].name, tag, block.slotBytes, end.get()));
  *out = std::move(end);
  return okStatus();
}

Status ConnectorFactory::finishRecv(int peer, uint32_t tag, ConnectorEnd* io) {
  const PeerPlace& p = peers_[static_cast<size_t>(peer)];
  if (usesNet(peer)) return netFinishRecv(bs_, net_, peer, p.name, tag, static_cast<NetEnd*>(io));
  return shmFinishRecv(bs_, peer, tag, static_cast<ShmEnd*>(io));
}

}  // namespace braid
