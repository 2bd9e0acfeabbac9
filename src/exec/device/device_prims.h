// Device primitives: the verbs of collectives/ (send, recv, recvReduceSend,
// ...) for one block of kDevThreads threads, over device connectors
// (transports/transport.h DevConn), in the Simple or LL protocol. The GPU
// twin of src/exec/host/host_prims.h, with the same semantics: "received"
// data is the reduction of every receive connector's data in connector
// order with the rank's own input at `localPos` (default last), passed
// through Op::pre where it enters a reduction or is sent by `send`; every
// send connector gets the same result. Every thread of the block makes
// every call (the algorithms are uniform control flow).
//
// Simple: one thread waits for the receivers' tail and another for the
// senders' head, the block moves the data with 16-byte loads and stores
// (element by element where the buffers are not 16-byte aligned), and after
// a barrier one thread fences to system scope and publishes tail (senders)
// and head (receivers).
// LL: every thread polls its own 16-byte lines until both flags carry the
// step, reduces, and writes lines with the flag to the next rank; no fence.
// LL128 (cuda flavor): a warp moves 16 lines of 128 bytes (120 data, an
// 8-byte flag) at a time, each line as one 16-byte access by each of 8
// lanes; it polls until every line's flag carries the step, then reduces
// and writes lines with the flag to the next rank; no fence.
//
// Waits are bounded: every 1024 polls a waiting thread reads the abort
// flag (host-mapped) and the clock; abort, the end of the process of the
// rank it waits for (after one more look for what that rank wrote before
// it ended) or no progress for the timeout records the wait in the
// host-mapped status, raises the block's failure flag, and from then on
// every call of every primitives object of the block returns at once, so
// the kernel ends. Failure decisions are made
// with block-wide votes, so every thread takes the same branch.
#pragma once

#include <cstdint>

#include "exec/device/dev_work.h"
#include "exec/device/device_mem.h"

namespace braid::device {

template <typename T>
union Pack16 {
  uint4 raw;
  T elem[16 / sizeof(T)];
};
template <typename T>
union Pack8 {
  uint64_t raw;
  T elem[8 / sizeof(T)];
};

template <int Size>
struct RawOf;
template <>
struct RawOf<1> {
  using type = uint8_t;
};
template <>
struct RawOf<2> {
  using type = uint16_t;
};
template <>
struct RawOf<4> {
  using type = uint32_t;
};
template <>
struct RawOf<8> {
  using type = uint64_t;
};

// One element of memory another agent may have written (volatile: no stale L1).
template <typename T>
__device__ __forceinline__ T loadElem(const T* p) {
  using R = typename RawOf<sizeof(T)>::type;
  R r = *reinterpret_cast<const volatile R*>(p);
  T t;
  __builtin_memcpy(&t, &r, sizeof(T));
  return t;
}

// What a failed wait records in DevStatus.
struct DevWait {
  int channel, peer, waitingFor;
  uint64_t step;
};

// Records a failure (the kernel's first wins) and raises the block's flag,
// so every call of the block's primitives returns at once.
__device__ inline void recordWaitFailure(const DevCtx& ctx, volatile int* sFail, int32_t code,
                                         const DevWait& w) {
  *sFail = 1;
  int* codeWord = reinterpret_cast<int*>(&ctx.status->code);
  if (atomicCAS(codeWord, kDevOk, kDevClaimed) == kDevOk) {
    ctx.status->channel = w.channel;
    ctx.status->peer = w.peer;
    ctx.status->waitingFor = w.waitingFor;
    ctx.status->step = w.step;
    __threadfence_system();  // the fields before the code (the host reads them after it)
    atomicExch(codeWord, code);
    __threadfence_system();
  }
}

// *start once a wait saw its peer's process ended: its next check fails.
constexpr uint64_t kDevPeerEndedSeen = ~uint64_t(0);

// A bounded wait's periodic check: true (failure recorded) once the abort
// flag is raised, the wait has made no progress for the timeout since
// *start (0: starts the clock), or at the check after the one that saw the
// process of the rank it waits for ended: the polls between look once more
// for what that rank wrote before it ended (a rank may finish its part and
// leave before its peers finish theirs).
__device__ inline bool waitMustStop(const DevCtx& ctx, volatile int* sFail, uint64_t* start,
                                    const DevWait& w) {
  int32_t code = kDevOk;
  const int32_t flags = *ctx.abort;
  if ((flags & kDevAbortRaised) != 0) {
    code = kDevAborted;
  } else if ((flags & kDevSomePeerEnded) != 0 && ctx.ended != nullptr && w.peer >= 0 &&
             ctx.ended[w.peer] != 0) {
    if (*start != kDevPeerEndedSeen) {
      __threadfence_system();  // the polls that follow read what it wrote before it ended
      *start = kDevPeerEndedSeen;
      return false;
    }
    code = kDevPeerEnded;
  } else {
    const uint64_t now = nanoseconds();
    if (*start == 0) {
      *start = now;
    } else if (now - *start > ctx.timeoutNs) {
      code = kDevTimedOut;
    }
  }
  if (code == kDevOk) return false;
  recordWaitFailure(ctx, sFail, code, w);
  return true;
}

template <typename T, typename Op, Protocol P, int MaxRecv, int MaxSend>
class DevPrims {
#if !defined(BRAID_GPU_CUDA)
  static_assert(P != Protocol::LL128, "LL128 is built in the cuda flavor only");
#endif
  static constexpr int NT = kDevThreads;
  static constexpr int kRecv = MaxRecv > 0 ? MaxRecv : 1;
  static constexpr int kSend = MaxSend > 0 ? MaxSend : 1;

