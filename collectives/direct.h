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

// Two-shot all-reduce for medium sizes: a reduce-scatter and an
// all-gather, each one exchange with every peer at once (2 steps where a
// ring takes 2(n-1), moving the same bytes). Per round, rank r sends block
// p of its input to rank p (sendTo), reduces block r from every rank in
// rank order into its output and sends the result to every peer, then
// receives every other block's result (recvFrom). Blocks are split like the
// ring's, so rounds carry at most `chunk` elements per connector.
template <typename Prims, typename T>
BRAID_HOST_DEVICE void twoShotAllReduce(Prims& p, const T* in, T* out, size_t count, int rank, int n,
                                        size_t chunk) {
  auto connector = [rank](int peer) { return peer < rank ? peer : peer - 1; };
  for (size_t base = 0; base < count; base += chunk * static_cast<size_t>(n)) {
    const size_t align = sizeof(T) < 16 && chunk % (16 / sizeof(T)) == 0 ? 16 / sizeof(T) : 1;
    size_t per = (count - base + n - 1) / static_cast<size_t>(n);
    per = std::min(chunk, (per + align - 1) / align * align);
    auto offset = [&](int b) { return std::min(count, base + static_cast<size_t>(b) * per); };
    auto length = [&](int b) { return std::min(count, offset(b) + per) - offset(b); };
    for (int s = 1; s < n; ++s) {
      const int peer = (rank + s) % n;
      p.sendTo(connector(peer), in + offset(peer), length(peer));
    }
    p.recvReduceCopySend(in + offset(rank), out + offset(rank), length(rank));
    for (int s = 1; s < n; ++s) {
      const int peer = (rank + n - s) % n;
      p.recvFrom(connector(peer), out + offset(peer), length(peer));
    }
  }
}

}  // namespace braid::coll
