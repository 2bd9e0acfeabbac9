// The proxy: one thread per process and net device that serves every
// connector whose peer is on another host (DESIGN.md §3 step 5).
//
// The local ranks' primitives see an ordinary connector in local host
// memory (transports/transport.h); the proxy is the far end of it:
// - send side: the primitives fill slot s and publish tail; the proxy sees
//   tail move, sends the slot (Simple: header and payload; LL: the units the
//   step used) and, once the Net has taken the bytes, publishes head = s + 1
//   so the slot can be reused;
// - receive side: once the local receiver freed slot s (head + kSteps > s),
//   the proxy posts a receive for it; when the message lands it writes the
//   slot (LL: unit by unit, each unit in one 8-byte store, the header unit
//   last with release) and publishes tail = s + 1.
// GPU connectors to another host (DevNetBlock, transports/transport.h) are
// served the same way: the kernel writes its steps into host memory the GPU
// maps, with each step's size and protocol in a step word, and the proxy
// moves them; an arriving LL step is written line by line in 8-byte stores,
// each carrying its flag, so the kernel never sees half a unit.
// A failed connection (the peer died, the link dropped, a garbled frame)
// stops that connector and records the error, naming the peer rank, in the
// connector's ErrorSink; the waiting primitives then fail at once and the
// communicator reports the recorded cause. A peer that closed its comm in
// an orderly way (a goodbye) records nothing: only waits that still expect
// its data fail (NetErrorSink::failIfClosed).
//
// Thread safety: add/remove are called from communicator threads; the
// proxy thread runs while at least one connector is registered.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transports/net/net.h"
#include "transports/transport.h"
#include "util/status.h"

namespace braid {

// The first error any of a communicator's net connectors hit. Flags being
// watched are raised when it happens (a running collective's cancel flag),
// so the waits on the failed connector end at once.
class NetErrorSink {
 public:
  void record(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.ok()) first_ = s;
    for (std::atomic<bool>* f : watched_) f->store(true);
    for (auto& c : calls_) c.second();
    failed_.store(true, std::memory_order_release);  // last: failed() means every flag and call is done
  }
  void watch(std::atomic<bool>* flag) {
    std::lock_guard<std::mutex> lock(mu_);
    watched_.push_back(flag);
    if (failed_.load()) flag->store(true);
  }
  void unwatch(std::atomic<bool>* flag) {
    std::lock_guard<std::mutex> lock(mu_);
    watched_.erase(std::remove(watched_.begin(), watched_.end(), flag), watched_.end());
  }
  // Calls `f` (under the sink's lock, so it must not call back into it) when
  // the first error is recorded, or at once if one already was; returns an
  // id for stopCalling. For waits that are not on an std::atomic<bool> (a
  // GPU kernel's abort flag).
  uint64_t callOnFailure(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) f();
    calls_.push_back({++lastCall_, std::move(f)});
    return lastCall_;
  }
  void stopCalling(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.erase(std::remove_if(calls_.begin(), calls_.end(), [id](const auto& c) { return c.first == id; }),
                 calls_.end());
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status first() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

  // A rank on another host that destroyed or aborted its communicator says
  // goodbye on each of its connectors. That is no error by itself (it is how
  // a job ends), so nothing is recorded: once every receive connector from
  // the rank got its goodbye (all it sent has been delivered), its flag in
  // `peerFlags` rises, and only a wait that still expects something of that
  // rank fails, at once (core/connectors.h peerEnded), with failIfClosed().
  // The flags live here, as long as the last connector using them.
  std::atomic<bool>* peerFlags(size_t nranks) {
    std::lock_guard<std::mutex> lock(mu_);
    if (flags_ == nullptr) flags_ = std::make_unique<std::atomic<bool>[]>(nranks), nflags_ = nranks;
    return flags_.get();
  }
  void openedFrom(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    Closing& c = closing_[rank];
    ++c.open;
    c.why = okStatus();  // a new connector: the rank lives on
    if (flags_ != nullptr && static_cast<size_t>(rank) < nflags_) flags_[rank].store(false);
  }
  // A receive connector from `rank` got its goodbye (saidGoodbye) or was
  // closed here.
  void closedFrom(int rank, bool saidGoodbye, const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    Closing& c = closing_[rank];
    if (c.open > 0) --c.open;
    if (!saidGoodbye) return;
    if (c.why.ok()) c.why = why;
    if (c.open == 0 && flags_ != nullptr && static_cast<size_t>(rank) < nflags_) {
      flags_[rank].store(true, std::memory_order_release);
    }
  }
  // For a wait on `rank` that ended because its flag rose: ok unless every
  // receive connector from it said goodbye; then that cause, recorded as
  // the communicator's failure as a dropped connection is (the other
  // channels stop at once and the error names it first).
  Status failIfClosed(int rank) {
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = closing_.find(rank);
      if (it == closing_.end() || it->second.open > 0) return okStatus();
      why = it->second.why;
    }
    record(why);
    return why;
  }

 private:
  mutable std::mutex mu_;
  Status first_;
  struct Closing {
    int open = 0;  // receive connectors from the rank still open
    Status why;    // the first goodbye's error, for a wait that needed more
  };
  std::map<int, Closing> closing_;
  std::unique_ptr<std::atomic<bool>[]> flags_;
  size_t nflags_ = 0;
  std::atomic<bool> failed_{false};
  std::vector<std::atomic<bool>*> watched_;
  std::vector<std::pair<uint64_t, std::function<void()>>> calls_;
  uint64_t lastCall_ = 0;
};

