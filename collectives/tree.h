// Tree all-reduce, written against the Primitives concept (see ring.h).
//
// Data flows up a tree to its root, reduced on the way (each node adds its
// children's partial results to its own input), then back down, copied on
// the way. Inside a node the tree is a chain; across nodes it is one of the
// two complementary binary trees of a double binary tree (src/topology/
// trees.h): a channel's connectors say which. Two primitives objects carry
// the two directions: `up` receives from the children and sends to the
// parent, `down` receives from the parent and sends to the children.
//
// Pipelining: a node sends chunk k up before it waits for chunk k - lag to
// come down, so the reduction of later chunks overlaps the broadcast of
// earlier ones. Deadlock-free for lag < FIFO depth: every wait depends only
// on work of smaller chunk index, or of the same index nearer the leaves
// (going up) or the root (going down).
#pragma once

#include <algorithm>
#include <cstddef>

#include "platform/host_device.h"

namespace braid::coll {

struct TreeRole {
  bool hasParent;
  bool hasChildren;
};

template <typename UpPrims, typename DownPrims, typename T>
BRAID_HOST_DEVICE void treeAllReduce(UpPrims& up, DownPrims& down, const T* in, T* out, size_t count, TreeRole role,
                   size_t chunk, int lag) {
  const size_t nchunks = (count + chunk - 1) / chunk;
  auto span = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  auto reduceUp = [&](size_t k) {
    const size_t off = k * chunk, len = span(k);
    if (!role.hasChildren) {
      up.send(in + off, len);  // a leaf (a node with no parent has children: n > 1)
    } else if (role.hasParent) {
      up.recvReduceSend(in + off, len);
    } else {
      up.recvReduceCopy(in + off, out + off, len);  // the root holds the result
    }
  };
  auto broadcastDown = [&](size_t k) {
    const size_t off = k * chunk, len = span(k);
    if (!role.hasParent) {
      down.copySend(out + off, out + off, len);
    } else if (role.hasChildren) {
      down.recvCopySend(out + off, len);
    } else {
      down.recv(out + off, len);
    }
  };
  for (size_t k = 0; k < nchunks + static_cast<size_t>(lag); ++k) {
    if (k < nchunks) reduceUp(k);
    if (k >= static_cast<size_t>(lag)) broadcastDown(k - static_cast<size_t>(lag));
  }
}

}  // namespace braid::coll
