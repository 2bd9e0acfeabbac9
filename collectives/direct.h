// Direct algorithms for small messages: every rank talks to every other
// rank at once instead of passing data around a ring, so the latency is one
// exchange instead of 2(n-1) steps (DESIGN.md §4, "one-shot").
//
// `prims(p)` gives primitives whose send goes to rank p and whose receive
// comes from rank p. The reduction runs in rank order 0..n-1 on every rank,
// so every rank computes bitwise the same result.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

namespace braid::coll {

// count must fit in one step of the primitives.
template <typename PrimsFor, typename T, typename Op>
void oneShotAllReduce(PrimsFor&& prims, const T* in, T* out, size_t count, int rank, int n, Op op) {
  for (int s = 1; s < n; ++s) prims((rank + s) % n).send(in, count);
  std::vector<T> from(count * static_cast<size_t>(n));
  if (count > 0) std::memcpy(from.data() + static_cast<size_t>(rank) * count, in, count * sizeof(T));
  for (int s = 1; s < n; ++s) {
    int p = (rank - s + n) % n;
    prims(p).recv(from.data() + static_cast<size_t>(p) * count, count);
  }
  for (size_t i = 0; i < count; ++i) {
    T acc = from[i];
    for (int p = 1; p < n; ++p) acc = op(acc, from[static_cast<size_t>(p) * count + i]);
    out[i] = acc;
  }
}

}  // namespace braid::coll