class NetProxy {
 public:
  // The proxy of `dev` of `net` (created on first use, never destroyed).
  static NetProxy* get(Net* net, int dev);

  struct Peer {
    int rank = -1;
    std::string description;  // "rank 3 (host b)"
  };

  // Serves `local` (memory owned by the caller until remove()). The comm
  // becomes the proxy's; it is closed by remove(). Returns an id for remove.
  uint64_t addSend(NetSendComm* comm, const Connector& local, Peer peer, std::shared_ptr<NetErrorSink> sink);
  uint64_t addRecv(NetRecvComm* comm, const Connector& local, Peer peer, std::shared_ptr<NetErrorSink> sink);
  // The same for a GPU connector's block (host memory the GPU maps).
  uint64_t addDevSend(NetSendComm* comm, const DevNetBlock& block, Peer peer,
                      std::shared_ptr<NetErrorSink> sink);
  uint64_t addDevRecv(NetRecvComm* comm, const DevNetBlock& block, Peer peer,
                      std::shared_ptr<NetErrorSink> sink);
  // Stops serving the connector and closes its comm; when it returns the
  // proxy no longer touches the connector's memory. Removing the last
  // connector stops the proxy thread and joins it (the next add starts one).
  void remove(uint64_t id);

 private:
  NetProxy(Net* net, int dev) : net_(net), dev_(dev) {}
  struct Conn;
  uint64_t add(std::unique_ptr<Conn> c);
  void loop(uint64_t generation);  // serves until Impl::generation moves past `generation`
  // Post and complete a connector's steps (either kind of connector).
  bool progressSend(Conn* c);
  bool progressRecv(Conn* c);
  // What step s of a host / GPU connector sends, and how an arrived step is
  // checked and written into it; an error fails the connector.
  Status stepToSend(Conn* c, uint64_t s, const void** data, size_t* size, uint32_t* tag);
  Status deliverStep(Conn* c, uint64_t s, const char* src, size_t size, uint32_t tag);
  Status devStepToSend(Conn* c, uint64_t s, const void** data, size_t* size, uint32_t* tag);
  Status deliverDevStep(Conn* c, uint64_t s, const char* src, size_t size, uint32_t tag);
  void fail(Conn* c, Status s);

  struct Impl;
  Net* net_;
  int dev_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace braid
