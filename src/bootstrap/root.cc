#include "bootstrap/root.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "util/log.h"
#include "util/strings.h"
#include "util/threads.h"

namespace braid::bootstrap {
namespace {

// A connection whose hello is not complete yet.
struct Pending {
  Socket socket;
  SocketAddress peer;
  std::vector<uint8_t> buffer;
  size_t expected = kHelloFixedSize;  // grows once the header is read
  Deadline deadline;
};

// A connection that sent a valid hello and waits for the table.
struct Joined {
  Socket socket;
  SocketAddress peer;
  std::vector<uint32_t> ranks;  // the ranks this connection speaks for
};

class Root {
 public:
  Root(Socket listener, const Secret& secret, double timeoutSec)
      : listener_(std::move(listener)), secret_(secret), deadline_(deadlineIn(timeoutSec)) {}

  void run();
  void stop() { stop_.store(true); }

 private:
  void acceptNew();
  void readPending();
  void handleHello(Pending& p, const Hello& hello);
  void checkJoined();
  void finishIfComplete();
  void failJob(ncclResult_t code, const std::string& why);
  void reply(Socket& s, const RootReply& r);
  std::string missingRanks() const;

  Socket listener_;
  Secret secret_;
  Deadline deadline_;
  std::atomic<bool> stop_{false};
  bool done_ = false;
  // Once the job failed, the root stays until its deadline (or until every
  // rank was told) so that ranks arriving late learn why instead of finding
  // nobody listening.
  bool failed_ = false;
  RootReply failure_;
  uint32_t told_ = 0;

