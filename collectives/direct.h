// Direct algorithms for small messages: every rank talks to every other
// rank at once instead of passing data around a ring, so the latency is one
// exchange instead of 2(n-1) steps (DESIGN.md §4, "one-shot").
//
// The primitives send to every peer and receive from every peer, receive
// connectors in rank order with the rank's own input at its own position,
// so the reduction runs in rank order 0..n-1 on every rank and every rank
// computes bitwise the same result.
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

}  // namespace braid::coll