 public:
  // sends[i] / recvs[i]: the connectors; *Peers: their ranks (messages).
  // `sFail`: the block's shared failure flag.
  __device__ DevPrims(const DevConn* const* sends, const int* sendPeers, int nsend, const DevConn* const* recvs,
                      const int* recvPeers, int nrecv, int localPos, Op op, const DevCtx& ctx, int channel,
                      volatile int* sFail)
      : nsend_(nsend), nrecv_(nrecv), localPos_(localPos < 0 ? nrecv : localPos), op_(op), ctx_(ctx),
        channel_(channel), sFail_(sFail) {
    uint64_t slot = ~uint64_t(0);
#pragma unroll
    for (int i = 0; i < kSend; ++i) {
      if (i < nsend) {
        const DevConn& c = *sends[i];
        sbuf_[i] = P == Protocol::LL ? c.ll : P == Protocol::LL128 ? c.ll128 : c.simple;
        scounter_[i] = c.tail;
        scredit_[i] = c.head;
        sstepPtr_[i] = c.step;
        sstep_[i] = *c.step;
        ssizes_[i] = c.sizes;
        netSend_ = netSend_ || c.net;
        speer_[i] = sendPeers[i];
        slot = c.slotBytes < slot ? c.slotBytes : slot;
      }
    }
#pragma unroll
    for (int i = 0; i < kRecv; ++i) {
      if (i < nrecv) {
        const DevConn& c = *recvs[i];
        rbuf_[i] = P == Protocol::LL ? c.ll : P == Protocol::LL128 ? c.ll128 : c.simple;
        rcounter_[i] = c.tail;
        rcredit_[i] = c.head;
        rstepPtr_[i] = c.step;
        rstep_[i] = *c.step;
        rsizes_[i] = c.sizes;
        rpeer_[i] = recvPeers[i];
        slot = c.slotBytes < slot ? c.slotBytes : slot;
      }
    }
    slotBytes_ = slot;
    maxElems_ = (P == Protocol::LL      ? kDevLLDataBytes
                 : P == Protocol::LL128 ? kDevLL128DataBytes
                                        : slot) /
                sizeof(T);
  }

  __device__ uint64_t maxElems() const { return maxElems_; }
  __device__ bool failed() const { return failed_; }
  // Point-to-point (Simple): every step's size travels in the connector's
  // step words and the receiver checks it against its own, so a send and
  // a receive of different sizes fail (kDevMismatch) instead of shifting
  // every later step of the connector.
  __device__ void checkSizes() {
    checkSizes_ = true;
  }

  // Under ring direct mode (directOutput) the verbs that carry results --
  // recv and recvCopySend receiving, copySend, recvCopySend and
  // recvReduceCopySend sending -- take them from / write them to the
  // ranks' outputs at dst's offset (collectives/ring.h).
  __device__ void send(const T* src, uint64_t n) { step(src, true, false, nullptr, true, n); }
  __device__ void recv(T* dst, uint64_t n) {
    if (receivesDirect()) return step(nullptr, false, true, nullptr, false, n, false);  // it is in dst
    step(nullptr, false, true, dst, false, n);
  }
  __device__ void recvReduceSend(const T* src, uint64_t n) { step(src, true, true, nullptr, true, n); }
  __device__ void recvReduceCopySend(const T* src, T* dst, uint64_t n) {
    step(src, true, true, dst, true, n, true, dst);
  }
  __device__ void recvReduceCopy(const T* src, T* dst, uint64_t n) { step(src, true, true, dst, false, n); }
  __device__ void recvCopySend(T* dst, uint64_t n) {
    if (receivesDirect()) return step(dst, false, true, nullptr, true, n, false, dst);  // pass on dst
    step(nullptr, false, true, dst, true, n, true, dst);
  }
  __device__ void copySend(const T* src, T* dst, uint64_t n) {
    step(src, false, false, src == dst ? nullptr : dst, true, n, false, dst);
  }

