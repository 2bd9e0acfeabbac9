// Direct algorithms for small messages: every rank talks to every other
// rank at once instead of passing data around a ring, so the latency is one
// exchange instead of 2(n-1) steps (DESIGN.md §4, "one-shot").
//
// The primitives send to every peer and receive from every peer, receive
// connectors in rank order with the rank's own input at its own position,
// so the reduction runs in rank order 0..n-1 on every rank and every rank
// computes bitwise the same result. Connector i is rank i for i < rank and
// rank i + 1 above (every rank but this one, in rank order).
#pragma once

#include <algorithm>
#include <cstddef>

#include "platform/host_device.h"

namespace braid::coll {

template <typename Prims, typename T>
BRAID_HOST_DEVICE void oneShotAllReduce(Prims& p, const T* in, T* out, size_t count, size_t chunk) {
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    p.send(in + base, len);
    p.recvReduceCopy(in + base, out + base, len);
  }
}

// Most peers of a direct algorithm (both engines' primitives hold this many).
constexpr int kDirectMaxPeers = 8;

// The rank behind connector i of a direct algorithm: every rank but this
// one, in rank order.
BRAID_HOST_DEVICE inline int directPeer(int i, int rank) {
  return i < rank ? i : i + 1;
}

// The other collectives in one exchange, for small messages on one host
// (the host engine; the selector does not offer them on GPUs). A ring
// passes such a message through n - 1 ranks in turn, each of which must be
// running; here every rank waits for one step of one rank (or the root for
// all at once).
//
// Broadcast and reduce (`reduce`): the primitives of a rank hold only the
// connectors it uses. The root sends to every peer (broadcast) or
// receives from every peer in rank order, its own input at its own
// position (reduce); the others receive from or send to the root alone.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void directRooted(Prims& p, const T* in, T* out, size_t count, bool root, bool reduce,
                                    size_t chunk) {
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    if (root && reduce) {
      p.recvReduceCopy(in + base, out + base, len);
    } else if (root) {
      p.copySend(in + base, out + base, len);
    } else if (reduce) {
      p.send(in + base, len);
    } else {
      p.recv(out + base, len);
    }
  }
}

// All-gather: this rank's block to every peer at once, then every peer's
// block from its connector. `stride` as for the ring.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void directAllGather(Prims& p, const T* in, T* out, size_t count, size_t stride, int rank,
                                       int n, size_t chunk) {
  T* blocks[kDirectMaxPeers];
  size_t lens[kDirectMaxPeers];
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    for (int i = 0; i < n - 1 && i < kDirectMaxPeers; ++i) {
      blocks[i] = out + static_cast<size_t>(directPeer(i, rank)) * stride + base, lens[i] = len;
    }
    p.copySend(in + base, out + static_cast<size_t>(rank) * stride + base, len);
    p.recvEach(blocks, lens);
  }
}

// Reduce-scatter: block p of this rank's input to rank p, then this rank's
// block from every peer, reduced in rank order with its own.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void directReduceScatter(Prims& p, const T* in, T* out, size_t count, size_t stride,
                                           int rank, int n, size_t chunk) {
  const T* blocks[kDirectMaxPeers];
  size_t lens[kDirectMaxPeers];
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    for (int i = 0; i < n - 1 && i < kDirectMaxPeers; ++i) {
      blocks[i] = in + static_cast<size_t>(directPeer(i, rank)) * stride + base, lens[i] = len;
    }
    p.sendEach(blocks, lens);
    p.recvReduceCopy(in + static_cast<size_t>(rank) * stride + base, out + base, len);
  }
}

// Two-shot all-reduce for medium sizes: a reduce-scatter and an
// all-gather, each one exchange with every peer at once (a ring's bytes in
// 2 steps instead of 2(n-1)). Per round, rank r sends block p of its input
// to rank p (sendEach), reduces block r from every rank in rank order into
// its output and sends the result to every peer, then receives every other
// block's result (recvEach). Blocks are split like the ring's, so rounds
// carry at most `chunk` elements per connector. At most kDirectMaxPeers + 1
// ranks.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void twoShotAllReduce(Prims& p, const T* in, T* out, size_t count, int rank, int n,
                                        size_t chunk) {
  const T* blockIn[kDirectMaxPeers];
  T* blockOut[kDirectMaxPeers];
  size_t blockLen[kDirectMaxPeers];
  for (size_t base = 0; base < count; base += chunk * static_cast<size_t>(n)) {
    const size_t align = sizeof(T) < 16 && chunk % (16 / sizeof(T)) == 0 ? 16 / sizeof(T) : 1;
    size_t per = (count - base + n - 1) / static_cast<size_t>(n);
    per = std::min(chunk, (per + align - 1) / align * align);
    auto offset = [&](int b) { return std::min(count, base + static_cast<size_t>(b) * per); };
    auto length = [&](int b) { return std::min(count, offset(b) + per) - offset(b); };
    for (int i = 0; i < n - 1 && i < kDirectMaxPeers; ++i) {
      const int peer = directPeer(i, rank);
      blockIn[i] = in + offset(peer);
      blockOut[i] = out + offset(peer);
      blockLen[i] = length(peer);
    }
    p.sendEach(blockIn, blockLen);
    p.recvReduceCopySend(in + offset(rank), out + offset(rank), length(rank));
    p.recvEach(blockOut, blockLen);
  }
}

}  // namespace braid::coll
