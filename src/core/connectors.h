// Connector setup across transports: the choice, per peer, of the transport
// that carries a connector (shm when the peer shares this host, the net
// transport otherwise), and the three setup steps every transport takes
// (see transports/shm/shm_transport.h and transports/net/net_transport.h):
//   1. receiver: postRecv    2. sender: openSend    3. receiver: finishRecv
// in that order across all the connectors being set up together.
// Used by one thread per rank (the one setting up channels or p2p).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "platform/process_watch.h"
#include "transports/net/net_transport.h"
#include "transports/transport.h"

namespace braid {

struct PeerPlace {
  bool sameHost = true;
  bool inProcess = false;
  bool samePidNamespace = false;  // its pid names its process here too
  int pid = 0;
  std::string name;  // "rank 3 (hostb, pid 42)", for messages
};

// The device of `devs` on the first of `busIds` that one sits on; -1 when
// none does.
int nearestNetDevice(const std::vector<NetProperties>& devs, const std::vector<std::string>& busIds);

class ConnectorFactory {
 public:
  ConnectorFactory(bootstrap::Bootstrap* bs, std::vector<PeerPlace> peers, const std::atomic<bool>* abort,
                   double timeoutSec)
      : bs_(bs), peers_(std::move(peers)), abort_(abort), timeoutSec_(timeoutSec) {
    for (const PeerPlace& p : peers_) anyNet_ |= !p.sameHost;
  }

  // The PCI addresses of the NICs nearest this rank's GPU, nearest first
  // (topology: nicsNearestFirst); `near` names the GPU in the log. Called
  // before init().
  void preferNics(std::vector<std::string> busIds, std::string near) {
    near_ = busIds.empty() ? "" : std::move(near);
    nearNics_ = std::move(busIds);
  }

  // Host ranks: prefer the NICs on NUMA node `numa` (this rank's CPUs; -1:
  // no preference). Called before init().
  void preferNicsOnNuma(int numa) { numa_ = numa; }

  // The communicator's config.netName ("Socket" or "IB"; "": NCCL_NET
  // decides). Called before init().
  void useNet(std::string name) { netName_ = std::move(name); }

  // Chooses the net for peers on other hosts (NCCL_NET) and its device: the
  // first preferred NIC it has, else its device 0. Logs the choice; a no-op
  // when every peer shares this host.
  Status init();

  Status postRecv(int peer, uint32_t tag, size_t slotBytes, std::unique_ptr<ConnectorEnd>* out);
  Status openSend(int peer, uint32_t tag, size_t slotBytes, std::unique_ptr<ConnectorEnd>* out);
  Status finishRecv(int peer, uint32_t tag, ConnectorEnd* io);

  // GPU connectors to a peer on another host: `block` (host memory the GPU
  // maps, owned by the caller) served by the proxy; then finishRecv.
  Status postRecvDevice(int peer, uint32_t tag, const DevNetBlock& block, std::unique_ptr<NetEnd>* out);
  Status openSendDevice(int peer, uint32_t tag, const DevNetBlock& block, std::unique_ptr<NetEnd>* out);

  bool usesNet(int peer) const { return !peers_[static_cast<size_t>(peer)].sameHost; }
  const char* transportName(int peer) const;
  // Watches the processes of the peers that share this host (and PID
  // namespace) but not this process, so that a wait on one whose process
  // ended fails at once rather than at the stall timeout (peerEnded). Where
  // they cannot be watched (no pidfds) it logs why.
  void watchPeerProcesses();
  // Per rank, raised once its process has ended or, for a rank on another
  // host, once it closed its communicator (its net connectors said goodbye:
  // NetErrorSink::failIfClosed); null when neither is watched. Only waits on
  // that rank fail (after asking once more for what it wrote before it
  // ended): ranks may leave at different times.
  const std::atomic<bool>* peerEnded() const { return ended_; }
  // While watching: also calls `f(rank)` for each watched peer whose
  // process ended, now for those that ended already and then from the
  // watching thread as they end (so `f` must be quick; it may be called
  // twice for a rank), until stopCallingOnPeerEnd(). One `f` at a time.
  // The GPU engine passes these on to its kernels.
  void callOnPeerEnd(std::function<void(int)> f);
  void stopCallingOnPeerEnd();

  // The first failure of a net connector ("" / ok when none).
  Status netError() const { return sink_->first(); }
  // Raised (with the others registered) when a net connector fails, so that
  // waits on it end at once instead of at the stall timeout. Nothing to
  // watch (and no lock taken per collective) when every peer shares the host.
  void watch(std::atomic<bool>* flag) {
    if (anyNet_) sink_->watch(flag);
  }
  void unwatch(std::atomic<bool>* flag) {
    if (anyNet_) sink_->unwatch(flag);
  }
  NetErrorSink& errorSink() { return *sink_; }

 private:
  bootstrap::Bootstrap* bs_;
  std::vector<PeerPlace> peers_;
  bool anyNet_ = false;  // a peer on another host
  const std::atomic<bool>* abort_;
  double timeoutSec_;
  NetSetup net_;
  std::vector<std::string> nearNics_;
  std::string near_;
  int numa_ = -1;
  std::string netName_;
  std::shared_ptr<NetErrorSink> sink_ = std::make_shared<NetErrorSink>();
  std::atomic<bool>* ended_ = nullptr;  // per rank, held by sink_; null when not watching
  struct PeerEndHook {
    std::mutex mutex;
    std::function<void(int)> f;  // callOnPeerEnd's
  };
  std::shared_ptr<PeerEndHook> onEnd_ = std::make_shared<PeerEndHook>();
  std::unique_ptr<ProcessWatch> processWatch_;  // after ended_: stops before it goes
};

}  // namespace braid