  // Ring direct mode (dev_work.h, kDevRingDirect; Simple, one connector
  // each way), once as a ring call starts, with this rank's part of its
  // output (`n` elements; every rank's part lies at the same offsets). On
  // the receive connector's mailbox (null: none) this rank posts `out` as
  // the previous rank's GPU addresses it (`view` bytes away: another
  // process's mapping), or null where that GPU may not write it (!writable), and
  // then finds the results it receives where they landed. On the send
  // connector's it waits for the next rank's post: where that is a buffer,
  // results go straight there instead of through the FIFO. Steps are
  // counted and waited for as through the FIFO. A post is identified by
  // the connector's step, so the call must move at least one step across
  // each connector whose mailbox it uses: then the receiver cannot post
  // again before the sender has read this post (it needs the sender's
  // data first, which follows the read).
  __device__ void directOutput(uint64_t* sendBox, uint64_t* recvBox, T* out, uint64_t n, bool writable,
                               int64_t view) {
    __shared__ uint64_t sPeerOut;
    if (failed_) return;
    bool bad = *sFail_ != 0;
    if (threadIdx.x == 0) {
      sPeerOut = 0;
      if (!bad && recvBox != nullptr)
        post(recvBox, writable ? reinterpret_cast<uint64_t>(out) + static_cast<uint64_t>(view) : 0, n);
      if (!bad && sendBox != nullptr) bad = !awaitPost(sendBox, n, 5, &sPeerOut);
    }
    failed_ = __syncthreads_or(bad);
    outBase_ = out;
    peerOut_ = failed_ ? nullptr : reinterpret_cast<T*>(sPeerOut);
    recvDirect_ = recvBox != nullptr && writable;
  }
  // One step on every send (receive) connector at once, each with its own
  // data: connector i sends srcs[i][0, ns[i]) (through Op::pre, as send
  // does) / receives ns[i] elements into dsts[i]. One wait and one post
  // for all of them, as the other verbs make.
  __device__ void sendEach(const T* const* srcs, const size_t* ns) {
    stepEach(srcs, nullptr, ns);
  }
  __device__ void recvEach(T* const* dsts, const size_t* ns) {
    stepEach(nullptr, dsts, ns);
  }

  // Direct writes (DevDirectBox; Simple, connector 0 each way): one step
  // carries a whole message of n elements, written by the sender straight
  // into the receiver's buffer. The receiver posts dst (as the sender's GPU
  // addresses it) and n for every message (null: the FIFO carries it) and,
  // with dst, waits for the data.
  // The sender of a large message waits for the post and checks n.
  __device__ void recvDirect(uint64_t* box, T* dst, uint64_t n) {
    if (failed_ || *sFail_ != 0) return;
    if (threadIdx.x == 0) post(box, reinterpret_cast<uint64_t>(dst), n);
    if (dst == nullptr || !begin(true, false, [n](int) { return n; })) return;
    end(true, false, false, [](int) { return uint64_t(0); });
  }
  // The sender's: waits for the receiver's post; null if it posted no
  // buffer (then send() through the FIFO), posted another size, or the
  // block failed.
  __device__ T* directBuffer(const uint64_t* box, uint64_t n) {
    __shared__ uint64_t sBuffer;
    if (failed_) return nullptr;
    bool bad = *sFail_ != 0;
    if (threadIdx.x == 0 && !bad) bad = !awaitPost(box, n, 4, &sBuffer);
    failed_ = __syncthreads_or(bad);
    return failed_ ? nullptr : reinterpret_cast<T*>(sBuffer);
  }
  __device__ void sendDirect(const T* src, T* dst, uint64_t n) {
    if (!begin(false, true, [n](int) { return n; })) return;
    move(src, true, false, dst, false, n);
    end(false, true, false, [n](int) { return n; });
  }

  // Stores the connectors' steps for the next launch. Called once, at the end.
  __device__ void finish() {
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int i = 0; i < kSend; ++i)
      if (i < nsend_) *sstepPtr_[i] = sstep_[i];
#pragma unroll
    for (int i = 0; i < kRecv; ++i)
      if (i < nrecv_) *rstepPtr_[i] = rstep_[i];
  }

