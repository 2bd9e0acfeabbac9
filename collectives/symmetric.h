// Zero-copy algorithms over symmetric windows (ncclCommWindowRegister):
// every rank's buffers are mapped into every other rank, so a rank reads
// the peers' inputs and writes the peers' outputs itself, with no FIFO in
// between (DESIGN.md §4, "buffers registered once and mapped into every
// peer").
//
// Written against the SymPrims concept:
//
//   int nranks(), rank()
//   bool enter()                 publish this rank's buffers and wait for
//                                every peer's (false: failed, see status)
//   reduceToAll(offset, n)       out[q][offset..+n) = op over every rank's
//                                input, for every rank q
//   bool leave()                 say this rank is done and wait until every
//                                peer is, so no rank returns while others
//                                still read its input or write its output
#pragma once

#include <algorithm>
#include <cstddef>

#include "platform/host_device.h"

namespace braid::coll {

// All-reduce: rank r reduces slice r of the buffer (a 1/n share, 64-byte
// aligned) from every rank's input and writes it to every rank's output.
// Every element is computed once, so all ranks hold the same bits.
// `block` elements at a time, so what is written to the peers is read back
// from cache.
template <typename Sym>
BRAID_HOST_DEVICE void symmetricAllReduce(Sym& s, size_t count, size_t elemBytes, size_t block) {
  if (!s.enter()) return;
  const size_t n = static_cast<size_t>(s.nranks());
  const size_t align = std::max<size_t>(1, 64 / elemBytes);
  size_t per = (count + n - 1) / n;
  per = (per + align - 1) / align * align;
  const size_t lo = std::min(count, per * static_cast<size_t>(s.rank()));
  const size_t hi = std::min(count, lo + per);
  for (size_t b = lo; b < hi; b += block) s.reduceToAll(b, std::min(block, hi - b));
  s.leave();
}

}  // namespace braid::coll
