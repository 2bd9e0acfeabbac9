#include "topology/model.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid {

const char* nodeTypeName(NodeType t) {
  switch (t) {
    case NodeType::Gpu: return "GPU";
    case NodeType::Cpu: return "CPU";
    case NodeType::PciSwitch: return "PCI";
    case NodeType::Nic: return "NIC";
    case NodeType::Net: return "NET";
    case NodeType::NvSwitch: return "NVS";
  }
  return "?";
}

const char* linkTypeName(LinkType t) {
  switch (t) {
    case LinkType::NvLink: return "NVL";
    case LinkType::Xgmi: return "XGMI";
    case LinkType::Pci: return "PCI";
    case LinkType::Smp: return "SYS";
    case LinkType::Net: return "NET";
  }
  return "?";
}

const char* pathTypeName(PathType t) {
  switch (t) {
    case PathType::Loc: return "LOC";
    case PathType::Nvl: return "NVL";
    case PathType::Xgmi: return "XGMI";
    case PathType::Pix: return "PIX";
    case PathType::Pxb: return "PXB";
    case PathType::Phb: return "PHB";
    case PathType::Sys: return "SYS";
    case PathType::Net: return "NET";
    case PathType::Dis: return "DIS";
  }
  return "?";
}

Status parsePathLevel(const std::string& text, int* rank) {
  const std::string want = toUpper(trim(text));
  *rank = -1;
  if (want.empty()) return okStatus();
  for (PathType t : {PathType::Loc, PathType::Nvl, PathType::Xgmi, PathType::Pix, PathType::Pxb,
                     PathType::Phb, PathType::Sys}) {
    if (want == pathTypeName(t)) {
      *rank = pathRank(t);
      return okStatus();
    }
  }
  int64_t v = 0;
  if (parseInt(want, &v).ok() && v >= 0 && v <= pathRank(PathType::Sys)) {
    *rank = static_cast<int>(v);
    return okStatus();
  }
  return invalidArgument("expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5, got '", text, "'");
}

int pathRank(PathType t) {
  switch (t) {
    case PathType::Loc: return 0;
    case PathType::Nvl:
    case PathType::Xgmi: return 1;
    case PathType::Pix: return 2;
    case PathType::Pxb: return 3;
    case PathType::Phb: return 4;
    case PathType::Sys: return 5;
    case PathType::Net: return 6;
    case PathType::Dis: return 7;
  }
  return 7;
}

// Per-link figures, GB/s per direction. NVLink: what NCCL's search assumes
// per link (achievable, below the 25 GB/s signalling rate). xGMI: AMD's
// published peak per link and direction for each generation.
double nvlinkBwPerLink(const std::string& arch) {
  int sm = arch.rfind("sm_", 0) == 0 ? std::atoi(arch.c_str() + 3) : 0;
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm == 86 || sm == 89) return 12.0;
  if (sm >= 80) return 20.0;
  if (sm >= 70) return 20.0;
  return 18.0;
}

double xgmiBwPerLink(const std::string& arch) {
  if (arch.rfind("gfx94", 0) == 0 || arch.rfind("gfx95", 0) == 0) return 64.0;
  if (arch == "gfx90a") return 50.0;
  if (arch == "gfx908") return 46.0;
  return 50.0;
}

double pciBw(const std::string& linkSpeed, const std::string& linkWidth) {
  // GB/s per lane after line coding, by transfer rate in GT/s.
  const double gts = std::atof(linkSpeed.c_str());
  double perLane = 1.969;  // unknown: Gen4
  if (gts > 0) {
    if (gts < 3)
      perLane = 0.25;
    else if (gts < 6)
      perLane = 0.5;
    else if (gts < 10)
      perLane = 0.985;
    else if (gts < 20)
      perLane = 1.969;
    else if (gts < 40)
      perLane = 3.938;
    else
      perLane = 7.563;
  }
  int width = std::atoi(linkWidth.c_str());
  if (width <= 0) width = 16;
  return perLane * width;
}