 private:
  // A DevDirectBox exchange (thread 0). post: the receiving side offers
  // the buffer at address `buf` of the sender's GPU (0: none) for the n
  // elements of its next step on connector 0.
  // awaitPost: the sending side waits for that post (waitingFor names what
  // for in a stall report), checks that it is for n elements (else
  // kDevMismatch) and takes the buffer; false if it failed.
  __device__ void post(uint64_t* box, uint64_t buf, uint64_t n) {
    box[DevDirectBox::kBuffer] = buf;
    box[DevDirectBox::kBytes] = n * sizeof(T);
    __threadfence_system();
    storeRelaxed(box + DevDirectBox::kStep, rstep_[0] + 1);
  }
  __device__ bool awaitPost(const uint64_t* box, uint64_t n, int waitingFor, uint64_t* buf) {
    const DevWait w{channel_, speer_[0], waitingFor, sstep_[0]};
    if (!waitAtLeast(box + DevDirectBox::kStep, sstep_[0] + 1, w.peer, w.waitingFor, w.step)) return false;
    if (loadElem(box + DevDirectBox::kBytes) != n * sizeof(T)) {
      recordWaitFailure(ctx_, sFail_, kDevMismatch, w);
      return false;
    }
    *buf = loadElem(box + DevDirectBox::kBuffer);
    return true;
  }

  // readRecv: take the received data from the FIFO (ring direct mode:
  // not where it already landed in the output). at: where in this rank's
  // output the data sent belongs (ring direct mode: where it goes in the
  // next rank's).
  __device__ void step(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend, uint64_t n,
                       bool readRecv = true, const T* at = nullptr) {
    if (!begin(fromRecv, toSend, [n](int) { return n; })) return;
    const bool ok = move(src, srcPre, fromRecv && readRecv, dst, toSend, n, at);
    end(fromRecv, toSend, !ok, [n](int) { return n; });
  }
  __device__ bool receivesDirect() const {
    return P == Protocol::Simple && recvDirect_;
  }

  __device__ void stepEach(const T* const* srcs, T* const* dsts, const size_t* ns) {
    const bool toSend = srcs != nullptr;
    auto countOf = [ns](int i) { return static_cast<uint64_t>(ns[i]); };
    if (!begin(!toSend, toSend, countOf)) return;
    bool bad = false;
    // Every thread moves every connector's data (no early exit: LL128's
    // warps move lines together); a failed poll has raised the block's flag.
#pragma unroll 1
    for (int i = 0; i < (toSend ? nsend_ : nrecv_); ++i) {
      only_ = i;
      const bool ok = toSend ? move(srcs[i], true, false, nullptr, true, ns[i])
                             : move(nullptr, false, true, dsts[i], false, ns[i]);
      bad = bad || !ok;
    }
    only_ = -1;
    end(!toSend, toSend, bad, countOf);
  }

  // A step's waits: a free slot on every send connector it uses and (Simple)
  // data on every receive connector (LL polls the lines instead), whose
  // size, under checkSizes, must be countOf(i) elements. False if the block
  // has failed.
  template <typename Count>
  __device__ __forceinline__ bool begin(bool fromRecv, bool toSend, Count countOf) {
    if (failed_) return false;
    const int tid = threadIdx.x;
    bool bad = *sFail_ != 0;
    if (toSend && tid == (NT > 32 ? 32 : 0)) {
#pragma unroll
      for (int i = 0; i < kSend; ++i) {
        if (sendOn(i) && !bad)
          bad = !waitAtLeast(scredit_[i], sstep_[i] + 1 - kConnectorSteps, speer_[i], 1, sstep_[i]);
      }
    }
    if (P == Protocol::Simple && fromRecv && tid == 0) {
#pragma unroll
      for (int i = 0; i < kRecv; ++i) {
        if (recvOn(i) && !bad) {
          bad = !waitAtLeast(rcounter_[i], rstep_[i] + 1, rpeer_[i], 0, rstep_[i]);
          if (!bad && checkSizes_ && rsizes_[i] != nullptr &&
              loadElem(rsizes_[i] + rstep_[i] % kConnectorSteps) !=
                  DevStepWord::make(rstep_[i], false, countOf(i) * sizeof(T))) {
            recordWaitFailure(ctx_, sFail_, kDevMismatch, DevWait{channel_, rpeer_[i], 0, rstep_[i]});
            bad = true;
          }
        }
      }
    }
    failed_ = __syncthreads_or(bad);
    return !failed_;
  }

  __device__ __forceinline__ bool move(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend,
                                       uint64_t n, const T* at = nullptr) {
    if constexpr (P == Protocol::Simple) {
      moveSimple(src, srcPre, fromRecv, dst, toSend, n, at);
      return true;
    } else if constexpr (P == Protocol::LL128) {
      return moveLL128(src, srcPre, fromRecv, dst, toSend, n);
    } else {
      return moveLL(src, srcPre, fromRecv, dst, toSend, n);
    }
  }

