// Ring and tree search on saved machines: properties, not just strings.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "topology/model.h"
#include "topology/search.h"
#include "topology/topology.h"
#include "topology/xml.h"

namespace braid {
namespace {

std::string fixture(const std::string& name) {
  return std::string(BRAID_TOPO_FIXTURES) + "/" + name;
}

TopoSystem load(const std::string& name) {
  TopoSystem sys;
  Status s = topoLoadFile(fixture(name), &sys);
  EXPECT_TRUE(s.ok()) << s.message();
  return sys;
}

Schedule search(const TopoSystem& sys, int nodes = 1, const std::string& rings = "") {
  Schedule sched;
  SearchOptions opt;
  opt.nodes = nodes;
  opt.ringsOverride = rings;
  Status s = searchSchedule(sys, opt, &sched);
  EXPECT_TRUE(s.ok()) << s.message();
  return sched;
}

// Every ring visits every GPU exactly once.
void expectHamiltonian(const Schedule& s) {
  const int n = s.nodes * s.gpusPerNode;
  ASSERT_GT(s.nChannels(), 0);
  for (const auto& ring : s.rings) {
    ASSERT_EQ(static_cast<int>(ring.size()), n);
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << ringText(ring);
  }
}

// Each hop of every ring is a direct link of the fast class.
void expectDirectFastHops(const TopoSystem& sys, const Schedule& s, PathType type) {
  for (const auto& ring : s.rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      const TopoPath& p = sys.gpuPath(ring[i], ring[(i + 1) % ring.size()]);
      EXPECT_EQ(p.type, type) << ringText(ring);
      EXPECT_EQ(p.nodes.size(), 2u) << ringText(ring);
    }
  }
}

// One root per channel, parents and children agree, every GPU reaches the root.
void expectValidTrees(const Schedule& s) {
  const int n = s.nodes * s.gpusPerNode;
  ASSERT_EQ(s.trees.size(), s.rings.size());
  for (const auto& tree : s.trees) {
    ASSERT_EQ(static_cast<int>(tree.size()), n);
    int roots = 0;
    for (int g = 0; g < n; ++g) {
      const TreeNodeLinks& t = tree[static_cast<size_t>(g)];
      if (t.parent < 0) ++roots;
      for (int c : t.children) EXPECT_EQ(tree[static_cast<size_t>(c)].parent, g);
      if (t.parent >= 0) {
        const auto& siblings = tree[static_cast<size_t>(t.parent)].children;
        EXPECT_NE(std::find(siblings.begin(), siblings.end(), g), siblings.end());
      }
      int at = g, steps = 0;
      while (tree[static_cast<size_t>(at)].parent >= 0 && steps <= n) {
        at = tree[static_cast<size_t>(at)].parent;
        ++steps;
      }
      EXPECT_LE(steps, n - 1) << "cycle in the tree";
    }
    EXPECT_EQ(roots, 1);
  }
}

int sysCrossings(const TopoSystem& sys, const std::vector<int>& ring) {
  int n = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    n += sys.gpuPath(ring[i], ring[(i + 1) % ring.size()]).type == PathType::Sys;
  return n;
}

TEST(TopoSearch, H200PairRingsOverNvLink) {
  TopoSystem sys = load("h200_nv18_vm.xml");
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  expectDirectFastHops(sys, s, PathType::Nvl);
  EXPECT_EQ(s.nChannels(), 2);
  // Two channels share the 18 links: together they get all of them.
  EXPECT_NEAR(s.ringBusBw, 18 * 20.6, 1e-6);
}

// NCCL 2.28.9 on the lab machine: "Channel 00/24 : 0 1" ... all 24 alike.
TEST(TopoSearch, LabH200AsNcclSawIt) {
  TopoSystem sys = load("h200_lab_nccl_dump.xml");
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  for (const auto& ring : s.rings) EXPECT_EQ(ringText(ring), "0 1");
  EXPECT_NEAR(s.ringBusBw, 18 * 20.6, 1e-6);
}

TEST(TopoSearch, DgxH100AnyOrderThroughTheSwitch) {
  TopoSystem sys = load("dgx_h100.xml");
  Schedule s = search(sys);
  EXPECT_EQ(s.pattern, "nvswitch");
  expectHamiltonian(s);
  expectValidTrees(s);
  for (const auto& ring : s.rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      EXPECT_EQ(sys.gpuPath(ring[i], ring[(i + 1) % ring.size()]).type, PathType::Nvl);
    }
  }
  EXPECT_NEAR(s.ringBusBw, 18 * 20.6, 1e-6);
}

