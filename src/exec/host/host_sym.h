// Host primitives of the zero-copy algorithms (collectives/symmetric.h):
// the peers' buffers are mapped into this process, and ranks meet through a
// slot per rank and channel in shared memory.
//
// A collective is two meetings. enter(): a rank writes where its buffers
// are (window and offset) into its slot and raises `arrive` to the
// collective's sequence number, then waits for every peer's, reading where
// theirs are. leave(): it raises `done` and waits for every peer's. A slot
// holding a later sequence number than this rank's means the ranks did not
// agree to run this collective zero-copy (one passed a buffer outside its
// windows): that is an error naming the rank, as is a peer that never
// arrives (the stall timeout), an abort or a cancelled channel.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "exec/host/host_prims.h"
#include "exec/host/host_reduce.h"

namespace braid {

// Most ranks a zero-copy collective runs on (one host's ranks).
constexpr int kMaxSymRanks = 64;

// What a rank publishes for one channel; lives in shared memory.
struct alignas(128) SymSlot {
  std::atomic<uint64_t> arrive{0};  // sequence number of the collective whose buffers are below
  std::atomic<uint64_t> done{0};    // sequence number of the last collective this rank finished
  uint64_t sendWindow = 0, sendOffset = 0, recvWindow = 0, recvOffset = 0;
  uint64_t scalar = 0;  // PreMulSum: the rank's scalar (its bits), which scales its input
};

// Where rank `rank` mapped window `window` of each peer: the communicator's
// windows (core/symmetric.h) answer.
class SymWindowMap {
 public:
  // The start of `rank`'s window `window` in this process, or null.
  virtual char* base(int rank, uint64_t window) const = 0;

 protected:
  ~SymWindowMap() = default;
};

// This rank's part in one zero-copy collective on one channel.
struct SymCall {
  int rank = 0, nranks = 0;
  SymSlot* const* slots = nullptr;  // every rank's slot of this channel
  const SymWindowMap* windows = nullptr;
  uint64_t sendWindow = 0, sendOffset = 0, recvWindow = 0, recvOffset = 0;  // this rank's buffers
  size_t channelOffset = 0;  // elements: where the channel's part of the buffers starts
};

template <typename T, typename Op>
class HostSymPrims {
 public:
  using Elem = T;
  static constexpr int kMaxRanks = kMaxSymRanks;

  HostSymPrims(const SymCall& call, const PrimsContext& ctx, Op op)
      : call_(call), ctx_(ctx), op_(op), backoff_(ctx.abort, ctx.timeoutSec, ctx.cancel, ctx.spin) {}

  int nranks() const { return call_.nranks; }
  int rank() const { return call_.rank; }
  const Status& status() const { return status_; }

  bool enter() {
    const uint64_t seq = ctx_.seq;
    SymSlot* mine = call_.slots[call_.rank];
    mine->sendWindow = call_.sendWindow;
    mine->sendOffset = call_.sendOffset;
    mine->recvWindow = call_.recvWindow;
    mine->recvOffset = call_.recvOffset;
    if constexpr (Op::kHasPre) {
      mine->scalar = 0;
      std::memcpy(&mine->scalar, &op_.scalar, sizeof(T));
    }
    mine->arrive.store(seq, std::memory_order_release);
    for (int q = 0; q < call_.nranks; ++q) {
      const SymSlot* s = call_.slots[q];
      if (!meet(s->arrive, q, "to enter it")) return false;
      char* sendBase = call_.windows->base(q, s->sendWindow);
      char* recvBase = call_.windows->base(q, s->recvWindow);
      if (sendBase == nullptr || recvBase == nullptr) {
        status_ = invalidUsage(what(), ": rank ", q, " passed a buffer in a window this rank has not mapped");
        return false;
      }
      in_[q] = reinterpret_cast<const T*>(sendBase + s->sendOffset) + call_.channelOffset;
      if constexpr (Op::kHasPre) scalars_[(q - call_.rank + call_.nranks) % call_.nranks] = s->scalar;
      out_[q] = reinterpret_cast<T*>(recvBase + s->recvOffset) + call_.channelOffset;
    }
    return true;
  }

