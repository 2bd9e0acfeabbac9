#include "topology/search.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "util/log.h"

namespace braid {

namespace {

using Ring = std::vector<int>;  // local GPU indices
using LinkKey = std::pair<int, int>;

constexpr long kSearchStepLimit = 400000;
constexpr size_t kMaxCycles = 20000;

// The directed links (u, v) hop a -> b runs over.
std::vector<LinkKey> hopLinks(const TopoSystem& sys, int a, int b) {
  const std::vector<int>& nodes = sys.gpuPath(a, b).nodes;
  std::vector<LinkKey> out;
  for (size_t i = 0; i + 1 < nodes.size(); ++i) out.emplace_back(nodes[i], nodes[i + 1]);
  return out;
}

// Each ring's bottleneck when all of `rings` run at once.
std::vector<double> ringBandwidths(const TopoSystem& sys, const std::vector<Ring>& rings) {
  std::map<LinkKey, int> load;
  std::vector<std::vector<LinkKey>> used(rings.size());
  for (size_t r = 0; r < rings.size(); ++r) {
    const Ring& ring = rings[r];
    if (ring.size() < 2) continue;
    for (size_t i = 0; i < ring.size(); ++i) {
      for (const LinkKey& l : hopLinks(sys, ring[i], ring[(i + 1) % ring.size()])) {
        ++load[l];
        used[r].push_back(l);
      }
    }
  }
  std::vector<double> bw(rings.size(), 0.0);
  for (size_t r = 0; r < rings.size(); ++r) {
    if (used[r].empty()) continue;
    double b = std::numeric_limits<double>::max();
    for (const LinkKey& l : used[r]) b = std::min(b, sys.linkBw(l.first, l.second) / load[l]);
    bw[r] = b;
  }
  return bw;
}

double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

Ring reversed(const Ring& r) {
  Ring out(r.rbegin(), r.rend());
  // Keep GPU 0's position first so the text reads naturally.
  auto it = std::find(out.begin(), out.end(), r.empty() ? 0 : r[0]);
  std::rotate(out.begin(), it, out.end());
  return out;
}

// A set of undirected edges over up to 64 GPUs.
class EdgeSet {
 public:
  explicit EdgeSet(int n) : n_(n), words_(static_cast<size_t>((n * n + 63) / 64), 0) {}
  void add(int a, int b) {
    const int k = std::min(a, b) * n_ + std::max(a, b);
    words_[static_cast<size_t>(k / 64)] |= uint64_t(1) << (k % 64);
  }
  bool intersects(const EdgeSet& o) const {
    for (size_t i = 0; i < words_.size(); ++i) {
      if (words_[i] & o.words_[i]) return true;
    }
    return false;
  }
  void merge(const EdgeSet& o) {
    for (size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
  }

 private:
  int n_;
  std::vector<uint64_t> words_;
};

struct Cycle {
  Ring ring;
  double bottleneck = 0;  // narrowest direct link, GB/s
  EdgeSet edges;
};

// Every Hamiltonian cycle of `adj` once (starting at 0, second GPU below the
// last), in lexicographic order, up to kMaxCycles.
std::vector<Ring> hamiltonianCycles(const std::vector<std::vector<bool>>& adj) {
  const int n = static_cast<int>(adj.size());
  std::vector<Ring> out;
  Ring path{0};
  std::vector<bool> used(static_cast<size_t>(n), false);
  used[0] = true;
  long steps = 0;
  auto dfs = [&](auto&& self, int v) -> void {
    if (out.size() >= kMaxCycles || ++steps > kSearchStepLimit) return;
    if (static_cast<int>(path.size()) == n) {
      if (adj[static_cast<size_t>(v)][0] && path[1] < path.back()) out.push_back(path);
      return;
    }
    for (int w = 0; w < n; ++w) {
      if (used[static_cast<size_t>(w)] || !adj[static_cast<size_t>(v)][static_cast<size_t>(w)]) continue;
      used[static_cast<size_t>(w)] = true;
      path.push_back(w);
      self(self, w);
      path.pop_back();
      used[static_cast<size_t>(w)] = false;
    }
  };
  dfs(dfs, 0);
  return out;
}

// Rings over direct fast links: disjoint cycles first, then more while they pay.
std::vector<Ring> meshRings(const TopoSystem& sys, const std::vector<std::vector<bool>>& adj, int maxRings) {
  const int n = static_cast<int>(adj.size());
  std::vector<Cycle> cands;
  for (Ring& r : hamiltonianCycles(adj)) {
    Cycle c{std::move(r), std::numeric_limits<double>::max(), EdgeSet(n)};
    for (size_t i = 0; i < c.ring.size(); ++i) {
      const int a = c.ring[i], b = c.ring[(i + 1) % c.ring.size()];
      c.edges.add(a, b);
      const int na = sys.gpus[static_cast<size_t>(a)], nb = sys.gpus[static_cast<size_t>(b)];
      c.bottleneck = std::min({c.bottleneck, sys.linkBw(na, nb), sys.linkBw(nb, na)});
    }
    cands.push_back(std::move(c));
  }
  if (cands.empty()) return {};
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Cycle& a, const Cycle& b) { return a.bottleneck > b.bottleneck; });
  // The largest set of edge-disjoint cycles; among equals, the widest.
  int minDegree = n;
  for (const auto& row : adj)
    minDegree = std::min(minDegree, static_cast<int>(std::count(row.begin(), row.end(), true)));
  const size_t bound = static_cast<size_t>(std::max(1, minDegree / 2));
  std::vector<size_t> best, cur;
  double bestSum = 0, curSum = 0;
  long steps = 0;
  auto dfs = [&](auto&& self, size_t start, const EdgeSet& usedEdges) -> void {
    if (cur.size() > best.size() || (cur.size() == best.size() && curSum > bestSum + 1e-9)) {
      best = cur;
      bestSum = curSum;
    }
    if (best.size() >= bound) return;
    for (size_t i = start; i < cands.size(); ++i) {
      if (++steps > kSearchStepLimit || best.size() >= bound) return;
      if (cands[i].edges.intersects(usedEdges)) continue;
      EdgeSet next = usedEdges;
      next.merge(cands[i].edges);
      cur.push_back(i);
      curSum += cands[i].bottleneck;
      self(self, i + 1, next);
      curSum -= cands[i].bottleneck;
      cur.pop_back();
    }
  };
  dfs(dfs, 0, EdgeSet(n));
  std::vector<Ring> rings;
  std::vector<bool> taken(cands.size(), false);
  auto addCycle = [&](std::vector<Ring>* set, const Ring& r) {
    set->push_back(r);
    Ring back = reversed(r);
    if (back != r && n > 2) set->push_back(back);
  };
  for (size_t i : best) {
    addCycle(&rings, cands[i].ring);
    taken[i] = true;
  }
  // More cycles while one raises the total by a tenth.
  const size_t tries = std::min<size_t>(cands.size(), 2000);
  while (static_cast<int>(rings.size()) + 2 <= maxRings) {
    const double now = total(ringBandwidths(sys, rings));
    double bestTotal = now * 1.1;
    size_t pick = cands.size();
    for (size_t i = 0; i < tries; ++i) {
      if (taken[i]) continue;
      std::vector<Ring> trial = rings;
      addCycle(&trial, cands[i].ring);
      const double t = total(ringBandwidths(sys, trial));
      if (t > bestTotal + 1e-9) {
        bestTotal = t;
        pick = i;
      }
    }
    if (pick == cands.size()) break;
    addCycle(&rings, cands[pick].ring);
    taken[pick] = true;
  }
  return rings;
}

// Fewest SYS crossings, then PHB, PXB, then non-fast hops; then widest.
using RingCost = std::tuple<int, int, int, int, double>;
RingCost ringCost(const TopoSystem& sys, const Ring& r) {
  int sys5 = 0, phb = 0, pxb = 0, slow = 0;
  double bw = std::numeric_limits<double>::max();
  for (size_t i = 0; i < r.size(); ++i) {
    const TopoPath& p = sys.gpuPath(r[i], r[(i + 1) % r.size()]);
    const int rank = pathRank(p.type);
    sys5 += rank >= pathRank(PathType::Sys);
    phb += rank >= pathRank(PathType::Phb);
    pxb += rank >= pathRank(PathType::Pxb);
    slow += rank >= pathRank(PathType::Pix);
    bw = std::min(bw, p.bw);
  }
  return RingCost{sys5, phb, pxb, slow, -bw};
}

Ring bestOrder(const TopoSystem& sys) {
  const int n = sys.nGpus();
  Ring order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (n <= 9) {
    Ring best = order;
    RingCost bestCost = ringCost(sys, order);
    while (std::next_permutation(order.begin() + 1, order.end())) {
      RingCost c = ringCost(sys, order);
      if (c < bestCost) {
        bestCost = c;
        best = order;
      }
    }
    return best;
  }
  // Large nodes: group by CPU, then by PCI bus id (siblings under one switch are adjacent).
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const TopoNode& ga = sys.gpu(a);
    const TopoNode& gb = sys.gpu(b);
    if (ga.cpu != gb.cpu) return ga.cpu < gb.cpu;
    return ga.busId < gb.busId;
  });
  return order;
}