  // A step's end: countOf(i) elements went to send connector i.
  template <typename Count>
  __device__ __forceinline__ void end(bool fromRecv, bool toSend, bool bad, Count countOf) {
    const int tid = threadIdx.x;
    failed_ = __syncthreads_or(bad);
    // The block's stores happen before the barrier; the posting thread's
    // system-scope fence then orders them all before tail (as NCCL's
    // postPeer does), so one thread fences instead of every thread. LL
    // needs no fence between GPUs (the flags travel with the data), but a
    // net connector's proxy reads the step word and the lines after tail.
    if (toSend && tid == 0 && !failed_) {
      if (netSend_ || checkSizes_) {
#pragma unroll
        for (int i = 0; i < kSend; ++i) {
          if (sendOn(i) && ssizes_[i] != nullptr) {
            ssizes_[i][sstep_[i] % kConnectorSteps] =
                DevStepWord::make(sstep_[i], P == Protocol::LL, countOf(i) * sizeof(T));
          }
        }
      }
      if (P == Protocol::Simple || netSend_ || checkSizes_) __threadfence_system();
    }
    if (!failed_ && tid == 0) {
#pragma unroll
      for (int i = 0; i < kSend; ++i)
        if (toSend && sendOn(i)) storeRelaxed(scounter_[i], sstep_[i] + 1);
#pragma unroll
      for (int i = 0; i < kRecv; ++i)
        if (fromRecv && recvOn(i)) storeRelaxed(rcredit_[i], rstep_[i] + 1);
    }
#pragma unroll
    for (int i = 0; i < kSend; ++i)
      if (toSend && sendOn(i)) ++sstep_[i];
#pragma unroll
    for (int i = 0; i < kRecv; ++i)
      if (fromRecv && recvOn(i)) ++rstep_[i];
  }

  // Whether a step uses send (receive) connector i: all of them, or while
  // stepEach moves one connector's data, that one (never with one
  // connector: rings and the 2-rank one-shot do not look at only_).
  __device__ bool sendOn(int i) const {
    return i < nsend_ && (kSend == 1 || only_ < 0 || i == only_);
  }
  __device__ bool recvOn(int i) const {
    return i < nrecv_ && (kRecv == 1 || only_ < 0 || i == only_);
  }

  // ---- Simple ----------------------------------------------------------------

  __device__ void moveSimple(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend, uint64_t n,
                             const T* at) {
    constexpr int kIn = kRecv + 1, kOut = kSend + 1;
    const T* in[kIn];
    bool pre[kIn];
    int nin = 0;
    if (fromRecv) {
#pragma unroll
      for (int i = 0; i < kRecv; ++i) {
        if (recvOn(i)) {
          if (src != nullptr && i == localPos_) in[nin] = src, pre[nin++] = srcPre;
          in[nin] = reinterpret_cast<const T*>(rbuf_[i] + (rstep_[i] % kConnectorSteps) * slotBytes_);
          pre[nin++] = false;
        }
      }
      if (src != nullptr && localPos_ >= nrecv_) in[nin] = src, pre[nin++] = srcPre;
    } else {
      in[0] = src, pre[0] = srcPre, nin = 1;
    }
    T* out[kOut];
    int nout = 0;
    if (dst != nullptr) out[nout++] = dst;
    if (toSend) {
#pragma unroll
      for (int i = 0; i < kSend; ++i)
        if (sendOn(i)) {
          out[nout++] = i == 0 && at != nullptr && peerOut_ != nullptr
                            ? peerOut_ + (at - outBase_)
                            : reinterpret_cast<T*>(sbuf_[i] + (sstep_[i] % kConnectorSteps) * slotBytes_);
        }
    }
    if (n == 0 || nout == 0) return;
    reduceCopy<kIn, kOut>(in, pre, nin, out, nout, n);
  }

  template <int kIn, int kOut>
  __device__ void reduceCopy(const T* const* in, const bool* pre, int nin, T* const* out, int nout, uint64_t n) {
    constexpr int kPer = 16 / sizeof(T);
    constexpr int U = 4;  // packs in flight per thread
    uintptr_t bits = 0;
#pragma unroll
    for (int k = 0; k < kIn; ++k)
      if (k < nin) bits |= reinterpret_cast<uintptr_t>(in[k]);
#pragma unroll
    for (int k = 0; k < kOut; ++k)
      if (k < nout) bits |= reinterpret_cast<uintptr_t>(out[k]);
    const uint64_t packs = (bits % 16 == 0) ? n / kPer : 0;
    // Unrolled over inputs and outputs only when there are few (rings);
    // unrolling nine of each took minutes to compile per datatype.
    constexpr int kInUnroll = kIn <= 2 ? kIn : 1;
    constexpr int kOutUnroll = kOut <= 2 ? kOut : 1;
    const int tid = threadIdx.x;
    for (uint64_t base = tid; base < packs; base += static_cast<uint64_t>(NT) * U) {
      Pack16<T> acc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint64_t p = base + static_cast<uint64_t>(u) * NT;
        if (p < packs) acc[u].raw = loadFresh(reinterpret_cast<const uint4*>(in[0]) + p);
      }
      if (Op::kHasPre && pre[0]) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc[u].elem[e] = op_.pre(acc[u].elem[e]);
      }
#pragma unroll kInUnroll
      for (int k = 1; k < kIn; ++k) {
        if (k < nin) {
          Pack16<T> v[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const uint64_t p = base + static_cast<uint64_t>(u) * NT;
            if (p < packs) v[u].raw = loadFresh(reinterpret_cast<const uint4*>(in[k]) + p);
          }
          const bool pk = Op::kHasPre && pre[k];
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int e = 0; e < kPer; ++e) acc[u].elem[e] = op_(acc[u].elem[e], pk ? op_.pre(v[u].elem[e]) : v[u].elem[e]);
        }
      }
