// Ring and tree search (DESIGN.md §5): pure functions of a TopoSystem, so
// every rank computes the same schedule and tests replay saved machines.
//
// Rings, inside one node:
//  - NVSwitch: every order is as good; GPUs in document order, and the reverse.
//  - Direct NVLink / xGMI links that admit a Hamiltonian cycle: the largest
//    set of edge-disjoint cycles (widest first) over those links, each used in
//    both directions, then more cycles while they raise the total bandwidth.
//    On a full mesh of 8 (MI300X) this gives 3 disjoint cycles = 6 rings; on
//    MI250's partial mesh it gives cycles over xGMI only.
//  - Otherwise (PCIe): the order with the fewest CPU-interconnect (SYS)
//    crossings, then host-bridge (PHB) crossings, then switch hops; and its
//    reverse.
// Across nodes, channel c's ring is cut inside each node so that it leaves
// through the network port nearest its last GPU, spreading channels over the
// ports; the nodes' chains are joined in node order.
// Trees: channel c uses tree c % 2 of the double binary tree across nodes
// (topology/trees.h), with each node's chain in channel c's ring order,
// headed by the GPU where the ring enters the node.
// Bandwidth: every hop is routed over its best path; a link shared by k
// rings in one direction gives each 1/k; a channel's figure is its
// bottleneck. Expected bus bandwidth is the sum over channels.
//
// NCCL_RINGS (RCCL's syntax "0 1 2 3|3 2 1 0": GPU indices of one node in
// document order) replaces the intra-node search.
#pragma once

#include <string>
#include <vector>

#include "topology/model.h"
#include "topology/trees.h"
#include "util/status.h"

namespace braid {

struct SearchOptions {
  int nodes = 1;              // the node replicated this many times, joined by the network
  std::string ringsOverride;  // NCCL_RINGS syntax; "" = search
  int maxChannels = 16;
};

struct TreeNodeLinks {
  int parent = -1;
  std::vector<int> children;
};

struct Schedule {
  int nodes = 1;
  int gpusPerNode = 0;
  std::string pattern;  // how the rings were found ("nvswitch", "xgmi mesh", "pcie", "NCCL_RINGS", ...)
  // Per channel: the ring (global GPU indices = local + node * gpusPerNode).
  std::vector<std::vector<int>> rings;
  std::vector<double> ringBw;  // GB/s per channel
  // Per channel, the local index of the net port the ring leaves each node by (-1: one node).
  std::vector<int> ringNet;
  // Per channel, per global GPU: its tree links.
  std::vector<std::vector<TreeNodeLinks>> trees;
  std::vector<double> treeBw;
  double ringBusBw = 0;  // expected all-reduce bus bandwidth, GB/s
  double treeBusBw = 0;
  int nChannels() const { return static_cast<int>(rings.size()); }
};

Status searchSchedule(const TopoSystem& sys, const SearchOptions& opt, Schedule* out);

// The PCI addresses of the network ports for `gpu`'s traffic to other
// nodes, nearest first (by path type, then bandwidth). Ports equally near
// are rotated by the GPU's index, so GPUs sharing a switch with several NICs
// spread over them. Ports without a PCI address are left out.
std::vector<std::string> nicsNearestFirst(const TopoSystem& sys, int gpu);

// Parses NCCL_RINGS ("0 1 2 3|3 2 1 0", also "," or "-" between indices):
// every ring must list each of 0..nGpus-1 once.
Status parseRings(const std::string& text, int nGpus, std::vector<std::vector<int>>* rings);

// The ring of one channel as NCCL logs it ("0 1 2 3").
std::string ringText(const std::vector<int>& ring);

// A communicator's schedule over its ranks (indices are ranks), from what
// every rank told the others at init (NCCL's way: each rank's place is
// all-gathered, and every rank derives the same schedule from the table).
// `nodeOf[r]`: rank r's node, numbered by first appearance. `chainKeys[r]`:
// rank r's key in its node per channel (a local ring position, a NUMA node;
// channel c uses chainKeys[r][c % size]; empty: rank order).
// Channel c's ring visits the nodes in order, each node's ranks contiguously
// sorted by (key, rank), so a ring crosses the network once per node however
// the launcher placed ranks (mpirun --map-by node interleaves them). Its trees
// are the double binary tree across nodes over the same chains (tree c % 2).
Schedule commSchedule(const std::vector<int>& nodeOf, const std::vector<std::vector<int>>& chainKeys,
                      int nChannels);

}  // namespace braid
