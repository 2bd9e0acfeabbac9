// Host primitives: the verbs the collective algorithms are written in
// (send, recv, recvReduceSend, ...), driving connectors with C++ atomics.
//
// One call is one FIFO step of at most maxElems() elements. Both ends of a
// connector must make matching calls with matching sizes; the receiver
// checks the size and the step in the slot header and fails loudly if the
// ranks disagree. Waits spin, then yield, then sleep, and watch the abort
// flag and a deadline, so many ranks on few cores progress and a stuck peer
// becomes an error naming it. After the first error every call is a no-op
// and status() reports it. Used by one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "exec/host/backoff.h"
#include "transports/transport.h"
#include "util/status.h"
#include "util/strings.h"

namespace braid {

struct PrimsContext {
  const std::atomic<bool>* abort = nullptr;
  double timeoutSec = 300;
  int sendPeer = -1;  // for messages
  int recvPeer = -1;
  int channel = 0;
  const char* collective = "";  // the API name; messages add " #seq"
  uint64_t seq = 0;
};

template <typename T, typename Op>
class HostPrims {
 public:
  HostPrims(Connector* send, Connector* recv, const PrimsContext& ctx)
      : send_(send), recv_(recv), ctx_(ctx), backoff_(ctx.abort, ctx.timeoutSec) {}

  size_t maxElems() const { return send_->slotBytes / sizeof(T); }
  const Status& status() const { return status_; }
  bool failed() const { return !status_.ok(); }

  void send(const T* src, size_t n) {
    T* out = acquireSend(n);
    if (out == nullptr) return;
    copy(out, src, n);
    postSend(n);
  }
  void recv(T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (in == nullptr) return;
    copy(dst, in, n);
    releaseRecv();
  }
  // Sends op(received, src) on.
  void recvReduceSend(const T* src, size_t n) {
    const T* in = acquireRecv(n);
    T* out = in ? acquireSend(n) : nullptr;
    if (out == nullptr) return;
    reduce(out, in, src, n);
    postSend(n);
    releaseRecv();
  }
  // dst = op(received, src), and sends dst on.
  void recvReduceCopySend(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    T* out = in ? acquireSend(n) : nullptr;
    if (out == nullptr) return;
    reduce(dst, in, src, n);
    copy(out, dst, n);
    postSend(n);
    releaseRecv();
  }
  // dst = op(received, src); nothing is sent.
  void recvReduceCopy(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (in == nullptr) return;
    reduce(dst, in, src, n);
    releaseRecv();
  }
  // dst = received, and sends it on.
  void recvCopySend(T* dst, size_t n) {
    const T* in = acquireRecv(n);
    T* out = in ? acquireSend(n) : nullptr;
    if (out == nullptr) return;
    copy(dst, in, n);
    copy(out, in, n);
    postSend(n);
    releaseRecv();
  }
  // dst = src (unless they are the same buffer), and sends src.
  void copySend(const T* src, T* dst, size_t n) {
    if (src != dst) copy(dst, src, n);
    send(src, n);
  }

 private:
  // memcpy of n elements; a zero-length step may come with null buffers.
  static void copy(T* dst, const T* src, size_t n) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(T));
  }
  static void reduce(T* out, const T* a, const T* b, size_t n) {
    Op op;
    for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }

  template <typename Ready>
  bool waitUntil(Ready ready, const char* what, int peer, uint64_t step) {
    Backoff::Result r = backoff_.wait(ready);
    if (r == Backoff::Result::Ready) return true;
    if (r == Backoff::Result::Aborted) {
      status_ = invalidUsage(what_(), " was aborted (ncclCommAbort)");
    } else {
      status_ = remoteError(what_(), ": no progress for ", ctx_.timeoutSec, " s on channel ", ctx_.channel,
                            " waiting for rank ", peer, " ", what, " (step ", step,
                            "); that rank may have died or be stuck");
    }
    return false;
  }

  T* acquireSend(size_t n) {
    if (failed()) return nullptr;
    if (n * sizeof(T) > send_->slotBytes) {
      status_ = internalError("step of ", n * sizeof(T), " bytes exceeds the slot size");
      return nullptr;
    }
    Connector* c = send_;
    uint64_t step = c->step;
    if (!waitUntil([c, step] { return c->counters->head.load(std::memory_order_acquire) + kConnectorSteps > step; },
                   "to free a slot", ctx_.sendPeer, step)) {
      return nullptr;
    }
    return reinterpret_cast<T*>(c->payload(step));
  }
  void postSend(size_t n) {
    Connector* c = send_;
    SlotHeader* h = c->header(c->step);
    h->bytes = n * sizeof(T);
    h->step = c->step;
    c->counters->tail.store(++c->step, std::memory_order_release);
  }
  const T* acquireRecv(size_t n) {
    if (failed()) return nullptr;
    Connector* c = recv_;
    uint64_t step = c->step;
    if (!waitUntil([c, step] { return c->counters->tail.load(std::memory_order_acquire) > step; }, "to send data",
                   ctx_.recvPeer, step)) {
      return nullptr;
    }
    const SlotHeader* h = c->header(step);
    if (h->step != step || h->bytes != n * sizeof(T)) {
      status_ = invalidUsage(what_(), ": rank ", ctx_.recvPeer, " sent ", h->bytes, " bytes at step ", h->step,
                             " where this rank expected ", n * sizeof(T), " bytes at step ", step,
                             " (the ranks called different collectives, counts or types)");
      return nullptr;
    }
    return reinterpret_cast<const T*>(c->payload(step));
  }
  void releaseRecv() {
    Connector* c = recv_;
    c->counters->head.store(++c->step, std::memory_order_release);
  }

  // "ncclAllReduce #12", built only for error messages.
  std::string what_() const { return strCat(ctx_.collective, " #", ctx_.seq); }

  Connector* send_;
  Connector* recv_;
  PrimsContext ctx_;
  Backoff backoff_;
  Status status_;
};

}  // namespace braid
