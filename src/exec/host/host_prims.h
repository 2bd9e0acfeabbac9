// Host primitives: the verbs the collective algorithms are written in
// (send, recv, recvReduceSend, ...), driving connectors with C++ atomics in
// either protocol (Simple or LL, transports/transport.h).
//
// A primitives object has up to kMaxPrimsPeers send and receive
// connectors: a ring has one of each, a tree node receives from its
// children and sends to its parent, the one-shot all-reduce talks to every
// peer. "Received" data is the reduction of what every receive connector
// delivered, in connector order, with the rank's own input inserted at
// `localPos` where a verb reduces it in; every send connector gets the
// same result. The rank's own input passes through Op::pre (PreMulSum's
// scaling) where it enters a reduction or is sent by `send`; copySend and
// recvCopySend move data unchanged.
//
// One call is one FIFO step of at most maxElems() elements on every
// connector. Both ends of a connector make matching calls with matching
// sizes; the receiver checks the size (and, with Simple, the step) and fails
// loudly if the ranks disagree. Waits spin, then yield, then sleep, and
// watch the abort flag and a deadline, so many ranks on few cores progress
// and a stuck peer becomes an error naming it. After the first error every
// call is a no-op and status() reports it. Used by one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "exec/host/backoff.h"
#include "exec/host/host_reduce.h"
#include "transports/transport.h"
#include "util/status.h"
#include "util/strings.h"

namespace braid {

constexpr int kMaxPrimsPeers = 8;

// Told when a wait of a channel times out, before the error is returned
// (the communicator dumps its FIFO state there when asked to).
class StallListener {
 public:
  virtual void onStall(int channel) = 0;