struct LocalRings {
  std::vector<Ring> rings;
  std::string pattern;
};

Status localRings(const TopoSystem& sys, const SearchOptions& opt, LocalRings* out) {
  const int n = sys.nGpus();
  if (!opt.ringsOverride.empty()) {
    BRAID_CHECK(parseRings(opt.ringsOverride, n, &out->rings));
    out->pattern = "NCCL_RINGS";
    return okStatus();
  }
  Ring identity(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = i;
  if (n <= 2) {
    out->rings = {identity, identity};
    out->pattern = n <= 1 ? "single GPU" : strCat("pair over ", pathTypeName(sys.gpuPath(0, 1).type));
    return okStatus();
  }
  bool allFast = true, viaSwitch = false;
  std::vector<std::vector<bool>> adj(static_cast<size_t>(n),
                                     std::vector<bool>(static_cast<size_t>(n), false));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const TopoPath& p = sys.gpuPath(a, b);
      const TopoPath& q = sys.gpuPath(b, a);
      allFast = allFast && isFastPath(p.type);
      if (sys.nvswitch >= 0 && std::find(p.nodes.begin(), p.nodes.end(), sys.nvswitch) != p.nodes.end()) {
        viaSwitch = true;
      }
      adj[static_cast<size_t>(a)][static_cast<size_t>(b)] =
          isFastPath(p.type) && isFastPath(q.type) && p.nodes.size() == 2 && q.nodes.size() == 2;
    }
  }
  if (allFast && viaSwitch) {
    out->rings = {identity, reversed(identity)};
    out->pattern = "nvswitch";
    return okStatus();
  }
  if (n <= 64) {
    out->rings = meshRings(sys, adj, opt.maxChannels);
    if (!out->rings.empty()) {
      const bool xgmi = sys.gpuPath(out->rings[0][0], out->rings[0][1]).type == PathType::Xgmi;
      out->pattern = strCat(xgmi ? "xgmi" : "nvlink", allFast ? " full mesh" : " partial mesh");
      return okStatus();
    }
  }
  Ring best = bestOrder(sys);
  out->rings = {best, reversed(best)};
  out->pattern = "pci";
  return okStatus();
}

}  // namespace

