// The net transport: connectors to ranks on other hosts, served by the
// proxy (transports/net/proxy.h) over the chosen Net (transports/net/net.h).
//
// Each end keeps its connector in local host memory (for a GPU connector,
// host memory its GPU maps: NetEnd::useDeviceBlock); the proxy of this
// process moves the slots between it and the network. Setting up a
// connector takes the same three steps as the shm transport, in the same
// order across all connectors set up together; step 1 never waits:
//   1. receiver: netPostRecv    (listen, send the handle over the bootstrap)
//   2. sender:   netOpenSend    (receive the handle, connect, start serving)
//   3. receiver: netFinishRecv  (accept, start serving)
// Called by one thread per rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bootstrap/bootstrap.h"
#include "transports/net/net.h"
#include "transports/net/proxy.h"
#include "transports/transport.h"

namespace braid {

struct NetSetup {
  Net* net = nullptr;
  int dev = 0;
  double timeoutSec = 300;                   // bound on accept
  const std::atomic<bool>* abort = nullptr;  // ends a waiting accept
  std::shared_ptr<NetErrorSink> sink;        // where the proxy records a connector's failure
};

class NetEnd : public ConnectorEnd {
 public:
  NetEnd() = default;
  ~NetEnd() override;
  NetEnd(const NetEnd&) = delete;
  NetEnd& operator=(const NetEnd&) = delete;

  // Serve a GPU connector's block (owned by the caller, which frees it only
  // after this end is destroyed) instead of a host connector. Called before
  // the setup steps; `conn` then stays unused.
  void useDeviceBlock(const DevNetBlock& block) { block_ = block; }

 private:
  friend Status netPostRecv(bootstrap::Bootstrap*, const NetSetup&, int, const std::string&, uint32_t, size_t,
                            NetEnd*);
  friend Status netOpenSend(bootstrap::Bootstrap*, const NetSetup&, int, const std::string&, uint32_t, size_t,
                            NetEnd*);
  friend Status netFinishRecv(bootstrap::Bootstrap*, const NetSetup&, int, const std::string&, uint32_t,
                              NetEnd*);
  Status allocate(size_t slotBytes);

  DevNetBlock block_;  // a GPU connector's block, when block_.base is set
  void* memory_ = nullptr;
  Net* net_ = nullptr;
  NetListenComm* listen_ = nullptr;  // between steps 1 and 3
  NetProxy* proxy_ = nullptr;
  uint64_t proxyId_ = 0;
};

// `peerName` ("rank 3 (host b)") names the peer in errors; `tag` tells apart
// connectors between the same two ranks (both ends pass the same one).
Status netPostRecv(bootstrap::Bootstrap* bs, const NetSetup& setup, int peer, const std::string& peerName,
                   uint32_t tag, size_t slotBytes, NetEnd* out);
Status netOpenSend(bootstrap::Bootstrap* bs, const NetSetup& setup, int peer, const std::string& peerName,
                   uint32_t tag, size_t slotBytes, NetEnd* out);
Status netFinishRecv(bootstrap::Bootstrap* bs, const NetSetup& setup, int peer, const std::string& peerName,
                     uint32_t tag, NetEnd* io);

}  // namespace braid
