#include "transports/net/net_transport.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "platform/socket.h"
#include "util/log.h"

namespace braid {

NetEnd::~NetEnd() {
  if (proxyId_ != 0) proxy_->remove(proxyId_);  // the proxy lets go of the memory first
  if (listen_ != nullptr) net_->closeListen(listen_);
  std::free(memory_);
}

Status NetEnd::allocate(size_t slotBytes) {
  if (block_.base != nullptr) return okStatus();  // the caller's GPU block
  const size_t bytes = (ConnectorMemory::sizeFor(slotBytes) + 4095) / 4096 * 4096;
  memory_ = std::aligned_alloc(4096, bytes);
  if (memory_ == nullptr) return systemError("out of host memory for a ", bytes, "-byte net connector");
  std::memset(memory_, 0, bytes);
  new (memory_) ConnectorCounters();
  conn = Connector::over(memory_, slotBytes);
  return okStatus();
}

Status netPostRecv(bootstrap::Bootstrap* bs, const NetSetup& setup, int peer, const std::string& peerName,
                   uint32_t tag, size_t slotBytes, NetEnd* out) {
  out->net_ = setup.net;
  BRAID_CHECK(out->allocate(slotBytes));
  NetHandle handle;
  BRAID_CHECK(
      setup.net->listen(setup.dev, &handle, &out->listen_).withContext(strCat("listening for ", peerName)));
  return bs->send(peer, tag, handle.bytes, sizeof(handle.bytes));
}

Status netOpenSend(bootstrap::Bootstrap* bs, const NetSetup& setup, int peer, const std::string& peerName,
                   uint32_t tag, size_t slotBytes, NetEnd* out) {
  out->net_ = setup.net;
  NetHandle handle;
  BRAID_CHECK(bs->recv(peer, tag, handle.bytes, sizeof(handle.bytes)));
  BRAID_CHECK(out->allocate(slotBytes));
  NetSendComm* comm = nullptr;
  const Deadline deadline = deadlineIn(setup.timeoutSec);
  while (comm == nullptr) {
    BRAID_CHECK(setup.net->connect(setup.dev, handle, &comm).withContext(strCat("connecting to ", peerName)));
    if (comm != nullptr) break;
    if (setup.abort != nullptr && setup.abort->load())
      return invalidUsage("connecting to ", peerName, " was aborted");
    if (Clock::now() > deadline) return remoteError("connecting to ", peerName, ": timed out");
    sched_yield();
  }
  out->proxy_ = NetProxy::get(setup.net, setup.dev);
  out->proxyId_ = out->block_.base != nullptr
                      ? out->proxy_->addDevSend(comm, out->block_, {peer, peerName}, setup.sink)
                      : out->proxy_->addSend(comm, out->conn, {peer, peerName}, setup.sink);
  return okStatus();
}

Status netFinishRecv(bootstrap::Bootstrap*, const NetSetup& setup, int peer, const std::string& peerName,
                     uint32_t, NetEnd* io) {
  NetRecvComm* comm = nullptr;
  const Deadline deadline = deadlineIn(setup.timeoutSec);
  int naps = 0;
  while (true) {
    BRAID_CHECK(setup.net->accept(io->listen_, &comm).withContext(strCat("accepting ", peerName)));
    if (comm != nullptr) break;
    if (setup.abort != nullptr && setup.abort->load())
      return invalidUsage("accepting ", peerName, " was aborted");
    if (Clock::now() > deadline) {
      return remoteError(peerName, " did not connect its net connector within ", setup.timeoutSec,
                         " s; that rank may have died or be stuck");
    }
    if (++naps < 100) {
      sched_yield();
    } else {
      usleep(200);
    }
  }
  setup.net->closeListen(io->listen_);
  io->listen_ = nullptr;
  io->proxy_ = NetProxy::get(setup.net, setup.dev);
  io->proxyId_ = io->block_.base != nullptr
                     ? io->proxy_->addDevRecv(comm, io->block_, {peer, peerName}, setup.sink)
                     : io->proxy_->addRecv(comm, io->conn, {peer, peerName}, setup.sink);
  return okStatus();
}

}  // namespace braid