Status parseRings(const std::string& text, int nGpus, std::vector<std::vector<int>>* rings) {
  rings->clear();
  for (const std::string& part : splitString(text, '|')) {
    std::vector<int> ring;
    std::string cur;
    auto flush = [&]() -> Status {
      if (cur.empty()) return okStatus();
      char* end = nullptr;
      long v = std::strtol(cur.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= nGpus) {
        return invalidArgument("NCCL_RINGS: '", cur, "' is not a GPU index in 0..", nGpus - 1);
      }
      ring.push_back(static_cast<int>(v));
      cur.clear();
      return okStatus();
    };
    for (char c : part) {
      if (c == ' ' || c == ',' || c == '-' || c == '\t') {
        BRAID_CHECK(flush());
      } else {
        cur += c;
      }
    }
    BRAID_CHECK(flush());
    if (ring.empty()) continue;
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < nGpus; ++i) {
      if (static_cast<int>(sorted.size()) != nGpus || sorted[static_cast<size_t>(i)] != i) {
        return invalidArgument("NCCL_RINGS: ring \"", trim(part), "\" must list each GPU 0..", nGpus - 1,
                               " once");
      }
    }
    rings->push_back(std::move(ring));
  }
  if (rings->empty()) return invalidArgument("NCCL_RINGS: no ring in \"", text, "\"");
  return okStatus();
}

std::string ringText(const std::vector<int>& ring) {
  std::string s;
  for (size_t i = 0; i < ring.size(); ++i) s += strCat(i ? " " : "", ring[i]);
  return s;
}

