// Trees for tree algorithms: chains inside a node, a double binary tree
// across nodes (DESIGN.md §5). Pure functions of the rank layout, so every
// rank computes the same trees and tests need no hardware.
//
// Inside each node the ranks (in ring order) form a chain whose first rank,
// the node's head, joins the tree across nodes. Across nodes, tree 0 is a
// balanced in-order binary tree over node indices 0..N-1, and tree 1 is the
// same shape over the indices mirrored (odd N) or shifted by one (even N),
// so that a node that is a leaf in one tree is mostly interior in the other
// and the two trees together use every node's links evenly. Channels
// alternate between the two trees.
#pragma once

#include <array>
#include <vector>

namespace braid {

constexpr int kMaxTreeChildren = 3;  // the next rank of the chain and two child nodes

struct TreeLinks {
  int up = -1;  // parent rank, -1 at the root
  int down[kMaxTreeChildren] = {-1, -1, -1};
  int ndown = 0;
};

// `nodeOf[r]` is the node index (0..N-1, any order) of rank r; ranks of one
// node keep their relative order. Returns rank `rank`'s links in trees 0 and 1.
std::array<TreeLinks, 2> buildDoubleTree(const std::vector<int>& nodeOf, int rank);
// The same for every rank at once (result[r] == buildDoubleTree(nodeOf, r)),
// in time linear in the rank count.
std::vector<std::array<TreeLinks, 2>> buildDoubleTrees(const std::vector<int>& nodeOf);

// Parent of every position 0..n-1 in the balanced in-order binary tree over
// positions (-1 for the root). Exposed for tests.
std::vector<int> inOrderTreeParents(int n);

}  // namespace braid
