// braid-topo: the topology, rings, trees and expected bandwidth Braid finds
// for this machine or for a saved one.
//
//   braid-topo                  probe this machine (or NCCL_TOPO_FILE)
//   braid-topo --xml FILE       use a topology XML file (NCCL's format)
//   braid-topo --nodes N        the node replicated N times, joined by the network
//   braid-topo --json           one JSON object: gpus, rings, trees, bandwidth
//   braid-topo --dot FILE       graphviz picture of the node (and FILE.png when `dot` exists)
//   braid-topo --net            NICs, ports, link layers, GIDs and the GID Braid would use
//   braid-topo --net --sysfs-root DIR [--ifaddr NAME=ADDR/PREFIX ...]
//                               the RDMA ports and GIDs of a saved or fake sysfs tree
//                               (DIR/sys/class/infiniband); --ifaddr gives an interface's
//                               address instead of this machine's
//
// NCCL_RINGS overrides the ring search as it does in a communicator.
// Exits 1 on a bad file or option, 2 on a rejected parameter.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "topology/probe/probe.h"
#include "topology/topology.h"
#include "transports/net/ibverbs/gid.h"
#include "transports/net/ibverbs/ib_config.h"
#include "util/param.h"
#include "util/strings.h"

using namespace braid;

namespace {

struct Options {
  std::string xml, dot, sysfsRoot;
  int nodes = 1;
  bool json = false, net = false;
  std::vector<InterfaceAddress> ifaddrs;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: braid-topo [--xml FILE] [--nodes N] [--json | --dot FILE | --net [--sysfs-root DIR] "
               "[--ifaddr NAME=ADDR/PREFIX]...]\n");
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string jsonInts(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += strCat(i ? ", " : "", v[i]);
  return s + "]";
}

void printJson(const TopoSystem& sys, const Schedule& s, const std::string& source) {
  std::printf("{\n  \"source\": %s,\n  \"nodes\": %d,\n  \"gpusPerNode\": %d,\n  \"pattern\": %s,\n",
              jsonString(source).c_str(), s.nodes, s.gpusPerNode, jsonString(s.pattern).c_str());
  std::printf("  \"gpus\": [");
  for (int node = 0; node < s.nodes; ++node) {
    for (int g = 0; g < sys.nGpus(); ++g) {
      const TopoNode& n = sys.gpu(g);
      std::printf("%s\n    {\"index\": %d, \"busid\": %s, \"node\": %d, \"dev\": %d, \"arch\": %s}",
                  node + g ? "," : "", node * sys.nGpus() + g, jsonString(n.busId).c_str(), node, n.dev,
                  jsonString(n.arch).c_str());
    }
  }
  std::printf("\n  ],\n  \"channels\": %d,\n  \"rings\": [", s.nChannels());
  for (int c = 0; c < s.nChannels(); ++c) {
    std::printf("%s\n    %s", c ? "," : "", jsonInts(s.rings[static_cast<size_t>(c)]).c_str());
  }
  std::printf("\n  ],\n  \"ringNet\": %s,\n  \"ringBw\": [", jsonInts(s.ringNet).c_str());
  for (int c = 0; c < s.nChannels(); ++c)
    std::printf("%s%.2f", c ? ", " : "", s.ringBw[static_cast<size_t>(c)]);
  std::printf("],\n  \"trees\": [");
  for (int c = 0; c < s.nChannels(); ++c) {
    std::printf("%s\n    [", c ? "," : "");
    const auto& tree = s.trees[static_cast<size_t>(c)];
    for (size_t g = 0; g < tree.size(); ++g) {
      std::printf("%s{\"parent\": %d, \"children\": %s}", g ? ", " : "", tree[g].parent,
                  jsonInts(tree[g].children).c_str());
    }
    std::printf("]");
  }
  std::printf("\n  ],\n  \"busbw\": {\"ring\": %.2f, \"tree\": %.2f}\n}\n", s.ringBusBw, s.treeBusBw);
}

void printText(const TopoSystem& sys, const Schedule& s, const std::string& source,
               const std::vector<std::string>& notes) {
  std::printf("Topology: %s\n", source.c_str());
  for (const std::string& n : notes) std::printf("  note: %s\n", n.c_str());
  if (sys.flat && sys.nGpus() > 1) std::printf("  flat PCI view: every GPU sits right under a CPU (a VM?)\n");
  std::printf("\nGraph (GB/s per direction):\n%s", describeSystem(sys).c_str());
  if (sys.nGpus() == 0) {
    std::printf("\nNo GPU: no rings or trees (communicators order rings by rank).\n");
    return;
  }
  std::printf("\nGPU paths:\n      ");
  for (int b = 0; b < sys.nGpus(); ++b) std::printf("%9d", b);
  std::printf("\n");
  for (int a = 0; a < sys.nGpus(); ++a) {
    std::printf("  %3d ", a);
    for (int b = 0; b < sys.nGpus(); ++b) {
      if (a == b) {
        std::printf("%9s", "X");
        continue;
      }
      const TopoPath& p = sys.gpuPath(a, b);
      std::printf("%9s", strCat(pathTypeName(p.type), "/", static_cast<int>(p.bw + 0.5)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n%d node(s) x %d GPUs, rings by %s, %d channels\n", s.nodes, s.gpusPerNode, s.pattern.c_str(),
              s.nChannels());
  for (const std::string& line : scheduleLogLines(s, {})) {
    if (line.rfind("Channel", 0) == 0) std::printf("  %s\n", line.c_str());
  }
  for (int c = 0; c < s.nChannels(); ++c) {
    std::printf("  channel %02d: %.1f GB/s", c, s.ringBw[static_cast<size_t>(c)]);
    if (s.ringNet[static_cast<size_t>(c)] >= 0) {
      const TopoNode& net =
          sys.nodes[static_cast<size_t>(sys.nets[static_cast<size_t>(s.ringNet[static_cast<size_t>(c)])])];
      std::printf(", leaves each node by %s", net.netName.c_str());
    }
    std::printf("\n");
  }
  std::printf("Trees (channel: child/child/child->gpu->parent):\n");
  const int total = s.nodes * s.gpusPerNode;
  std::vector<int> shown;
  for (int r = 0; r < total && r < 32; ++r) shown.push_back(r);
  for (const std::string& line : scheduleLogLines(s, shown)) {
    if (line.rfind("Trees", 0) == 0) std::printf("  %s\n", line.c_str());
  }
  if (total > 32) std::printf("  ... (%d GPUs; --json lists all)\n", total);
  std::printf("Expected all-reduce bus bandwidth: ring %.1f GB/s, tree %.1f GB/s\n", s.ringBusBw,
              s.treeBusBw);
}

int writeDot(const TopoSystem& sys, const std::string& path) {
  std::ofstream out(path);
  if (!out) {
    std::fprintf(stderr, "braid-topo: cannot write %s\n", path.c_str());
    return 1;
  }
  out << "graph topology {\n  node [shape=box];\n";
  for (size_t i = 0; i < sys.nodes.size(); ++i) {
    const TopoNode& n = sys.nodes[i];
    std::string label = nodeTypeName(n.type);
    if (n.type == NodeType::Gpu) label += strCat(" ", n.dev, "\\n", n.arch);
    if (n.type == NodeType::Net) label += "\\n" + n.netName;
    if (n.type == NodeType::Cpu) label += strCat(" ", n.numaId);
    if (!n.busId.empty() && n.type != NodeType::Net) label += "\\n" + n.busId;
    out << "  n" << i << " [label=\"" << label << "\"" << (n.type == NodeType::Gpu ? ", style=filled" : "")
        << "];\n";
  }
  for (size_t i = 0; i < sys.nodes.size(); ++i) {
    for (const TopoLink& l : sys.nodes[i].links) {
      if (static_cast<size_t>(l.to) < i && sys.linkBw(l.to, static_cast<int>(i)) == l.bw)
        continue;  // one edge per pair
      out << "  n" << i << " -- n" << l.to << " [label=\"" << linkTypeName(l.type) << " " << l.bw << "\"];\n";
    }
  }
  out << "}\n";
  out.close();
  std::printf("wrote %s\n", path.c_str());
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    const std::string png = path + ".png";
    const std::string cmd = "dot -Tpng '" + path + "' -o '" + png + "'";
    if (path.find('\'') == std::string::npos && std::system(cmd.c_str()) == 0)
      std::printf("wrote %s\n", png.c_str());
  } else {
    std::printf("graphviz `dot` not found: no PNG (dot -Tpng %s -o topo.png)\n", path.c_str());
  }
  return 0;
}

// The RDMA ports under root's sysfs, their GIDs, and which one Braid would
// use and why (or why none can be used).
void printGids(const std::string& root, const std::vector<InterfaceAddress>& given) {
  const std::vector<SysfsRdmaPort> ports = listSysfsRdmaPorts(root);
  if (ports.empty()) {
    std::printf("No RDMA device (nothing under %s/sys/class/infiniband): no GID to choose.\n", root.c_str());
    return;
  }
  IbSettings settings;
  Status s = ibSettings(&settings);
  if (!s.ok()) {
    std::printf("NCCL_IB_* settings rejected: %s\n", s.message().c_str());
    return;
  }
  std::printf("RDMA ports and GIDs%s:\n", root.empty() ? "" : strCat(" (sysfs under ", root, ")").c_str());
  for (const SysfsRdmaPort& port : ports) {
    const bool used = settings.hca.matches(port.device, port.port);
    std::printf("  %s port %d: %s, %s%s%s\n", port.device.c_str(), port.port,
                port.state.empty() ? "state unknown" : port.state.c_str(),
                port.linkLayer.empty() ? "link layer unknown" : port.linkLayer.c_str(),
                port.netdev.empty() ? "" : (", netdev " + port.netdev).c_str(),
                used ? "" : strCat(" (excluded by NCCL_IB_HCA='", settings.hca.spec(), "')").c_str());
    PortGids gids;
    gids.device = port.device;
    gids.port = port.port;
    gids.infiniband = port.linkLayer == "InfiniBand";
    Status read = readGidTable(root, port.device, port.port, &gids.table);
    if (!read.ok()) {
      std::printf("    %s\n", read.message().c_str());
      continue;
    }
    int empty = 0;
    for (const GidEntry& e : gids.table) {
      if (gidDescription(e.raw) == "zero") {
        ++empty;
        continue;
      }
      std::printf("    gid %2d: %s  %-10s %-8s %s\n", e.index, gidText(e.raw).c_str(),
                  e.type.empty() ? "?" : e.type.c_str(), e.netdev.empty() ? "-" : e.netdev.c_str(),
                  gidDescription(e.raw).c_str());
    }
    if (empty > 0) std::printf("    (%d empty entries)\n", empty);
    std::vector<InterfaceAddress> addrs;
    for (const InterfaceAddress& a : given) {
      if (a.name == port.netdev) addrs.push_back(a);
    }
    if (addrs.empty() && !port.netdev.empty() && given.empty()) interfaceAddresses(port.netdev, &addrs).ignore();
    GidChoice choice;
    Status chosen = selectGid(gids, addrs, settings.gidIndex.indexFor(port.device, port.port), &choice);
    if (chosen.ok()) {
      std::printf("    Braid would use GID %s\n", choice.reason.c_str());
    } else {
      std::printf("    Braid cannot use this port: %s\n", chosen.message().c_str());
    }
  }
}

void printNet(const TopoSystem& sys, bool live) {
  if (live) {
    std::vector<NicInfo> nics;
    std::vector<std::string> notes;
    probeNics(&nics, &notes);
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
    for (const NicInfo& nic : nics) {
      std::printf("%s (%s) pci %s%s\n", nic.name.c_str(), nic.source.c_str(),
                  nic.busId.empty() ? "-" : nic.busId.c_str(),
                  nic.netdev.empty() ? "" : (" netdev " + nic.netdev).c_str());
      for (const NetPortInfo& p : nic.ports) {
        std::printf("  port %d: %s, %s, %.0f Gb/s\n", p.port, p.state.c_str(), p.linkLayer.c_str(), p.gbps);
        for (const std::string& g : p.gids) std::printf("    gid %s\n", g.c_str());
      }
    }
  }
  std::printf("Network ports in the topology:\n");
  for (size_t i = 0; i < sys.nets.size(); ++i) {
    const TopoNode& n = sys.nodes[static_cast<size_t>(sys.nets[i])];
    std::printf("  net %zu: %s port %d, %.1f GB/s, pci %s\n", i, n.netName.c_str(), n.port, n.netGBs,
                n.busId.empty() ? "-" : n.busId.c_str());
  }
  for (int g = 0; g < sys.nGpus(); ++g) {
    if (sys.nets.empty()) break;
    const int nearest = sys.netsByDistance(g)[0];
    const TopoPath& p =
        sys.paths[static_cast<size_t>(g)][static_cast<size_t>(sys.nets[static_cast<size_t>(nearest)])];
    std::printf("  GPU %d: nearest net %d (%s, %s)\n", g, nearest,
                sys.nodes[static_cast<size_t>(sys.nets[static_cast<size_t>(nearest)])].netName.c_str(),
                pathTypeName(p.type));
  }
  if (live) printGids("", {});
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "braid-topo: %s needs %s\n", a.c_str(), what);
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--xml")
      opt.xml = value("a file");
    else if (a == "--nodes") {
      const std::string v = value("a count");
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > 4096) {
        std::fprintf(stderr, "braid-topo: --nodes '%s': must be a whole number 1..4096\n", v.c_str());
        return 1;
      }
      opt.nodes = static_cast<int>(n);
    }
    else if (a == "--json")
      opt.json = true;
    else if (a == "--dot")
      opt.dot = value("a file");
    else if (a == "--net")
      opt.net = true;
    else if (a == "--sysfs-root")
      opt.sysfsRoot = value("a directory");
    else if (a == "--ifaddr") {
      const std::string v = value("NAME=ADDR/PREFIX");
      const size_t eq = v.find('=');
      InterfaceAddress addr;
      Status parsed = eq == std::string::npos || eq == 0
                          ? invalidArgument("'", v, "' is not NAME=ADDR/PREFIX")
                          : parseInterfaceAddress(v.substr(eq + 1), &addr);
      if (!parsed.ok()) {
        std::fprintf(stderr, "braid-topo: --ifaddr: %s\n", parsed.message().c_str());
        return 1;
      }
      addr.name = v.substr(0, eq);
      opt.ifaddrs.push_back(addr);
    }
    else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "braid-topo: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 1;
    }
  }
  if (opt.json + !opt.dot.empty() + opt.net > 1) {
    std::fprintf(stderr, "braid-topo: --json, --dot and --net exclude each other\n");
    usage(stderr);
    return 1;
  }
  Status params = ParamRegistry::instance().validate();
  if (!params.ok()) {
    std::fprintf(stderr, "braid-topo: %s\n", params.message().c_str());
    return 2;
  }
  if ((!opt.sysfsRoot.empty() || !opt.ifaddrs.empty()) && !opt.net) {
    std::fprintf(stderr, "braid-topo: --sysfs-root and --ifaddr go with --net\n");
    return 1;
  }
  if (opt.net && !opt.sysfsRoot.empty()) {
    printGids(opt.sysfsRoot, opt.ifaddrs);
    return 0;
  }
  TopoSystem sys;
  std::vector<std::string> notes;
  Status s = opt.xml.empty() ? localTopology(&sys, &notes) : topoLoadFile(opt.xml, &sys);
  if (!s.ok()) {
    std::fprintf(stderr, "braid-topo: %s\n", s.message().c_str());
    return 1;
  }
  const std::string source = opt.xml.empty() ? "this machine" : opt.xml;
  if (!opt.dot.empty()) return writeDot(sys, opt.dot);
  if (opt.net) {
    printNet(sys, opt.xml.empty());
    return 0;
  }
  Schedule sched;
  if (sys.nGpus() > 0) {
    SearchOptions so;
    so.nodes = opt.nodes;
    so.ringsOverride = ringsOverride();
    Status r = searchSchedule(sys, so, &sched);
    if (!r.ok()) {
      std::fprintf(stderr, "braid-topo: %s\n", r.message().c_str());
      return 1;
    }
  } else {
    sched.nodes = opt.nodes;
    sched.pattern = "none (no GPU)";
  }
  if (opt.json) {
    printJson(sys, sched, source);
  } else {
    printText(sys, sched, source, notes);
  }
  return 0;
}