namespace {

// Trees of one channel: `chain[k]` is the local GPU at chain position k.
std::vector<TreeNodeLinks> channelTrees(const Ring& chain, int nodes, int tree) {
  const int g = static_cast<int>(chain.size());
  const int total = g * nodes;
  std::vector<int> nodeOf(static_cast<size_t>(total));
  for (int l = 0; l < total; ++l) nodeOf[static_cast<size_t>(l)] = l / g;
  auto gpuOf = [&](int label) { return (label / g) * g + chain[static_cast<size_t>(label % g)]; };
  std::vector<TreeNodeLinks> out(static_cast<size_t>(total));
  const std::vector<std::array<TreeLinks, 2>> all = buildDoubleTrees(nodeOf);
  for (int l = 0; l < total; ++l) {
    const TreeLinks& t = all[static_cast<size_t>(l)][static_cast<size_t>(tree)];
    TreeNodeLinks& links = out[static_cast<size_t>(gpuOf(l))];
    links.parent = t.up < 0 ? -1 : gpuOf(t.up);
    for (int i = 0; i < t.ndown; ++i) links.children.push_back(gpuOf(t.down[i]));
  }
  return out;
}

}  // namespace

Status searchSchedule(const TopoSystem& sys, const SearchOptions& opt, Schedule* out) {
  *out = Schedule();
  const int g = sys.nGpus();
  if (g == 0) return invalidArgument("the topology has no GPU");
  if (opt.nodes < 1) return invalidArgument("node count ", opt.nodes, " must be at least 1");
  LocalRings local;
  BRAID_CHECK(localRings(sys, opt, &local));
  const size_t nNets = sys.nets.size();
  // Across nodes every port should carry a ring: repeat the rings until they do.
  if (opt.nodes > 1 && nNets > local.rings.size()) {
    // Through an NVSwitch one direction suffices: the cuts then pair every
    // port for sending with its neighbour's for receiving.
    if (local.pattern == "nvswitch") local.rings.resize(1);
    const size_t distinct = local.rings.size();
    for (size_t i = distinct; i < nNets; ++i) local.rings.push_back(local.rings[i % distinct]);
  }
  if (static_cast<int>(local.rings.size()) > opt.maxChannels) {
    local.rings.resize(static_cast<size_t>(opt.maxChannels));
  }
  const std::vector<double> localBw = ringBandwidths(sys, local.rings);
  out->nodes = opt.nodes;
  out->gpusPerNode = g;
  out->pattern = local.pattern;

  std::vector<int> sendLoad(std::max<size_t>(nNets, 1), 0), recvLoad(std::max<size_t>(nNets, 1), 0);
  std::vector<Ring> chains;
  std::vector<int> enterNet;
  for (size_t c = 0; c < local.rings.size(); ++c) {
    const Ring& ring = local.rings[c];
    int cut = 0, net = -1, inNet = -1;
    if (opt.nodes > 1 && nNets > 0) {
      // Leave by the port nearest the chain's last GPU and enter by the one
      // nearest its first, the least used pair first.
      std::tuple<int, int, int, double, int> bestKey{std::numeric_limits<int>::max(), 0, 0, 0, 0};
      for (int s = 0; s < g; ++s) {
        const int exitGpu = ring[static_cast<size_t>((s - 1 + g) % g)];
        const int nearest = sys.netsByDistance(exitGpu)[0];
        const int entering = sys.netsByDistance(ring[static_cast<size_t>(s)])[0];
        const TopoPath& p = sys.paths[static_cast<size_t>(exitGpu)]
                                     [static_cast<size_t>(sys.nets[static_cast<size_t>(nearest)])];
        const int send = sendLoad[static_cast<size_t>(nearest)];
        std::tuple<int, int, int, double, int> key{send + recvLoad[static_cast<size_t>(entering)], send,
                                                   pathRank(p.type), -p.bw, s};
        if (key < bestKey) {
          bestKey = key;
          cut = s;
          net = nearest;
        }
      }
      inNet = sys.netsByDistance(ring[static_cast<size_t>(cut)])[0];
      ++sendLoad[static_cast<size_t>(net)];
      ++recvLoad[static_cast<size_t>(inNet)];
    }
    Ring chain(ring.begin() + cut, ring.end());
    chain.insert(chain.end(), ring.begin(), ring.begin() + cut);
    chains.push_back(chain);
    out->ringNet.push_back(net);
    enterNet.push_back(inNet);
  }
  for (size_t c = 0; c < chains.size(); ++c) {
    std::vector<int> global;
    for (int node = 0; node < opt.nodes; ++node) {
      for (int gpu : chains[c]) global.push_back(node * g + gpu);
    }
    out->rings.push_back(std::move(global));
    double bw = localBw[c];
    double netBw = bw;
    if (opt.nodes > 1) {
      if (nNets == 0) {
        netBw = 12.5 / static_cast<double>(chains.size());  // no NIC known: assume 100 Gb/s shared
      } else {
        const auto& outNet = sys.nodes[static_cast<size_t>(sys.nets[static_cast<size_t>(out->ringNet[c])])];
        const auto& inNetNode = sys.nodes[static_cast<size_t>(sys.nets[static_cast<size_t>(enterNet[c])])];
        netBw = std::min(outNet.netGBs / sendLoad[static_cast<size_t>(out->ringNet[c])],
                         inNetNode.netGBs / recvLoad[static_cast<size_t>(enterNet[c])]);
      }
      if (g == 1) bw = netBw;
      bw = std::min(bw, netBw);
    }
    out->ringBw.push_back(bw);
    out->ringBusBw += bw;
    out->trees.push_back(channelTrees(chains[c], opt.nodes, static_cast<int>(c % 2)));
    out->treeBw.push_back(bw);
    out->treeBusBw += bw;
  }
  BRAID_INFO(kLogGraph,
             "topology: %d GPUs x %d nodes, %s, %d channels, expected busbw ring %.1f tree %.1f GB/s", g,
             opt.nodes, out->pattern.c_str(), out->nChannels(), out->ringBusBw, out->treeBusBw);
  return okStatus();
}

