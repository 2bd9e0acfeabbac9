// A communicator's bootstrap network: every rank reachable over TCP, a ring
// for collectives of small host data, and tagged point-to-point messages.
//
// Used during init (peer info exchange, transport connection setup) and for
// control-plane agreement later; never on a data path. One Bootstrap belongs
// to one communicator and is used by one thread at a time. Every operation
// is bounded by the bootstrap timeout and by the communicator's abort flag;
// after init also by the end of the peer's process, its listener refusing
// connections, and within an operation the stall timeout (StallBound).
// Incoming connections are authenticated with the job's secret; anything
// else connecting to the listener is dropped with a WARN.
#pragma once

#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "bootstrap/wire.h"
#include "platform/socket.h"
#include "util/status.h"

namespace braid::bootstrap {

struct BootstrapOptions {
  double timeoutSec = 300.0;
  const std::atomic<bool>* abort = nullptr;
};

class Bootstrap {
 public:
  // Joins the job described by ids[0..nIds) as `rank` of `nranks`: contacts
  // the root for this rank's slice, learns every rank's address, connects the
  // ring. If ids[0] asks for it (NCCL_COMM_ID), rank 0 starts the root.
  static Status create(const std::vector<UniqueIdData>& ids, int rank, int nranks, const BootstrapOptions& options,
                       std::unique_ptr<Bootstrap>* out);
  ~Bootstrap() = default;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const SocketAddress& address(int rank) const { return addresses_[rank]; }
  const Secret& secret() const { return secret_; }

  // data holds nranks slots of `bytes`; this rank's slot is filled in; on
  // return every slot holds its rank's data.
  Status allGather(void* data, size_t bytes);
  Status barrier();
  // Tagged messages between any two ranks; sizes must match on both sides.
  Status send(int peer, uint32_t tag, const void* data, size_t bytes);
  Status recv(int peer, uint32_t tag, void* data, size_t bytes);

  // Per rank, raised once its process has ended (ConnectorFactory::
  // peerEnded; null: not watched). A wait for a connection from such a rank
  // fails at once, after taking what it sent before it ended, and so does
  // connecting to it.
  void watchPeerEnded(const std::atomic<bool>* ended) { peerEnded_ = ended; }

  // While one lives, every wait also ends within `seconds` (the lesser of
  // the two bounds), and timeouts name BRAID_STALL_TIMEOUT. For connectors
  // made on first use, during an operation: unlike at init, where ranks may
  // arrive much later, the peers of an operation that does not fail reach
  // it within the stall timeout.
  class StallBound {
   public:
    StallBound(Bootstrap* bs, double seconds) : bs_(bs), saved_(bs->stallSec_) { bs->stallSec_ = seconds; }
    ~StallBound() { bs_->stallSec_ = saved_; }
    StallBound(const StallBound&) = delete;
    StallBound& operator=(const StallBound&) = delete;

   private:
    Bootstrap* bs_;
    double saved_;
  };

 private:
  Bootstrap() = default;
  Status joinRoot(const std::vector<UniqueIdData>& ids);
  Status connectRing();
  // Connects to `peer`'s listener and introduces this rank with `tag`.
  Status connectPeer(int peer, uint32_t tag, Deadline deadline, Socket* out);
  // Waits for a connection from `peer` with `tag`; stashes others.
  Status acceptFrom(int peer, uint32_t tag, Socket* out);
  Status exchange(const void* sendData, void* recvData, size_t bytes, Deadline deadline);
  // The bound of a wait: the bootstrap timeout, or a StallBound's if less.
  double waitSec() const {
    return stallSec_ > 0 && stallSec_ < options_.timeoutSec ? stallSec_ : options_.timeoutSec;
  }
  std::string waitBound() const;  // "60 s (BRAID_STALL_TIMEOUT)", for messages
  Deadline deadline() const { return deadlineIn(waitSec()); }
  const std::atomic<bool>* endedFlag(int peer) const { return peerEnded_ ? &peerEnded_[peer] : nullptr; }
  bool peerGone(int peer) const { return peerEnded_ && peerEnded_[peer].load(std::memory_order_acquire); }
  std::string describe(int peer) const;

  int rank_ = -1;
  int nranks_ = 0;
  BootstrapOptions options_;
  bool joined_ = false;  // init (create) is done: every rank's listener was open and stays so
  double stallSec_ = 0;  // StallBound's; 0: none
  const std::atomic<bool>* peerEnded_ = nullptr;
  Secret secret_{};
  Socket listener_;
  std::vector<SocketAddress> addresses_;
  Socket ringNext_;  // we send to rank+1
  Socket ringPrev_;  // we receive from rank-1

  struct PendingConn {
    Socket socket;
    SocketAddress peer;
    std::vector<uint8_t> buffer;
    Deadline deadline;
  };
  std::list<PendingConn> pending_;
  std::map<std::pair<int, uint32_t>, std::deque<Socket>> stash_;
};

}  // namespace braid::bootstrap
