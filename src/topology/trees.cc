#include "topology/trees.h"

#include <algorithm>
#include <functional>

namespace braid {

std::vector<int> inOrderTreeParents(int n) {
  std::vector<int> parent(static_cast<size_t>(n), -1);
  // The subtree over positions [lo, hi] is rooted at its middle.
  std::function<int(int, int, int)> build = [&](int lo, int hi, int up) -> int {
    if (lo > hi) return -1;
    int mid = lo + (hi - lo) / 2;
    parent[static_cast<size_t>(mid)] = up;
    build(lo, mid - 1, mid);
    build(mid + 1, hi, mid);
    return mid;
  };
  build(0, n - 1, -1);
  return parent;
}

std::array<TreeLinks, 2> buildDoubleTree(const std::vector<int>& nodeOf, int rank) {
  const int nranks = static_cast<int>(nodeOf.size());
  int nnodes = 0;
  for (int node : nodeOf) nnodes = std::max(nnodes, node + 1);
  // The ranks of every node, in order; the first is the node's head.
  std::vector<std::vector<int>> members(static_cast<size_t>(nnodes));
  for (int r = 0; r < nranks; ++r) members[static_cast<size_t>(nodeOf[static_cast<size_t>(r)])].push_back(r);

  const int myNode = nodeOf[static_cast<size_t>(rank)];
  const std::vector<int>& mine = members[static_cast<size_t>(myNode)];
  size_t myPos = 0;
  while (mine[myPos] != rank) ++myPos;

  const std::vector<int> parents = inOrderTreeParents(nnodes);
  std::array<TreeLinks, 2> trees;
  for (int t = 0; t < 2; ++t) {
    TreeLinks& links = trees[static_cast<size_t>(t)];
    // Tree t's position of a node, and back.
    auto posOf = [&](int node) {
      if (t == 0) return node;
      return nnodes % 2 == 1 ? nnodes - 1 - node : (node + 1) % nnodes;
    };
    auto nodeAt = [&](int pos) {
      if (t == 0) return pos;
      return nnodes % 2 == 1 ? nnodes - 1 - pos : (pos - 1 + nnodes) % nnodes;
    };
    auto head = [&](int node) { return members[static_cast<size_t>(node)][0]; };
    // Inside the node: a chain from the head.
    if (myPos > 0) links.up = mine[myPos - 1];
    if (myPos + 1 < mine.size()) links.down[links.ndown++] = mine[myPos + 1];
    if (myPos != 0) continue;
    // Across nodes: only heads take part.
    const int pos = posOf(myNode);
    const int parentPos = parents[static_cast<size_t>(pos)];
    if (parentPos >= 0) links.up = head(nodeAt(parentPos));
    for (int p = 0; p < nnodes; ++p) {
      if (parents[static_cast<size_t>(p)] == pos) links.down[links.ndown++] = head(nodeAt(p));
    }
  }
  return trees;
}

std::vector<std::array<TreeLinks, 2>> buildDoubleTrees(const std::vector<int>& nodeOf) {
  const int nranks = static_cast<int>(nodeOf.size());
  int nnodes = 0;
  for (int node : nodeOf) nnodes = std::max(nnodes, node + 1);
  std::vector<std::vector<int>> members(static_cast<size_t>(nnodes));
  for (int r = 0; r < nranks; ++r) members[static_cast<size_t>(nodeOf[static_cast<size_t>(r)])].push_back(r);
  std::vector<std::array<TreeLinks, 2>> out(static_cast<size_t>(nranks));
  // Chains inside every node, in both trees.
  for (const std::vector<int>& mine : members) {
    for (size_t i = 0; i < mine.size(); ++i) {
      for (TreeLinks& links : out[static_cast<size_t>(mine[i])]) {
        if (i > 0) links.up = mine[i - 1];
        if (i + 1 < mine.size()) links.down[links.ndown++] = mine[i + 1];
      }
    }
  }
  // Heads across nodes: each position's parent, in each tree's numbering
  // (the same mapping as buildDoubleTree; children in position order).
  const std::vector<int> parents = inOrderTreeParents(nnodes);
  for (int t = 0; t < 2; ++t) {
    auto nodeAt = [&](int pos) {
      if (t == 0) return pos;
      return nnodes % 2 == 1 ? nnodes - 1 - pos : (pos - 1 + nnodes) % nnodes;
    };
    auto head = [&](int node) {
      return members[static_cast<size_t>(node)].empty() ? -1 : members[static_cast<size_t>(node)][0];
    };
    for (int p = 0; p < nnodes; ++p) {
      const int parentPos = parents[static_cast<size_t>(p)];
      const int me = head(nodeAt(p));
      if (me < 0 || parentPos < 0) continue;
      const int up = head(nodeAt(parentPos));
      out[static_cast<size_t>(me)][static_cast<size_t>(t)].up = up;
      TreeLinks& pl = out[static_cast<size_t>(up)][static_cast<size_t>(t)];
      if (pl.ndown < kMaxTreeChildren) pl.down[pl.ndown++] = me;
    }
  }
  return out;
}

}  // namespace braid