  const T* input(int q) const { return in_[q]; }
  T* output(int q) const { return out_[q]; }

  // src[j] is rank (rank() + j) % nranks()'s (collectives/symmetric.h).
  void reduceCopy(const T* const* src, int nsrc, T* const* dst, int ndst, size_t offset, size_t n) {
    if (n == 0) return;
    T* d = dst[0] + offset;
    if constexpr (Op::kHasPre) {  // every source scaled by its rank's scalar
      const Op o0 = sourceOp(0);
      const T* a = src[0] + offset;
      if (nsrc == 1) {
        for (size_t i = 0; i < n; ++i) d[i] = o0.pre(a[i]);
      } else {
        const Op o1 = sourceOp(1);
        const T* b = src[1] + offset;
        for (size_t i = 0; i < n; ++i) d[i] = op_(o0.pre(a[i]), o1.pre(b[i]));
      }
      for (int j = 2; j < nsrc; ++j) {
        const Op o = sourceOp(j);
        const T* b = src[j] + offset;
        for (size_t i = 0; i < n; ++i) d[i] = op_(d[i], o.pre(b[i]));
      }
      for (int k = 1; k < ndst; ++k) copyElems(dst[k] + offset, d, n);
      return;
    }
    if (nsrc == 1) {
      for (int k = 0; k < ndst; ++k) {
        if (dst[k] != src[0]) copyElems(dst[k] + offset, src[0] + offset, n);
      }
      return;
    }
    if (nsrc == 2 && ndst == 2) {  // one pass writes both outputs as the inputs are read
      reduceInto2(d, dst[1] + offset, src[0] + offset, src[1] + offset, n, op_);
      return;
    }
    reduceInto(d, src[0] + offset, src[1] + offset, n, op_);
    for (int j = 2; j < nsrc; ++j) reduceInto(d, d, src[j] + offset, n, op_);
    for (int k = 1; k < ndst; ++k) copyElems(dst[k] + offset, d, n);
  }

  bool leave() {
    if (!status_.ok()) return false;
    call_.slots[call_.rank]->done.store(ctx_.seq, std::memory_order_release);
    for (int q = 0; q < call_.nranks; ++q) {
      if (!meet(call_.slots[q]->done, q, "to finish it")) return false;
    }
    return true;
  }

 private:
  // The operator whose pre() source j's data goes through.
  Op sourceOp(int j) const {
    Op o = op_;
    if constexpr (Op::kHasPre) std::memcpy(&o.scalar, &scalars_[j], sizeof(T));
    return o;
  }
  // Waits until `flag` (rank q's) reaches this collective's sequence number.
  bool meet(const std::atomic<uint64_t>& flag, int q, const char* what) {
    const uint64_t seq = ctx_.seq;
    Backoff::Result r = backoff_.wait([&] { return flag.load(std::memory_order_acquire) >= seq; },
                                      ctx_.peerEnded != nullptr ? &ctx_.peerEnded[q] : nullptr);
    if (r != Backoff::Result::Ready) {
      status_ = detail::waitFailure(r, ctx_, what, q, seq);
      if (r == Backoff::Result::TimedOut) {
        status_ = Status(status_.code(), strCat(status_.message(),
                                                ", or it passed buffers outside its windows "
                                                "(ncclCommWindowRegister) and runs another algorithm"));
      }
      return false;
    }
    if (flag.load(std::memory_order_acquire) != seq) {
      status_ = invalidUsage(this->what(), ": rank ", q, " is at collective #", flag.load(),
                             " zero-copy while this rank runs #", seq,
                             " zero-copy: the ranks disagree on whether their buffers are in windows "
                             "(ncclCommWindowRegister); every rank must pass windowed buffers, or none");
      return false;
    }
    return true;
  }
  std::string what() const { return strCat(ctx_.collective, " #", ctx_.seq); }

  SymCall call_;
  PrimsContext ctx_;
  Op op_;
  Backoff backoff_;
  Status status_;
  const T* in_[kMaxSymRanks] = {};
  T* out_[kMaxSymRanks] = {};
  uint64_t scalars_[kMaxSymRanks] = {};  // PreMulSum: by source index, as reduceCopy's
};

}  // namespace braid