  std::list<Pending> pending_;
  std::list<Joined> joined_;
  uint32_t nranks_ = 0, nIds_ = 1, idIndex_ = 0;
  std::map<uint32_t, SocketAddress> table_;  // rank -> listener
  std::map<uint32_t, SocketAddress> claimedBy_;  // rank -> connection that claimed it
  SocketAddress firstRoot_;
  Secret firstSecret_{};
  Status acceptError_;  // the last accept's failure, until one succeeds
  Deadline acceptPausedUntil_{};
};

constexpr double kPendingTimeoutSec = 10.0;
constexpr int kAcceptPauseMs = 20;

std::pair<uint32_t, uint32_t> sliceOf(uint32_t index, uint32_t nranks, uint32_t nIds) {
  uint64_t begin = static_cast<uint64_t>(index) * nranks / nIds;
  uint64_t end = static_cast<uint64_t>(index + 1) * nranks / nIds;
  return {static_cast<uint32_t>(begin), static_cast<uint32_t>(end)};
}

void Root::reply(Socket& s, const RootReply& r) {
  std::vector<uint8_t> bytes = encodeRootReply(r);
  Status st = s.sendAll(bytes.data(), bytes.size(), deadlineIn(5.0), nullptr);
  if (!st.ok()) BRAID_INFO(kLogBootstrap, "root: could not send reply: %s", st.message().c_str());
  s.close();
}

std::string Root::missingRanks() const {
  std::string out;
  int shown = 0;
  auto [begin, end] = nIds_ > 1 && idIndex_ > 0 ? sliceOf(idIndex_, nranks_, nIds_) : std::make_pair(0u, nranks_);
  for (uint32_t r = begin; r < end; ++r) {
    if (table_.count(r)) continue;
    if (shown++ < 16) out += (out.empty() ? "" : ",") + std::to_string(r);
  }
  if (shown > 16) out += strCat(",... (", shown, " in all)");
  return out;
}

void Root::failJob(ncclResult_t code, const std::string& why) {
  BRAID_WARN("bootstrap root: %s", why.c_str());
  failed_ = true;
  failure_.result = code;
  failure_.message = why;
  for (Joined& j : joined_) {
    told_ += static_cast<uint32_t>(j.ranks.size());
    reply(j.socket, failure_);
  }
  joined_.clear();
  if (nranks_ == 0 || told_ >= nranks_) done_ = true;
}

void Root::acceptNew() {
  if (Clock::now() < acceptPausedUntil_) return;
  while (true) {
    Pending p;
    Status s = listener_.tryAccept(&p.socket, &p.peer);
    if (!s.ok()) {
      // Out of descriptors (EMFILE) or memory: the connection stays queued
      // and the listener readable, so wait a little before trying again
      // (connections being answered free descriptors), and say it once.
      if (acceptError_.ok()) BRAID_WARN("bootstrap root: accept failed: %s", s.message().c_str());
      acceptError_ = s;
      acceptPausedUntil_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
      return;
    }
    if (!p.socket.isOpen()) return;
    acceptError_ = okStatus();
    p.deadline = std::min(deadline_, deadlineIn(kPendingTimeoutSec));
    pending_.push_back(std::move(p));
  }
}

void Root::handleHello(Pending& p, const Hello& hello) {
  if (failed_ && secretsEqual(hello.secret, secret_)) {
    told_ += static_cast<uint32_t>(hello.ranks.size());
    reply(p.socket, failure_);
    if (told_ >= nranks_) done_ = true;
    return;
  }
  if (!secretsEqual(hello.secret, secret_)) {
    BRAID_WARN("bootstrap root: connection from %s presented the wrong secret (another job's unique id?); "
               "rejected",
               p.peer.toString().c_str());
    RootReply r;
    r.result = ncclInvalidArgument;
    r.message = "the bootstrap root rejected this rank: its unique id carries another job's secret";
    reply(p.socket, r);
    return;
  }
  if (nranks_ == 0) {
    nranks_ = hello.nranks;
    nIds_ = hello.nIds;
    idIndex_ = hello.idIndex;
    firstRoot_ = hello.firstRoot;
    firstSecret_ = hello.firstSecret;
  }
  Joined j;
  j.socket = std::move(p.socket);
  j.peer = p.peer;
  if (hello.nranks != nranks_ || hello.nIds != nIds_ || hello.idIndex != idIndex_) {
    joined_.push_back(std::move(j));
    failJob(ncclInvalidArgument,
            strCat("ranks disagree on the communicator size: a rank from ", p.peer.toString(), " says nranks=",
                   hello.nranks, " (", hello.nIds, " ids, index ", hello.idIndex, "), earlier ranks said nranks=",
                   nranks_, " (", nIds_, " ids, index ", idIndex_, ")"));
    return;
  }
  auto [begin, end] = idIndex_ > 0 ? sliceOf(idIndex_, nranks_, nIds_) : std::make_pair(0u, nranks_);
  for (const RankAddress& ra : hello.ranks) {
    if (ra.rank < begin || ra.rank >= end) {
      joined_.push_back(std::move(j));
      failJob(ncclInvalidArgument, strCat("rank ", ra.rank, " from ", p.peer.toString(),
                                          " does not belong to this root (ranks ", begin, "..", end - 1, ")"));
      return;
    }
    auto it = claimedBy_.find(ra.rank);
    if (it != claimedBy_.end()) {
      joined_.push_back(std::move(j));
      failJob(ncclInvalidArgument, strCat("two processes claim rank ", ra.rank, ": ", it->second.toString(),
                                          " and ", p.peer.toString(), "; every rank must be unique"));
      return;
    }
  }
  for (const RankAddress& ra : hello.ranks) {
    table_[ra.rank] = ra.address;
    claimedBy_[ra.rank] = p.peer;
    j.ranks.push_back(ra.rank);
  }
  BRAID_INFO(kLogBootstrap, "root: %zu rank(s) from %s joined (%zu of %u)", hello.ranks.size(),
             p.peer.toString().c_str(), table_.size(), idIndex_ > 0 ? end - begin : nranks_);
  joined_.push_back(std::move(j));
}

void Root::readPending() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it;
    bool drop = false;
    std::string why;
    while (p.buffer.size() < p.expected) {
      uint8_t chunk[4096];
      size_t want = std::min(sizeof(chunk), p.expected - p.buffer.size());
      size_t got = 0;
      Status s = p.socket.recvSome(chunk, want, &got);
      if (!s.ok()) {
        drop = true;
        why = "closed before sending a complete hello";
        break;
      }
      if (got == 0) break;
      p.buffer.insert(p.buffer.end(), chunk, chunk + got);
      if (p.buffer.size() == kHelloFixedSize && p.expected == kHelloFixedSize) {
        size_t total = 0;
        Status hs = helloSize(p.buffer.data(), p.buffer.size(), &total);
        if (!hs.ok()) {
          drop = true;
          why = hs.message();
          break;
        }
        p.expected = total;
      }
    }
    if (!drop && p.buffer.size() == p.expected && p.expected > kHelloFixedSize) {
      Hello hello;
      Status ds = decodeHello(p.buffer.data(), p.buffer.size(), &hello);
      if (ds.ok()) {
        handleHello(p, hello);
        it = pending_.erase(it);
        if (done_) return;
        continue;
      }
      drop = true;
      why = ds.message();
    }
    if (!drop && Clock::now() >= p.deadline) {
      drop = true;
      why = strCat("sent ", p.buffer.size(), " bytes but no complete hello in time");
    }
    if (drop) {
      BRAID_WARN("bootstrap root: dropped a connection from %s: %s", p.peer.toString().c_str(), why.c_str());
      it = pending_.erase(it);
      continue;
    }
    ++it;
  }
}