 protected:
  ~StallListener() = default;
};

struct PrimsContext {
  const std::atomic<bool>* abort = nullptr;
  const std::atomic<bool>* cancel = nullptr;  // raised when another channel of the collective failed
  // Per rank of the communicator, raised when its process has ended (null:
  // not watched; core/connectors.h).
  const std::atomic<bool>* peerEnded = nullptr;
  // For a peer whose end was signalled: if it is a rank on another host that
  // closed its communicator (rather than one whose process ended), records
  // that as the communicator's failure and returns it; else ok. Null: no
  // peer on another host. Set by the core from the net's error sink.
  Status (*peerClosed)(void* arg, int peer) = nullptr;
  void* peerClosedArg = nullptr;
  double timeoutSec = 300;
  int channel = 0;
  const char* collective = "";  // the API name; messages add " #seq"
  uint64_t seq = 0;
  StallListener* stall = nullptr;
  bool spin = true;  // false: more ranks than cores, waits yield at once
  // The collective's output is larger than the caches: Simple steps write
  // the user's buffer with streaming stores (reductions go to the slot
  // first, then stream out).
  bool streamOutput = false;
  // This rank only sends in the collective (a broadcast's root, the first
  // rank of a reduce's chain, a one-exchange reduce's other ranks): it runs
  // ahead of its receivers, and its LL steps take the next slot's lines
  // early (postSend).
  bool onlySends = false;
};

struct PeerConnector {
  Connector* conn;
  int peer;  // for messages
};

namespace detail {
// The error of a wait that ended without its condition: aborted, cancelled
// (another channel or a net connector failed), the process of `peer` ended
// or, on another host, it closed its communicator, or timed out (reported
// to ctx.stall first) waiting for `peer` to do `what`.
inline Status waitFailure(Backoff::Result r, const PrimsContext& ctx, const char* what, int peer,
                          uint64_t step) {
  const std::string op = strCat(ctx.collective, " #", ctx.seq);
  if (r == Backoff::Result::Aborted) return invalidUsage(op, " was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)");
  if (r == Backoff::Result::Cancelled) {
    return internalError(op, ": channel ", ctx.channel, " stopped waiting for rank ", peer, " ", what, " (step ",
                         step, "): the collective failed elsewhere");
  }
  if (r == Backoff::Result::PeerEnded) {
    if (ctx.peerClosed != nullptr && !ctx.peerClosed(ctx.peerClosedArg, peer).ok()) {
      return remoteError(op, ": channel ", ctx.channel, " waited for rank ", peer, " ", what, " (step ", step,
                         ")");
    }
    return remoteError(op, ": the process of rank ", peer, " ended while channel ", ctx.channel,
                       " waited for it ", what, " (step ", step, ")");
  }
  if (ctx.stall != nullptr) ctx.stall->onStall(ctx.channel);
  return remoteError(op, ": no progress for ", ctx.timeoutSec, " s on channel ", ctx.channel,
                     " waiting for rank ", peer, " ", what, " (step ", step,
                     "); that rank may have died or be stuck");
}

// Lines of an LL step that postSend takes ahead for the next step (a step
// of up to 512 data bytes: its header line and 8 more).
constexpr size_t kLLPrefetchLines = 9;

// Whether the CPU has PREFETCHW (a prefetch with intent to write; x86 since
// 2014, AMD long before). Elsewhere it is a read prefetch.
inline const bool kHasPrefetchW = [] {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & bit_PRFCHW) != 0;
#else
  return false;
#endif
}();

inline void prefetchForWrite(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  if (kHasPrefetchW) {
    asm volatile("prefetchw %0" ::"m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  __builtin_prefetch(p, 1, 3);
}

// Per-thread room where a step's reduction is computed before it is copied
// into the slots (see step()); page-aligned, so glibc's memcpy from it
// takes its fast path. Grows once, never shrinks, freed when the thread ends.
inline char* reduceScratch(size_t bytes) {
  struct Freed {
    void operator()(char* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<char, Freed> buffer;
  thread_local size_t capacity = 0;
  if (capacity < bytes) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffer.reset(static_cast<char*>(std::aligned_alloc(4096, rounded)));
    capacity = buffer ? rounded : 0;
  }
  return buffer.get();
}
}  // namespace detail

template <typename T, typename Op, Protocol P = Protocol::Simple>
class HostPrims {
  static_assert(P == Protocol::Simple || P == Protocol::LL, "the host speaks Simple and LL");
  static constexpr size_t kLLDataBytes = kLLSlotBytes - llDataOffset(kLLSlotBytes);

 public:
  // `localPos` is where the rank's own input goes among the received
  // inputs of a reduction (default: last).
  HostPrims(const PeerConnector* sends, int nsend, const PeerConnector* recvs, int nrecv,
            const PrimsContext& ctx, Op op = Op(), int localPos = -1)
      : nsend_(nsend),
        nrecv_(nrecv),
        localPos_(localPos < 0 ? nrecv : localPos),
        ctx_(ctx),
        op_(op),
        backoff_(ctx.abort, ctx.timeoutSec, ctx.cancel, ctx.spin) {
    size_t slot = ~size_t(0);
    for (int i = 0; i < nsend; ++i) sends_[i] = sends[i], slot = std::min(slot, sends[i].conn->slotBytes);
    for (int i = 0; i < nrecv; ++i) recvs_[i] = recvs[i], slot = std::min(slot, recvs[i].conn->slotBytes);
    maxElems_ = (P == Protocol::LL ? kLLDataBytes : slot) / sizeof(T);
  }
  // One sender and one receiver (a ring).
  HostPrims(PeerConnector send, PeerConnector recv, const PrimsContext& ctx, Op op = Op())
      : HostPrims(&send, send.conn ? 1 : 0, &recv, recv.conn ? 1 : 0, ctx, op) {}

  size_t maxElems() const { return maxElems_; }
  const Status& status() const { return status_; }
  bool failed() const { return !status_.ok(); }

  void send(const T* src, size_t n) { step(src, true, false, nullptr, true, n); }
  void recv(T* dst, size_t n) { step(nullptr, false, true, dst, false, n); }
  void recvReduceSend(const T* src, size_t n) { step(src, true, true, nullptr, true, n); }
  void recvReduceCopySend(const T* src, T* dst, size_t n) { step(src, true, true, dst, true, n); }
  void recvReduceCopy(const T* src, T* dst, size_t n) { step(src, true, true, dst, false, n); }
  void recvCopySend(T* dst, size_t n) { step(nullptr, false, true, dst, true, n); }
  void copySend(const T* src, T* dst, size_t n) {
    step(src, false, false, src == dst ? nullptr : dst, true, n);
  }
  // One step on every send (receive) connector, each with its own data:
  // connector i sends srcs[i][0, ns[i]) (through Op::pre, as send does) /
  // receives ns[i] elements into dsts[i].
  void sendEach(const T* const* srcs, const size_t* ns) {
    for (int i = 0; i < nsend_; ++i) step(srcs[i], true, false, nullptr, true, ns[i], i);
  }
  void recvEach(T* const* dsts, const size_t* ns) {
    for (int i = 0; i < nrecv_; ++i) step(nullptr, false, true, dsts[i], false, ns[i], i);
  }

 private:
  // One step: the result of (received inputs, the local input `src`) goes
  // to `dst` and, with `toSend`, to every send connector; `only` >= 0
  // limits the step to that send or receive connector (sendEach, recvEach).
  void step(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend, size_t n, int only = -1) {
    if (failed()) return;
    if (n > maxElems()) {
      status_ = internalError("a step of ", n, " elements exceeds the ", maxElems(), " a slot holds");
      return;
    }
    const int r0 = only < 0 ? 0 : only, r1 = only < 0 ? nrecv_ : only + 1;
    const int s0 = only < 0 ? 0 : only, s1 = only < 0 ? nsend_ : only + 1;
    const T* in[kMaxPrimsPeers + 1];
    bool pre[kMaxPrimsPeers + 1];
    int nin = 0;
    if (fromRecv) {
      for (int i = r0; i < r1; ++i) {
        if (src != nullptr && i == localPos_) in[nin] = src, pre[nin++] = srcPre;
        if ((in[nin] = acquireRecv(i, n)) == nullptr) return;
        pre[nin++] = false;
      }
      if (src != nullptr && localPos_ >= nrecv_) in[nin] = src, pre[nin++] = srcPre;
    } else {
      in[nin] = src;
      pre[nin++] = srcPre;
    }
    T* out[kMaxPrimsPeers];
    const int nout = toSend ? s1 - s0 : 0;
    for (int k = 0; k < nout; ++k) {
      if ((out[k] = acquireSend(s0 + k, n)) == nullptr) return;
    }
    // Reduce into one destination, then copy to the others. Not one pass
    // storing to the user's buffer and the slot together (reduceInto2): on
    // the CI VM of 2026-12-04 two interleaved store streams, one into the
    // slot the peer core read last, made a 2-rank ring 2.3x slower (128 KiB
    // 26.9 against 11.8 us); on the 16-core Xeon the two ways tied.
    const bool stream = P == Protocol::Simple && ctx_.streamOutput && dst != nullptr && n > 0;
    T* target = dst != nullptr && !(stream && nout > 0) ? dst : (nout > 0 ? out[0] : nullptr);
    // A reduction bound for a slot (no user's buffer to hold it, or one
    // written by streaming) is computed in this thread's scratch and copied
    // into the slot, when every rank has a core: there the peer core reads
    // the slot's lines while they are rewritten, and vector stores into
    // them cost more than the extra pass through L2 (glibc's memcpy writes
    // whole lines). 2 ranks on the CI VM's 2 cores, 128 MiB: median 24.5
    // -> 19.9 ms; ranks taking turns on the cores gained nothing.
    if (P == Protocol::Simple && ctx_.spin && target != nullptr && target != dst && n > 0 &&
        (nin > 1 || (Op::kHasPre && pre[0]))) {
      target = reinterpret_cast<T*>(detail::reduceScratch(n * sizeof(T)));
      if (target == nullptr) {
        status_ = internalError("no memory for a ", n * sizeof(T), "-byte reduction scratch");
        return;
      }
    }
    if (target != nullptr && n > 0) {
      if (stream && target == dst && nin == 1 && !(Op::kHasPre && pre[0]) && in[0] != dst) {
        streamElems(dst, in[0], n);
      } else {
        combine(target, in, pre, nin, n);
      }
    }
    if (stream && target != dst) streamElems(dst, target, n);
    for (int k = 0; k < nout; ++k) {
      if (out[k] != target && n > 0) copyElems(out[k], target, n);
      postSend(s0 + k, n);
    }
    if (fromRecv) {
      for (int i = r0; i < r1; ++i) releaseRecv(i);
    }
  }

  // target = in[0] op in[1] op ..., each input through Op::pre where flagged.
  void combine(T* target, const T* const* in, const bool* pre, int nin, size_t n) {
    const bool anyPre = Op::kHasPre && (pre[0] || (nin > 1 && pre[1]));
    if (nin == 1 && !anyPre) {
      if (target != in[0]) copyElems(target, in[0], n);
      return;
    }
    if (nin == 1) {
      for (size_t i = 0; i < n; ++i) target[i] = op_.pre(in[0][i]);
      return;
    }
    bool aliased = false;  // a later input is the target (in place): fold element by element
    for (int k = 2; k < nin; ++k) aliased |= in[k] == target;
    if (aliased) {
      for (size_t i = 0; i < n; ++i) {
        T acc = pre[0] ? op_.pre(in[0][i]) : in[0][i];
        for (int k = 1; k < nin; ++k) acc = op_(acc, pre[k] ? op_.pre(in[k][i]) : in[k][i]);
        target[i] = acc;
      }
      return;
    }
    if (Op::kHasPre && pre[0]) {
      for (size_t i = 0; i < n; ++i) target[i] = op_(op_.pre(in[0][i]), in[1][i]);
    } else if (Op::kHasPre && pre[1]) {
      for (size_t i = 0; i < n; ++i) target[i] = op_(in[0][i], op_.pre(in[1][i]));
    } else {
      reduceInto(target, in[0], in[1], n, op_);
    }
    for (int k = 2; k < nin; ++k) {
      const T* b = in[k];
      if (Op::kHasPre && pre[k]) {
        for (size_t i = 0; i < n; ++i) target[i] = op_(target[i], op_.pre(b[i]));
      } else {
        reduceInto(target, target, b, n, op_);
      }
    }
  }

  template <typename Ready>
  bool waitUntil(Ready ready, const char* what, int peer, uint64_t step) {
    Backoff::Result r = backoff_.wait(ready, ctx_.peerEnded != nullptr ? &ctx_.peerEnded[peer] : nullptr);
    if (r == Backoff::Result::Ready) return true;
    status_ = detail::waitFailure(r, ctx_, what, peer, step);
    return false;
  }

  T* acquireSend(int i, size_t n) {
    Connector* c = sends_[i].conn;
    uint64_t step = c->step;
    constexpr uint64_t depth = P == Protocol::LL ? kHostLLSteps : kConnectorSteps;
    if (!waitUntil([c] { return c->sendSlotFree(depth); }, "to free a slot", sends_[i].peer, step)) {
      return nullptr;
    }
    return reinterpret_cast<T*>(P == Protocol::LL ? c->llData(step, n * sizeof(T)) : c->payload(step));
  }

  void postSend(int i, size_t n) {
    Connector* c = sends_[i].conn;
    const uint64_t bytes = n * sizeof(T);
    if (P == Protocol::LL) {
      // The data is in the slot already; the header unit, stored last with
      // release, shows it: a receiver that sees the header sees the data.
      c->llHeader(c->step)->store(((c->step + 1) << 32) | bytes, std::memory_order_release);
    } else {
      SlotHeader* h = c->header(c->step);
      h->bytes = bytes;
      h->step = c->step;
    }
    c->counters->tail.store(++c->step, std::memory_order_release);
    // A rank that only sends (PrimsContext::onlySends) runs ahead of its
    // receivers. The next LL step's lines are asked for
    // now, with intent to write: the receiver read them a FIFO's depth ago,
    // and a store into a line another core holds waits for that core to
    // give it up, stalling this rank at its next locked instruction. Taken
    // early, the lines are this core's when the next call writes them (a
    // stream of 2-rank broadcasts of 8-512 bytes on the CI VM: 0.26-0.31 us
    // a call before, 0.14-0.21 after). Only while the slot is free by the
    // head last read (a receiver still reading it would lose the lines),
    // and only for steps of a few lines: from 1 KiB the prefetches cost
    // more than they hid. A rank that also receives is paced by its peers,
    // which poll its next slot as soon as they read this one: prefetching
    // for every sender measured 10% slower (2-rank reduce-scatter of
    // 128-512 bytes) and 17% faster (all-reduce) in two states of the VM.
    if (P == Protocol::LL && ctx_.onlySends && c->seenHead + kHostLLSteps > c->step) {
      const size_t lines = (llDataOffset(bytes) + bytes + 63) / 64;
      if (lines <= detail::kLLPrefetchLines) {
        const char* next = reinterpret_cast<const char*>(c->llHeader(c->step));
        for (size_t l = 0; l < lines; ++l) detail::prefetchForWrite(next + 64 * l);
      }
    }
  }

  const T* acquireRecv(int i, size_t n) {
    Connector* c = recvs_[i].conn;
    const int peer = recvs_[i].peer;
    const uint64_t step = c->step, want = n * sizeof(T);
    if (P == Protocol::LL) {
      // Waits on the header unit, which shares its cache line with the data
      // of a small step: no counter line to read first, as Simple has.
      const std::atomic<uint64_t>* header = c->llHeader(step);
      const uint64_t flag = (step + 1) & 0xffffffffu;
      uint64_t unit = 0;
      auto arrived = [&] {
        unit = header->load(std::memory_order_acquire);
        return (unit >> 32) == flag;
      };
      if (!waitUntil(arrived, "to send data", peer, step)) return nullptr;
      if ((unit & 0xffffffffu) != want) return mismatch(peer, unit & 0xffffffffu, step, step, want);
      return reinterpret_cast<const T*>(c->llData(step, want));
    }
    if (!waitUntil([c, step] { return c->counters->tail.load(std::memory_order_acquire) > step; },
                   "to send data", peer, step)) {
      return nullptr;
    }
    const SlotHeader* h = c->header(step);
    if (h->step != step || h->bytes != want) return mismatch(peer, h->bytes, h->step, step, want);
    return reinterpret_cast<const T*>(c->payload(step));
  }

  const T* mismatch(int peer, uint64_t bytes, uint64_t theirStep, uint64_t myStep, uint64_t want) {
    status_ = invalidUsage(what_(), ": rank ", peer, " sent ", bytes, " bytes at step ", theirStep,
                           " where this rank expected ", want, " bytes at step ", myStep,
                           " (the ranks called different collectives, counts or types)");
    return nullptr;
  }

  void releaseRecv(int i) {
    Connector* c = recvs_[i].conn;
    c->counters->head.store(++c->step, std::memory_order_release);
  }

  // "ncclAllReduce #12", built only for error messages.
  std::string what_() const { return strCat(ctx_.collective, " #", ctx_.seq); }

  // The first nsend_ / nrecv_ are set; the rest stay uninitialized (zeroing
  // them showed up as a tenth of a small all-reduce's software time).
  PeerConnector sends_[kMaxPrimsPeers];
  PeerConnector recvs_[kMaxPrimsPeers];
  int nsend_, nrecv_, localPos_;
  size_t maxElems_ = 0;  // elements a step carries on every connector
  PrimsContext ctx_;
  Op op_;
  Backoff backoff_;
  Status status_;
};

}  // namespace braid
