// Zero-copy algorithms over symmetric windows (ncclCommWindowRegister):
// every rank's buffers are mapped into every other rank, so a rank reads
// the peers' inputs and writes the peers' outputs itself, with no FIFO in
// between (DESIGN.md §4, "buffers registered once and mapped into every
// peer").
//
// Written against the SymPrims concept:
//
//   using Elem; static constexpr int kMaxRanks
//   int nranks(), rank()
//   bool enter()              publish this rank's buffers and wait for every
//                             peer's (false: failed; the status says why)
//   const Elem* input(q)      rank q's input, Elem* output(q) its output
//                             (the channel's part), valid after enter()
//   reduceCopy(src, nsrc, dst, ndst, offset, n)
//                             dst[k][offset + i] = op over src[j][offset + i]
//                             for every k (nsrc 1: a copy); dst[0] may be
//                             src[0] (in place), nothing else may overlap;
//                             src[j] is rank (rank() + j) % nranks()'s data
//                             (PreMulSum scales it by that rank's scalar)
//   bool leave()              say this rank is done and wait until every
//                             peer is, so no rank returns while others still
//                             read its input or write its output
//
// Each rank moves only its own share, so every element is computed once
// and all ranks hold the same bits. `block` elements at a time, so what is
// written to several outputs is read back from cache.
#pragma once

#include <algorithm>
#include <cstddef>

#include "platform/host_device.h"

namespace braid::coll {

// All-reduce: rank r reduces slice r (a 1/n share, 64-byte aligned) of
// every rank's input into every rank's output.
template <typename Sym>
BRAID_HOST_DEVICE void symmetricAllReduce(Sym& s, size_t count, size_t block) {
  using T = typename Sym::Elem;
  if (!s.enter()) return;
  const int n = s.nranks(), r = s.rank();
  const size_t align = std::max<size_t>(1, 64 / sizeof(T));
  size_t per = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  per = (per + align - 1) / align * align;
  const size_t lo = std::min(count, per * static_cast<size_t>(r));
  const size_t hi = std::min(count, lo + per);
  const T* src[Sym::kMaxRanks];
  T* dst[Sym::kMaxRanks];
  for (int k = 0; k < n; ++k) {  // this rank first: in place, its output is its input
    const int q = (r + k) % n;
    src[k] = s.input(q);
    dst[k] = s.output(q);
  }
  for (size_t b = lo; b < hi; b += block) s.reduceCopy(src, n, dst, n, b, std::min(block, hi - b));
  s.leave();
}

// All-gather: rank r copies its input into block r of every rank's output
// (blocks `stride` elements apart).
template <typename Sym>
BRAID_HOST_DEVICE void symmetricAllGather(Sym& s, size_t count, size_t stride, size_t block) {
  using T = typename Sym::Elem;
  if (!s.enter()) return;
  const int n = s.nranks(), r = s.rank();
  const T* src[1] = {s.input(r)};
  T* dst[Sym::kMaxRanks];
  for (int k = 0; k < n; ++k) dst[k] = s.output((r + k) % n) + static_cast<size_t>(r) * stride;
  for (size_t b = 0; b < count; b += block) s.reduceCopy(src, 1, dst, n, b, std::min(block, count - b));
  s.leave();
}

// Reduce-scatter: rank r reduces block r of every rank's input (blocks
// `stride` elements apart) into its output.
template <typename Sym>
BRAID_HOST_DEVICE void symmetricReduceScatter(Sym& s, size_t count, size_t stride, size_t block) {
  using T = typename Sym::Elem;
  if (!s.enter()) return;
  const int n = s.nranks(), r = s.rank();
  const T* src[Sym::kMaxRanks];
  for (int k = 0; k < n; ++k) src[k] = s.input((r + k) % n) + static_cast<size_t>(r) * stride;
  T* dst[1] = {s.output(r)};
  for (size_t b = 0; b < count; b += block) s.reduceCopy(src, n, dst, 1, b, std::min(block, count - b));
  s.leave();
}

}  // namespace braid::coll