// A joined rank that closes its connection before the table is out has died.
void Root::checkJoined() {
  for (Joined& j : joined_) {
    uint8_t byte;
    size_t got = 0;
    Status s = j.socket.recvSome(&byte, 1, &got);
    if (!s.ok() || got > 0) {
      failJob(ncclRemoteError, strCat("rank ", j.ranks.front(), " (", j.peer.toString(),
                                      ") disconnected during bootstrap: it probably exited or was killed"));
      return;
    }
  }
}

void Root::finishIfComplete() {
  if (nranks_ == 0) return;
  auto [begin, end] = idIndex_ > 0 ? sliceOf(idIndex_, nranks_, nIds_) : std::make_pair(0u, nranks_);
  if (table_.size() < end - begin) return;
  RootReply r;
  if (idIndex_ == 0) {
    for (uint32_t rank = 0; rank < nranks_; ++rank) r.addresses.push_back(table_[rank]);
  } else {
    // Sub-root: forward the slice to the first root and relay its answer.
    Hello fwd;
    fwd.secret = firstSecret_;
    fwd.nranks = nranks_;
    fwd.nIds = nIds_;
    fwd.idIndex = 0;
    for (auto& [rank, addr] : table_) fwd.ranks.push_back({rank, addr});
    Socket s;
    Status st = Socket::connect(firstRoot_, deadline_, &stop_, &s);
    std::vector<uint8_t> bytes = encodeHello(fwd);
    if (st.ok()) st = s.sendAll(bytes.data(), bytes.size(), deadline_, &stop_);
    if (st.ok()) st = receiveRootReply(s, deadline_, &stop_, &r);
    if (!st.ok()) {
      failJob(st.code() == ncclInvalidUsage ? ncclRemoteError : st.code(),
              strCat("sub-root ", idIndex_, " could not reach the first root at ", firstRoot_.toString(), ": ",
                     st.message()));
      return;
    }
  }
  for (Joined& j : joined_) reply(j.socket, r);
  joined_.clear();
  BRAID_INFO(kLogBootstrap, "root: all %u ranks joined; table sent", nranks_);
  done_ = true;
}

void Root::run() {
  while (!done_) {
    if (stop_.load()) {
      if (!failed_) failJob(ncclRemoteError, "the bootstrap root's process is shutting down");
      break;
    }
    if (Clock::now() >= deadline_) {
      if (failed_) break;
      if (nranks_ == 0) {
        BRAID_WARN("bootstrap root at %s: no rank joined before the bootstrap timeout; stopping",
                   [this] {
                     SocketAddress a;
                     listener_.localAddress(&a).ignore();
                     return a.toString();
                   }()
                       .c_str());
        break;
      }
      std::string why;  // ranks may have been turned away
      if (!acceptError_.ok()) {
        const bool noFds = acceptError_.message().find("open files") != std::string::npos;
        why = strCat(" (the root could not accept connections: ", acceptError_.message(),
                     noFds ? "; raise the open-file limit, ulimit -n)" : ")");
      }
      failJob(acceptError_.ok() ? ncclRemoteError : ncclSystemError,
              strCat("timed out waiting for ranks to join: ", table_.size(), " of ", nranks_,
                     " joined; missing: ", missingRanks(), why));
      break;
    }
    std::vector<pollfd> fds;
    // A paused listener is left out, or poll would return at once.
    fds.push_back({Clock::now() < acceptPausedUntil_ ? -1 : listener_.fd(), POLLIN, 0});
    for (Pending& p : pending_) fds.push_back({p.socket.fd(), POLLIN, 0});
    for (Joined& j : joined_) fds.push_back({j.socket.fd(), POLLIN, 0});
    // At most 100 ms, and not past the deadline: ranks count on the root
    // failing the job on time (Bootstrap::joinRoot).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    ::poll(fds.data(), fds.size(),
           static_cast<int>(std::clamp<decltype(left)>(left + 1, 0, fds[0].fd < 0 ? kAcceptPauseMs : 100)));
    acceptNew();
    readPending();
    if (done_) break;
    if (failed_) continue;
    checkJoined();
    if (done_ || failed_) continue;
    finishIfComplete();
  }
  listener_.close();  // late connections are refused at once rather than left unanswered
  pending_.clear();
}