TEST(TopoSearch, Mi250RingsAreHamiltonianOverXgmiOnly) {
  TopoSystem sys = load("mi250_8gcd.xml");
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  expectDirectFastHops(sys, s, PathType::Xgmi);
  // The widest cycle uses the 4- and 2-link bundles only: 100 GB/s per ring and direction.
  EXPECT_NEAR(s.ringBw[0], 100.0, 1e-6);
  EXPECT_GE(s.nChannels(), 2);
}

TEST(TopoSearch, Mi300xRingsAreEdgeDisjoint) {
  TopoSystem sys = load("mi300x.xml");
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  expectDirectFastHops(sys, s, PathType::Xgmi);
  // K8 holds 3 edge-disjoint Hamiltonian cycles; each runs both ways.
  ASSERT_EQ(s.nChannels(), 6);
  std::set<std::pair<int, int>> directed, undirected;
  for (const auto& ring : s.rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = ring[i], b = ring[(i + 1) % ring.size()];
      EXPECT_TRUE(directed.insert({a, b}).second) << "directed link " << a << "->" << b << " used twice";
      undirected.insert({std::min(a, b), std::max(a, b)});
    }
  }
  EXPECT_EQ(undirected.size(), 24u);  // 24 of the 28 links carry traffic
  for (double bw : s.ringBw) EXPECT_NEAR(bw, 64.0, 1e-6);
  EXPECT_NEAR(s.ringBusBw, 6 * 64.0, 1e-6);
}

TEST(TopoSearch, PcieRingsCrossTheSocketsAsLittleAsPossible) {
  TopoSystem sys = load("pcie_2socket.xml");
  Schedule s = search(sys);
  EXPECT_EQ(s.pattern, "pci");
  expectHamiltonian(s);
  expectValidTrees(s);
  for (const auto& ring : s.rings) EXPECT_EQ(sysCrossings(sys, ring), 2) << ringText(ring);
  // A ring that zig-zags between the sockets crosses four times and is slower.
  Schedule bad = search(sys, 1, "0 2 1 3|3 1 2 0");
  EXPECT_EQ(sysCrossings(sys, bad.rings[0]), 4);
  EXPECT_LT(bad.ringBw[0], s.ringBw[0]);
}

TEST(TopoSearch, Mi100RingFollowsTheBridge) {
  TopoSystem sys = load("mi100_xgmi_ring.xml");
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  expectDirectFastHops(sys, s, PathType::Xgmi);
  ASSERT_EQ(s.nChannels(), 2);  // the one cycle, both ways
  EXPECT_NEAR(s.ringBusBw, 2 * 46.0, 1e-6);
}

TEST(TopoSearch, FlatVmIsRecognisedAndStillGetsRings) {
  TopoSystem sys = load("flat_vm_4gpu.xml");
  EXPECT_TRUE(sys.flat);
  EXPECT_EQ(sys.gpuPath(0, 3).type, PathType::Phb);
  Schedule s = search(sys);
  EXPECT_EQ(s.pattern, "pci");
  expectHamiltonian(s);
  expectValidTrees(s);
  EXPECT_GT(s.ringBusBw, 0);
}