#pragma unroll kOutUnroll
      for (int k = 0; k < kOut; ++k) {
        if (k < nout) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const uint64_t p = base + static_cast<uint64_t>(u) * NT;
            if (p < packs) reinterpret_cast<uint4*>(out[k])[p] = acc[u].raw;
          }
        }
      }
    }
    for (uint64_t i = packs * kPer + tid; i < n; i += NT) {
      T acc = loadElem(in[0] + i);
      if (Op::kHasPre && pre[0]) acc = op_.pre(acc);
#pragma unroll 1
      for (int k = 1; k < kIn; ++k) {
        if (k < nin) {
          T v = loadElem(in[k] + i);
          acc = op_(acc, (Op::kHasPre && pre[k]) ? op_.pre(v) : v);
        }
      }
#pragma unroll 1
      for (int k = 0; k < kOut; ++k)
        if (k < nout) out[k][i] = acc;
    }
  }

  // ---- LL --------------------------------------------------------------------

  static constexpr int kPer8 = 8 / sizeof(T);

  // Elements e0 .. e0+ne of `p` as one 8-byte unit (zero beyond ne).
  __device__ Pack8<T> loadUnit(const T* p, uint64_t e0, int ne, bool pre) const {
    Pack8<T> v;
    if (ne == kPer8 && reinterpret_cast<uintptr_t>(p + e0) % 8 == 0) {
      v.raw = *reinterpret_cast<const uint64_t*>(p + e0);
    } else {
      v.raw = 0;
      for (int e = 0; e < ne; ++e) v.elem[e] = p[e0 + e];
    }
    if (Op::kHasPre && pre) {
#pragma unroll
      for (int e = 0; e < kPer8; ++e) v.elem[e] = op_.pre(v.elem[e]);
    }
    return v;
  }

  __device__ void storeUnit(T* p, uint64_t e0, int ne, const Pack8<T>& v) const {
    if (ne == kPer8 && reinterpret_cast<uintptr_t>(p + e0) % 8 == 0) {
      *reinterpret_cast<uint64_t*>(p + e0) = v.raw;
    } else {
      for (int e = 0; e < ne; ++e) p[e0 + e] = v.elem[e];
    }
  }

  __device__ bool pollLine(int i, uint64_t line, Pack8<T>* out) {
    const char* p = rbuf_[i] + (rstep_[i] % kConnectorSteps) * kDevLLSlotBytes + line * 16;
    const uint32_t flag = static_cast<uint32_t>(rstep_[i] + 1);
    uint64_t start = 0;
    uint32_t spins = 0;
    for (;;) {
      uint4 v = loadLine(p);
      if (v.y == flag && v.w == flag) {
        out->raw = static_cast<uint64_t>(v.x) | (static_cast<uint64_t>(v.z) << 32);
        return true;
      }
      if (*sFail_ != 0) return false;
      if ((++spins & 1023u) == 0 && shouldStop(&start, rpeer_[i], 0, rstep_[i])) return false;
    }
  }

  __device__ void combine(Pack8<T>* acc, bool* have, const Pack8<T>& v) const {
    if (!*have) {
      *acc = v;
      *have = true;
      return;
    }
#pragma unroll
    for (int e = 0; e < kPer8; ++e) acc->elem[e] = op_(acc->elem[e], v.elem[e]);
  }

  __device__ bool moveLL(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend, uint64_t n) {
    const uint64_t nlines = (n + kPer8 - 1) / kPer8;
    for (uint64_t line = threadIdx.x; line < nlines; line += NT) {
      const uint64_t e0 = line * kPer8;
      const int ne = static_cast<int>(n - e0 < static_cast<uint64_t>(kPer8) ? n - e0 : kPer8);
      Pack8<T> acc;
      acc.raw = 0;
      bool have = false;
      if (fromRecv) {
#pragma unroll
        for (int i = 0; i < kRecv; ++i) {
          if (recvOn(i)) {
            if (src != nullptr && i == localPos_) combine(&acc, &have, loadUnit(src, e0, ne, srcPre));
            Pack8<T> v;
            if (!pollLine(i, line, &v)) return false;
            combine(&acc, &have, v);
          }
        }
        if (src != nullptr && localPos_ >= nrecv_) combine(&acc, &have, loadUnit(src, e0, ne, srcPre));
      } else {
        acc = loadUnit(src, e0, ne, srcPre);
      }
      if (dst != nullptr) storeUnit(dst, e0, ne, acc);
      if (toSend) {
#pragma unroll
        for (int i = 0; i < kSend; ++i) {
          if (sendOn(i)) {
            char* p = sbuf_[i] + (sstep_[i] % kConnectorSteps) * kDevLLSlotBytes + line * 16;
            storeLine(p, acc.raw, static_cast<uint32_t>(sstep_[i] + 1));
          }
        }
      }
    }
    return true;
  }

  // ---- LL128 -----------------------------------------------------------------