// ---------------------------------------------------------------- registry

struct RootThread {
  SocketAddress address;
  std::unique_ptr<Root> root;
  std::thread thread;
  std::atomic<bool> finished{false};
};

class RootList {
 public:
  RootList() { pthread_atfork(nullptr, nullptr, &RootList::afterForkInChild); }
  ~RootList() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& r : roots_) r->root->stop();
    for (auto& r : roots_) {
      if (r->thread.joinable()) r->thread.join();
    }
  }
  void add(std::unique_ptr<RootThread> r) {
    std::lock_guard<std::mutex> lock(mutex_);
    reapLocked();
    roots_.push_back(std::move(r));
  }
  int running() {
    std::lock_guard<std::mutex> lock(mutex_);
    reapLocked();
    return static_cast<int>(roots_.size());
  }
  void await(const SocketAddress& address) {
    std::unique_ptr<RootThread> found;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = roots_.begin(); it != roots_.end(); ++it) {
        if (sameHostAddress((*it)->address, address) && (*it)->address.port() == address.port()) {
          found = std::move(*it);
          roots_.erase(it);
          break;
        }
      }
    }
    // Joined outside the lock: other roots may start or be reaped meanwhile.
    if (found && found->thread.joinable()) found->thread.join();
  }

 private:
  void reapLocked() {
    for (auto it = roots_.begin(); it != roots_.end();) {
      if ((*it)->finished.load()) {
        (*it)->thread.join();
        it = roots_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // A forked child has none of its parent's threads: forget the parent's
  // roots (joining them would wait forever) and start with a fresh lock.
  static void afterForkInChild();

  std::mutex mutex_;
  std::list<std::unique_ptr<RootThread>> roots_;
};

RootList& rootList() {
  static RootList list;
  return list;
}

void RootList::afterForkInChild() {
  RootList& list = rootList();
  new (&list.mutex_) std::mutex();
  auto* orphans = new std::list<std::unique_ptr<RootThread>>();  // leaked on purpose
  orphans->splice(orphans->end(), list.roots_);
}

}  // namespace

Status startRoot(const SocketAddress& bind, const Secret& secret, double timeoutSec, SocketAddress* listening) {
  Socket listener;
  BRAID_CHECK(Socket::listen(bind, &listener));
  BRAID_CHECK(listener.localAddress(listening));
  auto rt = std::make_unique<RootThread>();
  rt->address = *listening;
  rt->root = std::make_unique<Root>(std::move(listener), secret, timeoutSec);
  RootThread* raw = rt.get();
  rootList();  // constructed before the thread, so destroyed after it is joined
  BRAID_CHECK(startThread("the bootstrap root's thread", &rt->thread, [raw] {
    raw->root->run();
    raw->finished.store(true);
  }));
  BRAID_INFO(kLogBootstrap, "bootstrap root listening on %s", listening->toString().c_str());
  rootList().add(std::move(rt));
  return okStatus();
}

Status receiveRootReply(const Socket& s, Deadline deadline, const std::atomic<bool>* abort, RootReply* out) {
  uint8_t header[kReplyHeaderSize];
  BRAID_CHECK(s.recvAll(header, sizeof(header), deadline, abort));
  size_t body = 0;
  BRAID_CHECK(replyBodySize(header, sizeof(header), &body));
  std::vector<uint8_t> full(header, header + sizeof(header));
  full.resize(sizeof(header) + body);
  BRAID_CHECK(s.recvAll(full.data() + sizeof(header), body, deadline, abort));
  return decodeRootReply(full.data(), full.size(), out);
}

int reapRoots() { return rootList().running(); }

void awaitRoot(const SocketAddress& listening) { rootList().await(listening); }

}  // namespace braid::bootstrap