TEST(TopoSearch, EightPcieGpusCrossSocketsTwiceAndHostBridgesFourTimes) {
  TopoSystem sys = load("pcie_2socket_8gpu.xml");
  EXPECT_FALSE(sys.flat);
  Schedule s = search(sys);
  expectHamiltonian(s);
  expectValidTrees(s);
  for (const auto& ring : s.rings) {
    EXPECT_EQ(sysCrossings(sys, ring), 2) << ringText(ring);
    int phbOrWorse = 0;
    for (size_t i = 0; i < ring.size(); ++i) {
      phbOrWorse +=
          pathRank(sys.gpuPath(ring[i], ring[(i + 1) % ring.size()]).type) >= pathRank(PathType::Phb);
    }
    EXPECT_EQ(phbOrWorse, 4) << ringText(ring);  // each of the 4 switches entered and left once
  }
}

// NCCL_P2P_LEVEL's values by name and number, and which peers each admits
// on a two-socket PCIe machine (4 switches of 2 GPUs): from GPU 0, its
// switch mate at PIX, the other switch of its socket through the host
// bridge at PHB, every GPU at SYS.
TEST(TopoPaths, P2pLevelsByNameAndNumber) {
  struct Case {
    const char* text;
    int rank;
  };
  for (Case c : {Case{"", -1}, Case{"LOC", 0}, Case{"nvl", 1}, Case{"XGMI", 1}, Case{"PIX", 2},
                 Case{" pxb ", 3}, Case{"PHB", 4}, Case{"SYS", 5}, Case{"0", 0}, Case{"5", 5}}) {
    int rank = -2;
    Status s = parsePathLevel(c.text, &rank);
    EXPECT_TRUE(s.ok()) << c.text << ": " << s.message();
    EXPECT_EQ(rank, c.rank) << c.text;
  }
  for (const char* bad : {"6", "-1", "NET", "fast"}) {
    int rank = 0;
    Status s = parsePathLevel(bad, &rank);
    EXPECT_EQ(s.code(), ncclInvalidArgument) << bad;
    EXPECT_NE(s.message().find("PXB"), std::string::npos) << s.message();
  }
  TopoSystem sys = load("pcie_2socket_8gpu.xml");
  auto admitted = [&](const char* level) {
    int rank = 0, n = 0;
    EXPECT_TRUE(parsePathLevel(level, &rank).ok());
    for (int h = 1; h < sys.nGpus(); ++h) n += pathRank(sys.gpuPath(0, h).type) <= rank;
    return n;
  };
  EXPECT_EQ(admitted("NVL"), 0);
  EXPECT_EQ(admitted("PIX"), 1);
  EXPECT_EQ(admitted("PXB"), 1);
  EXPECT_EQ(admitted("PHB"), 3);
  EXPECT_EQ(admitted("SYS"), 7);
}

TEST(TopoSearch, NcclRingsOverride) {
  TopoSystem sys = load("mi300x.xml");
  Schedule s = search(sys, 1, "0 1 2 3 4 5 6 7|7 6 5 4 3 2 1 0");
  EXPECT_EQ(s.pattern, "NCCL_RINGS");
  ASSERT_EQ(s.nChannels(), 2);
  EXPECT_EQ(ringText(s.rings[0]), "0 1 2 3 4 5 6 7");
  EXPECT_EQ(ringText(s.rings[1]), "7 6 5 4 3 2 1 0");

  std::vector<std::vector<int>> rings;
  EXPECT_TRUE(parseRings("0,1,2,3 | 3-2-1-0", 4, &rings).ok());
  ASSERT_EQ(rings.size(), 2u);
  EXPECT_EQ(rings[1], (std::vector<int>{3, 2, 1, 0}));
  Status dup = parseRings("0 1 1 3", 4, &rings);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("must list each GPU 0..3 once"), std::string::npos) << dup.message();
  Status range = parseRings("0 1 2 9", 4, &rings);
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.message().find("'9' is not a GPU index"), std::string::npos) << range.message();
  EXPECT_FALSE(parseRings("0 1 x 3", 4, &rings).ok());
  EXPECT_FALSE(parseRings("|", 4, &rings).ok());
}