#if defined(BRAID_GPU_CUDA)
  // A warp's pass: its 32 lanes' 16-byte accesses cover 4 consecutive lines
  // (lane / 8 the line, lane % 8 the 16 bytes in it; lane % 8 == 7 holds the
  // line's last data word and the flag). kPasses passes: 16 lines a warp.
  static constexpr int kPasses = 4;
  static constexpr uint64_t kLinesPerWarp = 4 * kPasses;
  static constexpr uint64_t kUnitsPerLine = kDevLL128LineData / 8;

  // The two 8-byte units lane-piece `piece` of line `line` carries (the
  // second is the flag for piece 7), from `p`'s n elements (zero past n).
  __device__ void loadUnits128(const T* p, uint64_t n, uint64_t line, int piece, bool pre,
                               Pack8<T>* u) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint64_t e0 = (line * kUnitsPerLine + 2 * piece + h) * kPer8;
      const int ne =
          (piece == 7 && h == 1) || e0 >= n ? 0 : static_cast<int>(n - e0 < kPer8 ? n - e0 : kPer8);
      u[h] = loadUnit(p, e0, ne, pre);
    }
  }
  __device__ void storeUnits128(T* p, uint64_t n, uint64_t line, int piece, const Pack8<T>* u) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint64_t e0 = (line * kUnitsPerLine + 2 * piece + h) * kPer8;
      if ((piece == 7 && h == 1) || e0 >= n) continue;
      storeUnit(p, e0, static_cast<int>(n - e0 < kPer8 ? n - e0 : kPer8), u[h]);
    }
  }

  // Polls receive connector i's lines of this warp until every active one
  // carries the step's flag (a line is read whole: the flag vouches for the
  // data of the same load). False if the block fails meanwhile.
  __device__ bool pollLines128(int i, const uint64_t* line, uint64_t nlines, int piece, Pack8<T> (*v)[2]) {
    const char* base = rbuf_[i] + (rstep_[i] % kConnectorSteps) * kDevLL128SlotBytes + piece * 16;
    const uint64_t flag = rstep_[i] + 1;
    uint64_t start = 0;
    uint32_t spins = 0;
    for (;;) {
      bool miss = false;
#pragma unroll
      for (int k = 0; k < kPasses; ++k) {
        if (line[k] < nlines) {
          loadLL128(base + line[k] * kDevLL128LineBytes, &v[k][0].raw, &v[k][1].raw);
          miss = miss || (piece == 7 && v[k][1].raw != flag);
        } else {
          v[k][0].raw = v[k][1].raw = 0;
        }
      }
      if (!__any_sync(0xffffffffu, miss)) return true;
      bool stop = *sFail_ != 0;
      if (!stop && (++spins & 1023u) == 0) stop = shouldStop(&start, rpeer_[i], 0, rstep_[i]);
      if (__any_sync(0xffffffffu, stop)) return false;
    }
  }

  __device__ bool moveLL128(const T* src, bool srcPre, bool fromRecv, T* dst, bool toSend, uint64_t n) {
    static_assert(kDevThreads % 32 == 0, "whole warps");
    constexpr int kWarps = NT / 32;
    const uint64_t nlines = ((n + kPer8 - 1) / kPer8 + kUnitsPerLine - 1) / kUnitsPerLine;
    const int lane = static_cast<int>(threadIdx.x % 32), piece = lane % 8;
    for (uint64_t g = threadIdx.x / 32; g * kLinesPerWarp < nlines; g += kWarps) {  // uniform in a warp
      uint64_t line[kPasses];
#pragma unroll
      for (int k = 0; k < kPasses; ++k) line[k] = g * kLinesPerWarp + 4 * k + lane / 8;
      Pack8<T> acc[kPasses][2];
      bool have = false;
      auto take = [&](Pack8<T>(*v)[2]) {
#pragma unroll
        for (int k = 0; k < kPasses; ++k) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!have) {
              acc[k][h] = v[k][h];
            } else {
#pragma unroll
              for (int e = 0; e < kPer8; ++e) acc[k][h].elem[e] = op_(acc[k][h].elem[e], v[k][h].elem[e]);
            }
          }
        }
        have = true;
      };
      // The input is loaded before the first poll, so its latency overlaps the wait.
      Pack8<T> sv[kPasses][2];
      if (src != nullptr) {
#pragma unroll
        for (int k = 0; k < kPasses; ++k) loadUnits128(src, n, line[k], piece, srcPre, sv[k]);  // zero past n
      }
      auto takeSrc = [&]() { take(sv); };
      if (fromRecv) {
#pragma unroll
        for (int i = 0; i < kRecv; ++i) {
          if (recvOn(i)) {
            if (src != nullptr && i == localPos_) takeSrc();
            Pack8<T> v[kPasses][2];
            if (!pollLines128(i, line, nlines, piece, v)) return false;
            take(v);
          }
        }
        if (src != nullptr && localPos_ >= nrecv_) takeSrc();
      } else {
        takeSrc();
      }
      if (dst != nullptr) {
#pragma unroll
        for (int k = 0; k < kPasses; ++k)
          if (line[k] < nlines) storeUnits128(dst, n, line[k], piece, acc[k]);
      }
      if (toSend) {
#pragma unroll
        for (int i = 0; i < kSend; ++i) {
          if (sendOn(i)) {
            char* base = sbuf_[i] + (sstep_[i] % kConnectorSteps) * kDevLL128SlotBytes + piece * 16;
            const uint64_t flag = sstep_[i] + 1;
#pragma unroll
            for (int k = 0; k < kPasses; ++k) {
              if (line[k] < nlines) {
                storeLL128(base + line[k] * kDevLL128LineBytes, acc[k][0].raw,
                           piece == 7 ? flag : acc[k][1].raw);
              }
            }
          }
        }
      }
    }
    return true;
  }