namespace {

double smpBw(const std::string& vendor) {
  if (vendor == "AuthenticAMD") return 16.0;
  if (vendor == "GenuineIntel") return 10.0;
  return 6.0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Architecture text from a <gpu> element: RCCL writes gcn="gfx90a" (or the
// older gcn="910"), NCCL writes sm="90".
std::string gpuArch(const XmlNode& gpu) {
  if (const std::string* gcn = gpu.attr("gcn")) {
    if (gcn->rfind("gfx", 0) == 0) return *gcn;
    if (*gcn == "910") return "gfx90a";
    return "gfx" + *gcn;
  }
  if (const std::string* sm = gpu.attr("sm")) return "sm_" + *sm;
  return "";
}

class Builder {
 public:
  explicit Builder(TopoSystem* sys) : sys_(sys) {}

  Status build(const XmlNode& doc) {
    if (doc.name != "system") return err(doc, "the root element is <", doc.name, ">, expected <system>");
    for (const auto& child : doc.children) {
      if (child->name == "cpu") BRAID_CHECK(cpu(*child));
    }
    // CPUs talk to each other over the CPU interconnect.
    for (int a : sys_->cpus) {
      for (int b : sys_->cpus) {
        if (a != b) addLink(a, b, LinkType::Smp, smpBw(node(a).cpuVendor), 1);
      }
    }
    BRAID_CHECK(gpuLinks());
    bool flat = !sys_->gpus.empty();
    for (int g : sys_->gpus) {
      for (const TopoLink& l : node(g).links) {
        if (l.type == LinkType::Pci && node(l.to).type != NodeType::Cpu) flat = false;
      }
    }
    sys_->flat = flat;
    return okStatus();
  }

 private:
  template <typename... Args>
  static Status err(const XmlNode& n, Args&&... args) {
    return invalidArgument("topology XML line ", n.line, ": ", std::forward<Args>(args)...);
  }

  TopoNode& node(int id) { return sys_->nodes[static_cast<size_t>(id)]; }

  int addNode(NodeType type) {
    sys_->nodes.emplace_back();
    sys_->nodes.back().type = type;
    return static_cast<int>(sys_->nodes.size() - 1);
  }

  void addLink(int a, int b, LinkType type, double bw, int count) {
    for (TopoLink& l : node(a).links) {
      if (l.to == b && l.type == type) {
        l.bw += bw;
        l.count += count;
        return;
      }
    }
    node(a).links.push_back(TopoLink{b, type, bw, count});
  }
  void addBoth(int a, int b, LinkType type, double bw) {
    addLink(a, b, type, bw, 1);
    addLink(b, a, type, bw, 1);
  }

  static Status intAttr(const XmlNode& n, const char* key, int fallback, int* out) {
    const std::string* v = n.attr(key);
    if (v == nullptr || v->empty()) {
      *out = fallback;
      return okStatus();
    }
    char* end = nullptr;
    long x = std::strtol(v->c_str(), &end, 0);
    if (*end != '\0' || x < -1 || x > 1000000000)
      return err(n, "<", n.name, "> ", key, "=\"", *v, "\" is not a number");
    *out = static_cast<int>(x);
    return okStatus();
  }

  Status cpu(const XmlNode& x) {
    const int id = addNode(NodeType::Cpu);
    BRAID_CHECK(intAttr(x, "numaid", static_cast<int>(sys_->cpus.size()), &node(id).numaId));
    node(id).cpuVendor = x.attrOr("vendor", "");
    node(id).cpu = id;
    sys_->cpus.push_back(id);
    for (const auto& child : x.children) {
      if (child->name == "pci") BRAID_CHECK(pci(*child, id, id));
      if (child->name == "nic") BRAID_CHECK(nic(*child, id, id, "", pciBw("", "")));
    }
    return okStatus();
  }

  Status pci(const XmlNode& x, int parent, int cpuId) {
    const std::string* busId = x.attr("busid");
    if (busId == nullptr || busId->empty()) return err(x, "<pci> without busid");
    const std::string bus = lower(*busId);
    if (!busIds_.emplace(bus, x.line).second) return err(x, "busid ", bus, " appears twice");
    const double bw = pciBw(x.attrOr("link_speed", ""), x.attrOr("link_width", ""));
    const XmlNode* gpuX = nullptr;
    const XmlNode* nicX = nullptr;
    bool hasPci = false;
    for (const auto& c : x.children) {
      if (c->name == "gpu") gpuX = c.get();
      if (c->name == "nic") nicX = c.get();
      if (c->name == "pci") hasPci = true;
    }
    if (gpuX != nullptr) {
      const int id = addNode(NodeType::Gpu);
      TopoNode& g = node(id);
      g.busId = bus;
      g.cpu = cpuId;
      g.arch = gpuArch(*gpuX);
      BRAID_CHECK(intAttr(*gpuX, "dev", static_cast<int>(sys_->gpus.size()), &g.dev));
      BRAID_CHECK(intAttr(*gpuX, "rank", -1, &g.rank));
      int gdr = 0;
      BRAID_CHECK(intAttr(*gpuX, "gdr", 0, &gdr));
      g.gdr = gdr != 0;
      sys_->gpus.push_back(id);
      gpuXml_.push_back(gpuX);
      addBoth(parent, id, LinkType::Pci, bw);
      return okStatus();
    }
    if (nicX != nullptr) return nic(*nicX, parent, cpuId, bus, bw);
    const std::string cls = lower(x.attrOr("class", ""));
    if (!hasPci && cls.rfind("0x0604", 0) != 0) return okStatus();  // a device of no interest
    const int id = addNode(NodeType::PciSwitch);
    node(id).busId = bus;
    node(id).cpu = cpuId;
    addBoth(parent, id, LinkType::Pci, bw);
    for (const auto& c : x.children) {
      if (c->name == "pci") BRAID_CHECK(pci(*c, id, cpuId));
    }
    return okStatus();
  }

  Status nic(const XmlNode& x, int parent, int cpuId, const std::string& bus, double bw) {
    const int id = addNode(NodeType::Nic);
    node(id).busId = bus;
    node(id).cpu = cpuId;
    addBoth(parent, id, LinkType::Pci, bw);
    for (const auto& c : x.children) {
      if (c->name != "net") continue;
      const int n = addNode(NodeType::Net);
      TopoNode& net = node(n);
      net.cpu = cpuId;
      net.busId = bus;
      net.netName = c->attrOr("name", "");
      BRAID_CHECK(intAttr(*c, "dev", static_cast<int>(sys_->nets.size()), &net.netDev));
      BRAID_CHECK(intAttr(*c, "port", 1, &net.port));
      int speed = 0, gdr = 0;
      BRAID_CHECK(intAttr(*c, "speed", 0, &speed));
      BRAID_CHECK(intAttr(*c, "gdr", 0, &gdr));
      net.gdr = gdr != 0;
      net.guid = c->attrOr("guid", "");
      net.netGBs = speed > 0 ? speed / 8000.0 : 12.5;  // Mb/s; unknown: 100 Gb/s
      sys_->nets.push_back(n);
      addBoth(id, n, LinkType::Net, net.netGBs);
    }
    return okStatus();
  }

  // NVLink and xGMI, once every GPU is known.
  Status gpuLinks() {
    std::map<std::string, int> byBus;
    for (int g : sys_->gpus) byBus[node(g).busId] = g;
    for (size_t i = 0; i < sys_->gpus.size(); ++i) {
      const int g = sys_->gpus[i];
      for (const auto& c : gpuXml_[i]->children) {
        const bool nvl = c->name == "nvlink";
        if (!nvl && c->name != "xgmi") continue;
        const std::string* target = c->attr("target");
        if (target == nullptr) return err(*c, "<", c->name, "> without target");
        int count = 1;
        BRAID_CHECK(intAttr(*c, "count", 1, &count));
        if (count < 1) return err(*c, "<", c->name, "> count must be at least 1");
        const LinkType type = nvl ? LinkType::NvLink : LinkType::Xgmi;
        const double bw = count * (nvl ? nvlinkBwPerLink(node(g).arch) : xgmiBwPerLink(node(g).arch));
        if (lower(c->attrOr("tclass", "")) == "0x068000") {
          if (sys_->nvswitch < 0) sys_->nvswitch = addNode(NodeType::NvSwitch);
          addLink(g, sys_->nvswitch, type, bw, count);
          addLink(sys_->nvswitch, g, type, bw, count);
          continue;
        }
        auto it = byBus.find(lower(*target));
        if (it == byBus.end() || it->second == g) {
          BRAID_INFO(kLogGraph, "topology line %d: %s target %s is no other GPU of this system; ignored",
                     c->line, c->name.c_str(), target->c_str());
          continue;
        }
        addLink(g, it->second, type, bw, count);
      }
    }
    return okStatus();
  }

  TopoSystem* sys_;
  std::vector<const XmlNode*> gpuXml_;
  std::map<std::string, int> busIds_;
};

// Best paths from one node: labels (class rank, hops) minimal, then widest.
// GPUs and network ports are endpoints: no path runs through them.
std::vector<TopoPath> pathsFrom(const TopoSystem& sys, int src) {
  const size_t n = sys.nodes.size();
  std::vector<TopoPath> best(n);
  std::vector<int> hops(n, std::numeric_limits<int>::max()), pciHops(n, 0);
  std::vector<bool> done(n, false);
  best[static_cast<size_t>(src)] = TopoPath{PathType::Loc, 1e9, {src}};
  hops[static_cast<size_t>(src)] = 0;
  auto key = [&](size_t v) { return std::make_tuple(pathRank(best[v].type), hops[v], -best[v].bw); };
  for (;;) {
    size_t u = n;
    for (size_t v = 0; v < n; ++v) {
      if (!done[v] && best[v].type != PathType::Dis && (u == n || key(v) < key(u))) u = v;
    }
    if (u == n) break;
    done[u] = true;
    const TopoNode& un = sys.nodes[u];
    if (static_cast<int>(u) != src && (un.type == NodeType::Gpu || un.type == NodeType::Net)) continue;
    for (const TopoLink& l : un.links) {
      const size_t v = static_cast<size_t>(l.to);
      if (done[v]) continue;
      // Loc until the first link says what the path is.
      PathType t = best[u].type;
      int pci = pciHops[u];
      auto worse = [&](PathType x) {
        if (t == PathType::Loc || pathRank(x) > pathRank(t)) t = x;
      };
      switch (l.type) {
        case LinkType::NvLink: worse(PathType::Nvl); break;
        case LinkType::Xgmi: worse(PathType::Xgmi); break;
        case LinkType::Pci:
          ++pci;
          worse(pci > 2 ? PathType::Pxb : PathType::Pix);
          if (un.type == NodeType::Cpu && static_cast<int>(u) != src) worse(PathType::Phb);
          break;
        case LinkType::Smp: worse(PathType::Sys); break;
        case LinkType::Net: break;  // NIC to its port: the class of the way to the NIC
      }
      if (t == PathType::Loc) t = PathType::Pix;
      TopoPath cand{t, std::min(best[u].bw, l.bw), best[u].nodes};
      cand.nodes.push_back(l.to);
      const int h = hops[u] + 1;
      auto candKey = std::make_tuple(pathRank(cand.type), h, -cand.bw);
      if (best[v].type == PathType::Dis || candKey < key(v)) {
        best[v] = std::move(cand);
        hops[v] = h;
        pciHops[v] = pci;
      }
    }
  }
  best[static_cast<size_t>(src)].bw = 0;
  return best;
}

}  // namespace

std::vector<int> TopoSystem::netsByDistance(int g) const {
  std::vector<int> order(nets.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const auto& p = paths[static_cast<size_t>(g)];
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const TopoPath& pa = p[static_cast<size_t>(nets[static_cast<size_t>(a)])];
    const TopoPath& pb = p[static_cast<size_t>(nets[static_cast<size_t>(b)])];
    if (pathRank(pa.type) != pathRank(pb.type)) return pathRank(pa.type) < pathRank(pb.type);
    return pa.bw > pb.bw;
  });
  return order;
}

double TopoSystem::linkBw(int u, int v) const {
  for (const TopoLink& l : nodes[static_cast<size_t>(u)].links) {
    if (l.to == v) return l.bw;
  }
  return 0;
}

Status topoFromXml(const XmlNode& doc, TopoSystem* sys) {
  *sys = TopoSystem();
  Builder builder(sys);
  BRAID_CHECK(builder.build(doc));
  sys->xml = doc.clone();
  for (int g : sys->gpus) sys->paths.push_back(pathsFrom(*sys, g));
  return okStatus();
}

Status topoLoadFile(const std::string& path, TopoSystem* sys) {
  std::unique_ptr<XmlNode> doc;
  BRAID_CHECK(parseXmlFile(path, &doc));
  Status s = topoFromXml(*doc, sys);
  if (!s.ok()) s.withContext(path);
  return s;
}

std::string describeSystem(const TopoSystem& sys) {
  std::ostringstream out;
  for (size_t i = 0; i < sys.nodes.size(); ++i) {
    const TopoNode& n = sys.nodes[i];
    out << "  [" << i << "] " << nodeTypeName(n.type);
    if (n.type == NodeType::Cpu)
      out << " numa " << n.numaId << (n.cpuVendor.empty() ? "" : " " + n.cpuVendor);
    if (n.type == NodeType::Gpu) out << " dev " << n.dev << " " << n.arch;
    if (n.type == NodeType::Net) out << " " << n.netName << " port " << n.port << " " << n.netGBs << " GB/s";
    if (!n.busId.empty()) out << " " << n.busId;
    out << "\n";
    for (const TopoLink& l : n.links) {
      out << "      -> [" << l.to << "] " << linkTypeName(l.type);
      if (l.type == LinkType::NvLink || l.type == LinkType::Xgmi) out << " x" << l.count;
      out << " " << l.bw << " GB/s\n";
    }
  }
  return out.str();
}

}  // namespace braid
