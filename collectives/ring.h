// Ring algorithms, written once against the Primitives concept:
//
//   size_t maxElems()                        elements one step carries
//   send(src, n) / recv(dst, n)
//   recvReduceSend(src, n)                   send op(received, src)
//   recvReduceCopySend(src, dst, n)          dst = op(received, src); send dst
//   recvReduceCopy(src, dst, n)              dst = op(received, src)
//   recvCopySend(dst, n)                     dst = received; send it
//   copySend(src, dst, n)                    dst = src; send src
//   sendEach(srcs, ns) / recvEach(dsts, ns)  connector i sends srcs[i] / receives into dsts[i],
//                                            ns[i] elements each (direct algorithms)
//
// `rank` is the position in the ring (the next position receives from us),
// which need not be the rank in the communicator: rings follow the topology.
// The position of a broadcast's or reduce's root is passed the same way;
// all-gather and reduce-scatter, whose blocks belong to communicator ranks,
// take `rankAt` (the rank at each ring position; null: the same). Data moves in rounds
// of one step per chunk, so every rank computes the same partition from
// (count, nranks, chunk) and the ranks' calls match one to one. `chunk` (at
// most p.maxElems()) is the elements one step carries; smaller chunks
// pipeline better and keep the working set in cache. A channel runs an
// algorithm on its part of the buffers: all-gather and reduce-scatter get
// `stride`, the distance between two ranks' blocks (the full count). These
// templates know nothing of transports, threads or devices: the host engine
// runs them over HostPrims, the GPU executor over device primitives.
//
// Results travel only through the verbs with an output: copySend,
// recvCopySend and recvReduceCopySend send data that is final at dst (for
// copySend, dst even when it is src), and the step they meet on the next
// rank is a recv or recvCopySend of the same offset of its output. Device
// primitives rely on it in ring direct mode (GPUs of one host), where
// such a step writes the next rank's output instead of its FIFO.
#pragma once

#include <algorithm>
#include <cstddef>

#include "platform/host_device.h"

namespace braid::coll {

BRAID_HOST_DEVICE inline int ringMod(int a, int n) {
  return ((a % n) + n) % n;
}

// All-reduce: reduce-scatter then all-gather, around the ring.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void ringAllReduce(Prims& p, const T* in, T* out, size_t count, int rank, int n, size_t chunk) {
  for (size_t base = 0; base < count; base += chunk * static_cast<size_t>(n)) {
    // Blocks start 16-byte aligned where the chunk allows (vector loads on GPUs).
    const size_t align = sizeof(T) < 16 && chunk % (16 / sizeof(T)) == 0 ? 16 / sizeof(T) : 1;
    size_t per = (count - base + n - 1) / static_cast<size_t>(n);
    per = std::min(chunk, (per + align - 1) / align * align);
    auto offset = [&](int c) { return std::min(count, base + static_cast<size_t>(c) * per); };
    auto length = [&](int c) { return std::min(count, offset(c) + per) - offset(c); };
    // Reduce-scatter: after n-1 steps this rank holds chunk rank+1 reduced.
    int c = rank;
    p.send(in + offset(c), length(c));
    for (int s = 1; s < n - 1; ++s) {
      c = ringMod(rank - s, n);
      p.recvReduceSend(in + offset(c), length(c));
    }
    c = ringMod(rank + 1, n);
    p.recvReduceCopySend(in + offset(c), out + offset(c), length(c));
    // All-gather: pass the reduced chunks on.
    for (int s = 1; s < n - 1; ++s) {
      c = ringMod(rank - s + 1, n);
      p.recvCopySend(out + offset(c), length(c));
    }
    c = ringMod(rank + 2, n);
    p.recv(out + offset(c), length(c));
  }
}

// All-gather: out holds n blocks `stride` apart; block r comes from rank r.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void ringAllGather(Prims& p, const T* in, T* out, size_t count, size_t stride, int rank,
                                     int n, size_t chunk, const int* rankAt = nullptr) {
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    auto block = [&](int pos) {
      return out + static_cast<size_t>(rankAt ? rankAt[pos] : pos) * stride + base;
    };
    p.copySend(in + base, block(rank), len);
    for (int s = 1; s < n - 1; ++s) p.recvCopySend(block(ringMod(rank - s, n)), len);
    p.recv(block(ringMod(rank + 1, n)), len);
  }
}

// Reduce-scatter: in holds n blocks `stride` apart; rank r gets block r reduced.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void ringReduceScatter(Prims& p, const T* in, T* out, size_t count, size_t stride, int rank,
                                         int n, size_t chunk, const int* rankAt = nullptr) {
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    auto block = [&](int pos) {
      return in + static_cast<size_t>(rankAt ? rankAt[pos] : pos) * stride + base;
    };
    p.send(block(ringMod(rank - 1, n)), len);
    for (int s = 1; s < n - 1; ++s) p.recvReduceSend(block(ringMod(rank - s - 1, n)), len);
    p.recvReduceCopy(block(rank), out + base, len);
  }
}

// Broadcast down the ring from the root's position.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void ringBroadcast(Prims& p, const T* in, T* out, size_t count, int rank, int n, int root, size_t chunk) {
  const int pos = ringMod(rank - root, n);
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    if (pos == 0) {
      p.copySend(in + base, out + base, len);
    } else if (pos == n - 1) {
      p.recv(out + base, len);
    } else {
      p.recvCopySend(out + base, len);
    }
  }
}

// Reduce along the ring, ending at the root's position.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void ringReduce(Prims& p, const T* in, T* out, size_t count, int rank, int n, int root, size_t chunk) {
  const int pos = ringMod(rank - root, n);
  for (size_t base = 0; base < count; base += chunk) {
    const size_t len = std::min(chunk, count - base);
    if (pos == 1) {
      p.send(in + base, len);
    } else if (pos == 0) {
      p.recvReduceCopy(in + base, out + base, len);
    } else {
      p.recvReduceSend(in + base, len);
    }
  }
}

}  // namespace braid::coll