TEST(TopoSearch, MultiNodeRingsLeaveThroughTheNearestNic) {
  TopoSystem sys = load("dgx_h100.xml");
  for (int nodes : {2, 16, 128}) {
    Schedule s = search(sys, nodes);
    expectHamiltonian(s);
    expectValidTrees(s);
    std::set<int> netsUsed;
    for (int c = 0; c < s.nChannels(); ++c) {
      const auto& ring = s.rings[static_cast<size_t>(c)];
      // Each node's GPUs are contiguous in the ring.
      for (size_t i = 0; i < ring.size(); ++i) EXPECT_EQ(ring[i] / 8, static_cast<int>(i / 8));
      // The ring leaves each node from the GPU whose own NIC it uses.
      const int exitGpu = ring[7] % 8;
      EXPECT_EQ(s.ringNet[static_cast<size_t>(c)], exitGpu);
      netsUsed.insert(s.ringNet[static_cast<size_t>(c)]);
      // The tree's root is the first GPU of node 0 in this channel's ring, or a node head.
      EXPECT_LE(s.ringBw[static_cast<size_t>(c)], 50.0 + 1e-9);
    }
    EXPECT_EQ(static_cast<int>(netsUsed.size()), s.nChannels());  // spread: one NIC per channel
    // Every one of the 8 NICs carries a ring, each at its share of the switch ports.
    EXPECT_EQ(s.nChannels(), 8);
    EXPECT_NEAR(s.ringBusBw, 18 * 20.6, 1e-6);
  }
}

TEST(TopoSearch, EachGpuPrefersTheNicNearestIt) {
  // Communicators' net connectors use the first of these the Net has.
  TopoSystem pcie = load("pcie_2socket.xml");
  const std::vector<std::string> socket0 = {"0000:19:00.0", "0000:b1:00.0"};
  const std::vector<std::string> socket1 = {"0000:b1:00.0", "0000:19:00.0"};
  EXPECT_EQ(nicsNearestFirst(pcie, 0), socket0);  // NIC 0 on its switch
  EXPECT_EQ(nicsNearestFirst(pcie, 1), socket0);  // NIC 0 through its socket's host bridge
  EXPECT_EQ(nicsNearestFirst(pcie, 2), socket1);
  EXPECT_EQ(nicsNearestFirst(pcie, 3), socket1);

  TopoSystem dgx = load("dgx_h100.xml");
  std::set<std::string> first;
  for (int g = 0; g < dgx.nGpus(); ++g) {
    const std::vector<std::string> nics = nicsNearestFirst(dgx, g);
    ASSERT_EQ(nics.size(), 8u);
    EXPECT_EQ(std::set<std::string>(nics.begin(), nics.end()).size(), 8u);
    first.insert(nics[0]);
    // The first shares the GPU's PCIe switch: nothing nearer exists.
    int net = -1;
    for (int n = 0; n < static_cast<int>(dgx.nets.size()); ++n) {
      if (dgx.nodes[static_cast<size_t>(dgx.nets[static_cast<size_t>(n)])].busId == nics[0]) net = n;
    }
    ASSERT_GE(net, 0);
    const PathType t =
        dgx.paths[static_cast<size_t>(g)][static_cast<size_t>(dgx.nets[static_cast<size_t>(net)])].type;
    EXPECT_TRUE(t == PathType::Pix || t == PathType::Pxb) << pathTypeName(t);
  }
  EXPECT_EQ(first.size(), 8u);  // a NIC per GPU

  // Two NICs equally near two GPUs on one switch: the GPUs take one each.
  std::unique_ptr<XmlNode> doc;
  ASSERT_TRUE(parseXml(R"(<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel">
      <pci busid="0000:10:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
        <pci busid="0000:11:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="90"/></pci>
        <pci busid="0000:12:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="1" sm="90"/></pci>
        <pci busid="0000:13:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
          <nic><net name="mlx5_0" dev="0" speed="200000" port="1"/></nic></pci>
        <pci busid="0000:14:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
          <nic><net name="mlx5_1" dev="1" speed="200000" port="1"/></nic></pci>
      </pci></cpu></system>)",
                       "two-nic switch", &doc)
                  .ok());
  TopoSystem sw;
  Status s = topoFromXml(*doc, &sw);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(nicsNearestFirst(sw, 0), (std::vector<std::string>{"0000:13:00.0", "0000:14:00.0"}));
  EXPECT_EQ(nicsNearestFirst(sw, 1), (std::vector<std::string>{"0000:14:00.0", "0000:13:00.0"}));
}