#else
  __device__ bool moveLL128(const T*, bool, bool, T*, bool, uint64_t) {
    return false;
  }
#endif

  // ---- bounded waits ---------------------------------------------------------

  // Waits until *counter >= target (counters only grow).
  __device__ bool waitAtLeast(const uint64_t* counter, uint64_t target, int peer, int waitingFor, uint64_t step) {
    if (static_cast<int64_t>(target) <= 0) return true;
    uint64_t start = 0;
    uint32_t spins = 0;
    while (loadAcquire(counter) < target) {
      if (*sFail_ != 0) return false;
      if ((++spins & 1023u) == 0 && shouldStop(&start, peer, waitingFor, step)) return false;
    }
    return true;
  }

  __device__ bool shouldStop(uint64_t* start, int peer, int waitingFor, uint64_t step) {
    return waitMustStop(ctx_, sFail_, start, DevWait{channel_, peer, waitingFor, step});
  }

  int nsend_, nrecv_, localPos_;
  int only_ = -1;  // the connector stepEach is moving, else -1
  Op op_;
  DevCtx ctx_;
  int channel_;
  volatile int* sFail_;
  bool failed_ = false;
  bool recvDirect_ = false;  // ring direct mode: results arrive in this rank's output
  T* outBase_ = nullptr;     // ring direct mode: this rank's output part
  T* peerOut_ = nullptr;     // ... and the next rank's, where results go (null: the FIFO)
  uint64_t slotBytes_ = 0, maxElems_ = 0;
  char* sbuf_[kSend];
  uint64_t* scounter_[kSend];  // tail in the receiver's memory
  uint64_t* scredit_[kSend];   // head in our memory
  uint64_t* sstepPtr_[kSend];
  uint64_t sstep_[kSend];
  uint64_t* ssizes_[kSend];  // the receivers' step words
  bool netSend_ = false;     // a send connector's peer is a proxy: record every step's word
  bool checkSizes_ = false;
  int speer_[kSend];
  char* rbuf_[kRecv];
  uint64_t* rcounter_[kRecv];  // tail in our memory
  uint64_t* rcredit_[kRecv];   // head in the sender's memory
  uint64_t* rstepPtr_[kRecv];
  uint64_t rstep_[kRecv];
  uint64_t* rsizes_[kRecv];  // this end's step words (checkSizes)
  int rpeer_[kRecv];
};

}  // namespace braid::device
