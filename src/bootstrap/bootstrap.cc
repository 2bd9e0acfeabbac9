#include "bootstrap/bootstrap.h"

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bootstrap/root.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid::bootstrap {
namespace {
constexpr double kStrayTimeoutSec = 10.0;
// How much longer than the bootstrap timeout a rank waits for the root's
// answer to its hello (see joinRoot).
constexpr double kRootAnswerMarginSec = 2.0;
// After init, how long connecting to a rank may be refused before it fails:
// every rank's listener was open before the root told its address and stays
// open for the communicator's life, so a refusal means it is gone (its
// process died, or it destroyed the communicator) and retrying is pointless.
// A short bound rather than none: under net.ipv4.tcp_abort_on_overflow=1 a
// full accept queue refuses too, until the rank accepts again.
constexpr double kRefusedLimitSec = 2.0;

// Which root serves `rank` when there are nIds of them.
uint32_t rootIndexOf(uint32_t rank, uint32_t nranks, uint32_t nIds) {
  // Slice k holds [k*n/nIds, (k+1)*n/nIds); find k by search (nIds is small).
  for (uint32_t k = 0; k + 1 < nIds; ++k) {
    if (rank < static_cast<uint64_t>(k + 1) * nranks / nIds) return k;
  }
  return nIds - 1;
}
}  // namespace

std::string Bootstrap::waitBound() const {
  return strCat(waitSec(), " s (",
                waitSec() < options_.timeoutSec ? "BRAID_STALL_TIMEOUT" : "BRAID_BOOTSTRAP_TIMEOUT", ")");
}

std::string Bootstrap::describe(int peer) const {
  if (peer >= 0 && peer < static_cast<int>(addresses_.size())) {
    return strCat("rank ", peer, " (", addresses_[peer].toString(), ")");
  }
  return strCat("rank ", peer);
}

Status Bootstrap::create(const std::vector<UniqueIdData>& ids, int rank, int nranks, const BootstrapOptions& options,
                         std::unique_ptr<Bootstrap>* out) {
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->options_ = options;
  uint32_t mine = rootIndexOf(static_cast<uint32_t>(rank), static_cast<uint32_t>(nranks),
                              static_cast<uint32_t>(ids.size()));
  // Every rank holds every id; the first id's secret authenticates the ranks
  // to each other, whichever root each of them joined through.
  b->secret_ = ids[0].secret;

  // NCCL_COMM_ID: the id names a fixed root address, and rank 0 hosts it.
  if (rank == 0 && (ids[0].flags & kIdFlagRootOnRank0)) {
    SocketAddress actual;
    BRAID_CHECK(startRoot(ids[0].root, ids[0].secret, options.timeoutSec, &actual)
                    .withContext(strCat("rank 0 starting the bootstrap root at ", ids[0].root.toString(),
                                        " (NCCL_COMM_ID)")));
  }

  NetInterface nic;
  BRAID_CHECK(findInterfaceFor(ids[mine].root, &nic));
  SocketAddress bindAddr = nic.address;
  bindAddr.setPort(0);
  BRAID_CHECK(Socket::listen(bindAddr, &b->listener_));
  SocketAddress listening;
  BRAID_CHECK(b->listener_.localAddress(&listening));
  BRAID_INFO(kLogBootstrap, "bootstrap: rank %d listening on %s (%s)", rank, listening.toString().c_str(),
             nic.name.c_str());

  BRAID_CHECK(b->joinRoot(ids));
  BRAID_CHECK(b->connectRing());
  b->joined_ = true;
  *out = std::move(b);
  return okStatus();
}

Status Bootstrap::joinRoot(const std::vector<UniqueIdData>& ids) {
  uint32_t nIds = static_cast<uint32_t>(ids.size());
  uint32_t index = rootIndexOf(static_cast<uint32_t>(rank_), static_cast<uint32_t>(nranks_), nIds);
  const UniqueIdData& id = ids[index];
  Hello hello;
  hello.secret = id.secret;
  hello.nranks = static_cast<uint32_t>(nranks_);
  hello.nIds = nIds;
  hello.idIndex = index;
  SocketAddress mine;
  BRAID_CHECK(listener_.localAddress(&mine));
  hello.ranks.push_back({static_cast<uint32_t>(rank_), mine});
  if (index > 0) {
    hello.firstRoot = ids[0].root;
    hello.firstSecret = ids[0].secret;
  }
  std::vector<uint8_t> bytes = encodeHello(hello);

  Deadline dl = deadline();
  Socket s;
  Status st = Socket::connect(id.root, dl, options_.abort, &s);
  if (!st.ok()) {
    if (st.code() == ncclInvalidUsage) return st;  // aborted
    // Under NCCL_COMM_ID every rank made the id, and rank 0's init hosts the root.
    const char* hint = (id.flags & kIdFlagRootOnRank0) != 0
                           ? "is rank 0 running, and is NCCL_COMM_ID an address of its host?"
                           : "is the process that called ncclGetUniqueId still running?";
    const bool waitedOut = Clock::now() >= dl;
    return remoteError("rank ", rank_, " could not reach the bootstrap root at ", id.root.toString(),
                       waitedOut ? strCat(" within the bootstrap timeout (", options_.timeoutSec, " s)") : "",
                       ": ", hint, " (", st.message(), ")");
  }
  BRAID_CHECK(s.sendAll(bytes.data(), bytes.size(), dl, options_.abort).withContext("sending hello to the root"));
  // The root answers by its own deadline, set when the id was made, so
  // before this one unless this rank joined at once; the margin lets its
  // answer (which ranks are missing) arrive rather than this rank's own
  // time-out, whose closed connection the root would then report instead.
  RootReply reply;
  st = receiveRootReply(s, deadlineIn(options_.timeoutSec + kRootAnswerMarginSec), options_.abort, &reply);
  if (!st.ok()) {
    if (st.code() == ncclInvalidUsage) return st;
    return remoteError("no answer from the bootstrap root at ", id.root.toString(), ": ", st.message());
  }
  if (reply.result != ncclSuccess) return Status(reply.result, reply.message);
  if (reply.addresses.size() != static_cast<size_t>(nranks_)) {
    return internalError("the root sent ", reply.addresses.size(), " addresses for ", nranks_, " ranks");
  }
  addresses_ = std::move(reply.addresses);
  return okStatus();
}

Status Bootstrap::connectRing() {
  if (nranks_ == 1) return okStatus();
  int next = (rank_ + 1) % nranks_;
  int prev = (rank_ - 1 + nranks_) % nranks_;
  BRAID_CHECK(connectPeer(next, kRingTag, deadline(), &ringNext_));
  BRAID_CHECK(acceptFrom(prev, kRingTag, &ringPrev_));
  BRAID_INFO(kLogBootstrap, "bootstrap: rank %d ring connected (prev %d, next %d)", rank_, prev, next);
  return okStatus();
}

Status Bootstrap::connectPeer(int peer, uint32_t tag, Deadline dl, Socket* out) {
  // During init a refusal is retried until the deadline, as every wait there.
  Status st = Socket::connect(addresses_[peer], dl, options_.abort, out, endedFlag(peer),
                              joined_ ? kRefusedLimitSec : 0);
  if (!st.ok()) {
    if (st.code() == ncclInvalidUsage) return st;  // aborted
    if (peerGone(peer)) {
      return remoteError("the process of ", describe(peer), " ended before rank ", rank_,
                         " could connect to it");
    }
    if (st.code() == ncclRemoteError) {  // refused for kRefusedLimitSec
      return remoteError("the bootstrap listener of ", describe(peer),
                         " is gone: it died or destroyed its communicator (", st.message(), ")");
    }
    return remoteError("cannot reach ", describe(peer), " within ", waitBound(), ": ", st.message());
  }
  PeerHello ph;
  ph.secret = secret_;
  ph.fromRank = static_cast<uint32_t>(rank_);
  ph.tag = tag;
  std::vector<uint8_t> bytes = encodePeerHello(ph);
  return out->sendAll(bytes.data(), bytes.size(), dl, options_.abort);
}

Status Bootstrap::acceptFrom(int peer, uint32_t tag, Socket* out) {
  auto key = std::make_pair(peer, tag);
  Deadline dl = deadline();
  auto waitingFor = [&] {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%#010x", tag);  // tags spell their purpose in ASCII
    return tag == kRingTag ? std::string(" to connect the bootstrap ring") : strCat(" to send tag ", hex);
  };
  while (true) {
    // Read before this pass takes new connections: once the peer's process
    // has ended, what it sent before is in the listener's queue by now.
    const bool gone = peerGone(peer);
    auto it = stash_.find(key);
    if (it != stash_.end() && !it->second.empty()) {
      *out = std::move(it->second.front());
      it->second.pop_front();
      return okStatus();
    }
    if (options_.abort && options_.abort->load()) return invalidUsage("bootstrap wait was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)");
    if (Clock::now() >= dl) {
      return remoteError("rank ", rank_, " timed out after ", waitBound(), " waiting for ", describe(peer),
                         waitingFor(), ": it may have died or be stuck");
    }
    // Take new connections, then read their hellos without blocking.
    while (true) {
      PendingConn pc;
      BRAID_CHECK(listener_.tryAccept(&pc.socket, &pc.peer));
      if (!pc.socket.isOpen()) break;
      pc.deadline = deadlineIn(kStrayTimeoutSec);
      pending_.push_back(std::move(pc));
    }
    for (auto p = pending_.begin(); p != pending_.end();) {
      std::string drop;
      uint8_t chunk[kPeerHelloSize];
      size_t got = 0;
      Status s = p->socket.recvSome(chunk, kPeerHelloSize - p->buffer.size(), &got);
      if (!s.ok()) {
        drop = "closed before sending a complete hello";
      } else {
        p->buffer.insert(p->buffer.end(), chunk, chunk + got);
        if (p->buffer.size() == kPeerHelloSize) {
          PeerHello ph;
          Status d = decodePeerHello(p->buffer.data(), p->buffer.size(), &ph);
          if (!d.ok()) {
            drop = d.message();
          } else if (!secretsEqual(ph.secret, secret_)) {
            drop = "wrong secret (another job?)";
          } else if (ph.fromRank >= static_cast<uint32_t>(nranks_)) {
            drop = strCat("claims to be rank ", ph.fromRank, " of ", nranks_);
          } else {
            stash_[{static_cast<int>(ph.fromRank), ph.tag}].push_back(std::move(p->socket));
            p = pending_.erase(p);
            continue;
          }
        } else if (Clock::now() >= p->deadline) {
          drop = "no complete hello in time";
        }
      }
      if (!drop.empty()) {
        BRAID_WARN("bootstrap: rank %d dropped a connection from %s: %s", rank_, p->peer.toString().c_str(),
                   drop.c_str());
        p = pending_.erase(p);
        continue;
      }
      ++p;
    }
    if (stash_.count(key) && !stash_[key].empty()) continue;
    if (gone) {
      return remoteError("the process of ", describe(peer), " ended while rank ", rank_, " waited for it",
                         waitingFor());
    }
    std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
    for (PendingConn& p : pending_) fds.push_back({p.socket.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
  }
}

// Sends `bytes` to the next rank while receiving as many from the previous
// one, interleaved so that large messages cannot deadlock the ring.
Status Bootstrap::exchange(const void* sendData, void* recvData, size_t bytes, Deadline dl) {
  uint8_t sendHeader[kMessageHeaderSize];
  encodeMessageHeader(bytes, sendHeader);
  uint8_t recvHeader[kMessageHeaderSize];
  size_t sent = 0, received = 0;
  const size_t total = kMessageHeaderSize + bytes;
  int prev = (rank_ - 1 + nranks_) % nranks_;
  int next = (rank_ + 1) % nranks_;
  while (sent < total || received < total) {
    if (options_.abort && options_.abort->load()) return invalidUsage("bootstrap exchange was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)");
    if (Clock::now() >= dl) {
      return remoteError("rank ", rank_, " timed out in a bootstrap ring exchange (sent ", sent, "/", total,
                         " bytes to ", describe(next), ", received ", received, "/", total, " from ",
                         describe(prev), ")");
    }
    pollfd fds[2] = {{ringNext_.fd(), static_cast<short>(sent < total ? POLLOUT : 0), 0},
                     {ringPrev_.fd(), static_cast<short>(received < total ? POLLIN : 0), 0}};
    ::poll(fds, 2, 100);
    if (sent < total) {
      const uint8_t* src = sent < kMessageHeaderSize ? sendHeader + sent
                                                     : static_cast<const uint8_t*>(sendData) + (sent - kMessageHeaderSize);
      size_t len = sent < kMessageHeaderSize ? kMessageHeaderSize - sent : total - sent;
      ssize_t n = ::send(ringNext_.fd(), src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return remoteError(describe(next), " closed its bootstrap connection: it probably exited (",
                           std::strerror(errno), ")");
      }
    }
    if (received < total) {
      uint8_t* dst = received < kMessageHeaderSize ? recvHeader + received
                                                   : static_cast<uint8_t*>(recvData) + (received - kMessageHeaderSize);
      size_t len = received < kMessageHeaderSize ? kMessageHeaderSize - received : total - received;
      size_t got = 0;
      Status s = ringPrev_.recvSome(dst, len, &got);
      if (!s.ok()) {
        return remoteError(describe(prev), " closed its bootstrap connection: it probably exited or was killed");
      }
      bool headerDone = received < kMessageHeaderSize && received + got >= kMessageHeaderSize;
      received += got;
      if (headerDone) {
        uint64_t announced = 0;
        BRAID_CHECK(decodeMessageHeader(recvHeader, kMessageHeaderSize, bytes, &announced)
                        .withContext(strCat("from ", describe(prev))));
      }
    }
  }
  return okStatus();
}

Status Bootstrap::allGather(void* data, size_t bytes) {
  if (nranks_ == 1) return okStatus();
  uint8_t* base = static_cast<uint8_t*>(data);
  Deadline dl = deadline();
  for (int step = 0; step < nranks_ - 1; ++step) {
    int sendSlot = (rank_ - step + nranks_) % nranks_;
    int recvSlot = (rank_ - step - 1 + nranks_) % nranks_;
    BRAID_CHECK(exchange(base + sendSlot * bytes, base + recvSlot * bytes, bytes, dl));
  }
  return okStatus();
}

Status Bootstrap::barrier() {
  std::vector<uint8_t> dummy(static_cast<size_t>(nranks_), 0);
  return allGather(dummy.data(), 1);
}

Status Bootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes) {
  if (tag == kRingTag) return invalidArgument("bootstrap tag ", tag, " is reserved");
  Deadline dl = deadline();
  Socket s;
  BRAID_CHECK(connectPeer(peer, tag, dl, &s));
  uint8_t header[kMessageHeaderSize];
  encodeMessageHeader(bytes, header);
  BRAID_CHECK(s.sendAll(header, sizeof(header), dl, options_.abort));
  Status st = s.sendAll(data, bytes, dl, options_.abort);
  if (!st.ok() && st.code() == ncclRemoteError) return remoteError(describe(peer), " went away: ", st.message());
  return st;
}

Status Bootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes) {
  Socket s;
  BRAID_CHECK(acceptFrom(peer, tag, &s));
  Deadline dl = deadline();
  uint8_t header[kMessageHeaderSize];
  Status st = s.recvAll(header, sizeof(header), dl, options_.abort);
  if (!st.ok()) return st.code() == ncclInvalidUsage ? st : remoteError(describe(peer), ": ", st.message());
  uint64_t announced = 0;
  BRAID_CHECK(decodeMessageHeader(header, sizeof(header), bytes, &announced).withContext(describe(peer)));
  st = s.recvAll(data, bytes, dl, options_.abort);
  if (!st.ok()) return st.code() == ncclInvalidUsage ? st : remoteError(describe(peer), ": ", st.message());
  return okStatus();
}

}  // namespace braid::bootstrap