TEST(TopoSearch, Deterministic) {
  for (const char* f : {"mi250_8gcd.xml", "mi300x.xml", "pcie_2socket.xml", "dgx_h100.xml"}) {
    TopoSystem a = load(f), b = load(f);
    Schedule x = search(a, 2), y = search(b, 2);
    EXPECT_EQ(x.rings, y.rings) << f;
    EXPECT_EQ(x.ringNet, y.ringNet) << f;
  }
}

TEST(TopoSearch, CommScheduleInRankOrderWhenRanksAreInNodeOrder) {
  Schedule s = commSchedule({0, 0, 1, 1}, {}, 2);
  ASSERT_EQ(s.nChannels(), 2);
  EXPECT_EQ(ringText(s.rings[0]), "0 1 2 3");
  EXPECT_EQ(ringText(s.rings[1]), "0 1 2 3");
  s.gpusPerNode = 2;
  s.nodes = 2;
  expectValidTrees(s);
}

// Node boundaries a ring crosses (each crossing is a trip over the network).
int nodeCrossings(const std::vector<int>& ring, const std::vector<int>& nodeOf) {
  int n = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    n += nodeOf[static_cast<size_t>(ring[i])] != nodeOf[static_cast<size_t>(ring[(i + 1) % ring.size()])];
  }
  return n;
}

// Tree links must match the ring's chains: inside a node every rank but the
// chain's head has its predecessor in the ring as parent.
void expectTreesFollowChains(const Schedule& s, const std::vector<int>& nodeOf) {
  for (int c = 0; c < s.nChannels(); ++c) {
    const std::vector<int>& ring = s.rings[static_cast<size_t>(c)];
    for (size_t i = 1; i < ring.size(); ++i) {
      if (nodeOf[static_cast<size_t>(ring[i])] != nodeOf[static_cast<size_t>(ring[i - 1])]) continue;
      EXPECT_EQ(s.trees[static_cast<size_t>(c)][static_cast<size_t>(ring[i])].parent, ring[i - 1])
          << "channel " << c << " rank " << ring[i];
    }
  }
}