std::vector<std::string> nicsNearestFirst(const TopoSystem& sys, int gpu) {
  const std::vector<int> order = sys.netsByDistance(gpu);
  const auto& paths = sys.paths[static_cast<size_t>(gpu)];
  auto pathOf = [&](int n) -> const TopoPath& {
    return paths[static_cast<size_t>(sys.nets[static_cast<size_t>(n)])];
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < order.size();) {
    // [i, j): the ports as near as order[i]
    size_t j = i + 1;
    while (j < order.size() && pathRank(pathOf(order[j]).type) == pathRank(pathOf(order[i]).type) &&
           pathOf(order[j]).bw == pathOf(order[i]).bw)
      ++j;
    for (size_t k = 0; k < j - i; ++k) {
      const int n = order[i + (k + static_cast<size_t>(gpu)) % (j - i)];
      const std::string& bus = sys.nodes[static_cast<size_t>(sys.nets[static_cast<size_t>(n)])].busId;
      if (!bus.empty()) out.push_back(bus);
    }
    i = j;
  }
  return out;
}

Schedule commSchedule(const std::vector<int>& nodeOf, const std::vector<std::vector<int>>& chainKeys,
                      int nChannels) {
  Schedule s;
  const int n = static_cast<int>(nodeOf.size());
  s.gpusPerNode = n;
  s.pattern = chainKeys.empty() ? "rank order" : "node order";
  for (int node : nodeOf) s.nodes = std::max(s.nodes, node + 1);
  auto key = [&](int r, int c) {
    if (chainKeys.empty()) return 0;
    const std::vector<int>& k = chainKeys[static_cast<size_t>(r)];
    return k.empty() ? 0 : k[static_cast<size_t>(c) % k.size()];
  };
  for (int c = 0; c < nChannels; ++c) {
    std::vector<int> ring(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) ring[static_cast<size_t>(r)] = r;
    std::stable_sort(ring.begin(), ring.end(), [&](int a, int b) {
      return std::make_tuple(nodeOf[static_cast<size_t>(a)], key(a, c), a) <
             std::make_tuple(nodeOf[static_cast<size_t>(b)], key(b, c), b);
    });
    // Trees over the ring's chains: label = position in the ring.
    std::vector<int> nodeOfLabel(static_cast<size_t>(n));
    for (int l = 0; l < n; ++l)
      nodeOfLabel[static_cast<size_t>(l)] = nodeOf[static_cast<size_t>(ring[static_cast<size_t>(l)])];
    const std::vector<std::array<TreeLinks, 2>> links = buildDoubleTrees(nodeOfLabel);
    std::vector<TreeNodeLinks> tree(static_cast<size_t>(n));
    for (int l = 0; l < n; ++l) {
      const TreeLinks& t = links[static_cast<size_t>(l)][static_cast<size_t>(c % 2)];
      TreeNodeLinks& out = tree[static_cast<size_t>(ring[static_cast<size_t>(l)])];
      out.parent = t.up < 0 ? -1 : ring[static_cast<size_t>(t.up)];
      for (int i = 0; i < t.ndown; ++i) out.children.push_back(ring[static_cast<size_t>(t.down[i])]);
    }
    s.rings.push_back(std::move(ring));
    s.ringNet.push_back(-1);
    s.ringBw.push_back(0);
    s.trees.push_back(std::move(tree));
    s.treeBw.push_back(0);
  }
  return s;
}

}  // namespace braid