// mpirun --map-by node puts consecutive ranks on different hosts: a ring in
// rank order would cross the network at every hop.
TEST(TopoSearch, CommScheduleKeepsEachNodesRanksTogether) {
  const std::vector<int> nodeOf{0, 1, 0, 1, 0, 1, 2, 2};
  Schedule s = commSchedule(nodeOf, {}, 3);
  ASSERT_EQ(s.nChannels(), 3);
  EXPECT_EQ(ringText(s.rings[0]), "0 2 4 1 3 5 6 7");
  for (const auto& ring : s.rings) EXPECT_EQ(nodeCrossings(ring, nodeOf), 3);
  s.gpusPerNode = 8;
  s.nodes = 1;
  expectValidTrees(s);
  expectTreesFollowChains(s, nodeOf);
  // The rank-order ring would cross 7 times.
  std::vector<int> rankOrder{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(nodeCrossings(rankOrder, nodeOf), 7);
}

// Keys order each node's chain (host ranks: their NUMA nodes); per-channel
// keys give channels different chains (a topology's rings).
TEST(TopoSearch, CommScheduleOrdersChainsByKey) {
  // One host, ranks bound alternately to two sockets (--map-by socket).
  const std::vector<int> oneNode(6, 0);
  Schedule s = commSchedule(oneNode, {{0}, {1}, {0}, {1}, {0}, {1}}, 2);
  EXPECT_EQ(ringText(s.rings[0]), "0 2 4 1 3 5");  // crosses the sockets twice, not six times
  // Per-channel keys: channel 1 reverses the chain; channel 2 wraps to keys[0].
  const std::vector<int> twoNodes{0, 0, 0, 1, 1, 1};
  Schedule t = commSchedule(twoNodes, {{0, 2}, {1, 1}, {2, 0}, {0, 2}, {1, 1}, {2, 0}}, 3);
  EXPECT_EQ(ringText(t.rings[0]), "0 1 2 3 4 5");
  EXPECT_EQ(ringText(t.rings[1]), "2 1 0 5 4 3");
  EXPECT_EQ(ringText(t.rings[2]), "0 1 2 3 4 5");
  t.gpusPerNode = 6;
  t.nodes = 1;
  expectValidTrees(t);
  expectTreesFollowChains(t, twoNodes);
  // Ties keep rank order: unknown keys (-1) are a single class.
  Schedule u = commSchedule({0, 0, 0}, {{-1}, {-1}, {-1}}, 1);
  EXPECT_EQ(ringText(u.rings[0]), "0 1 2");
}

// The large searches finish with a schedule (their time is measured by
// bench/topo_search_bench, not asserted here: sanitizers and shared CI cores
// make timings meaningless in a unit test).
TEST(TopoSearch, LargeSearchesFinish) {
  for (const char* f : {"mi300x.xml", "dgx_h100.xml", "mi250_8gcd.xml"}) {
    TopoSystem sys = load(f);
    for (int nodes : {1, 1024}) {
      Schedule s = search(sys, nodes);
      EXPECT_GE(s.nChannels(), 2) << f << " x " << nodes;
      EXPECT_EQ(s.rings[0].size(), static_cast<size_t>(8 * nodes)) << f;
    }
  }
}

TEST(TopoTrees, AllAtOnceEqualsOneByOne) {
  for (const std::vector<int>& nodeOf : std::vector<std::vector<int>>{{0},
                                                                      {0, 0, 0},
                                                                      {0, 1},
                                                                      {0, 0, 1, 1, 2, 2},
                                                                      {1, 0, 1, 0, 2},
                                                                      {0, 1, 2, 3, 4, 5, 6},
                                                                      {3, 3, 2, 1, 0, 0}}) {
    const auto all = buildDoubleTrees(nodeOf);
    for (int r = 0; r < static_cast<int>(nodeOf.size()); ++r) {
      const auto one = buildDoubleTree(nodeOf, r);
      for (int t = 0; t < 2; ++t) {
        const TreeLinks& a = all[static_cast<size_t>(r)][static_cast<size_t>(t)];
        const TreeLinks& b = one[static_cast<size_t>(t)];
        EXPECT_EQ(a.up, b.up) << r;
        ASSERT_EQ(a.ndown, b.ndown) << r;
        for (int i = 0; i < a.ndown; ++i) EXPECT_EQ(a.down[i], b.down[i]) << r;
      }
    }
  }
}

TEST(TopoSearch, LogLinesReadAsNccls) {
  Schedule s = commSchedule({0, 0, 0, 0}, {}, 2);
  std::vector<std::string> lines = scheduleLogLines(s, {0, 3});
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "Channel 00/02 : 0 1 2 3");
  EXPECT_EQ(lines[1], "Channel 01/02 : 0 1 2 3");
  EXPECT_EQ(lines[2], "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1");
  EXPECT_EQ(lines[3], "Trees [0] -1/-1/-1->3->2 [1] -1/-1/-1->3->2");
}

}  // namespace
}  // namespace braid
