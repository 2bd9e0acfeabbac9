// The topology model (DESIGN.md §5): a graph of GPU, CPU, PCI switch, NIC,
// network-port and NVSwitch nodes joined by typed links rated in GB/s per
// direction, and the best path from every GPU to every node.
//
// A system is built from an XML document in NCCL's NCCL_TOPO_FILE format
// (the prober writes the same format for the live machine, so both go
// through one builder) and keeps that document for NCCL_TOPO_DUMP_FILE.
// Plain data and pure functions: no hardware, no globals, any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "topology/xml.h"
#include "util/status.h"

namespace braid {

enum class NodeType { Gpu, Cpu, PciSwitch, Nic, Net, NvSwitch };
enum class LinkType { NvLink, Xgmi, Pci, Smp, Net };
// Path classes, best first (NCCL's names): NVL/XGMI direct or through an
// NVSwitch, PIX one PCI switch, PXB several switches, PHB through a CPU's
// host bridge, SYS across the CPU interconnect, NET across nodes, DIS none.
enum class PathType { Loc, Nvl, Xgmi, Pix, Pxb, Phb, Sys, Net, Dis };

const char* nodeTypeName(NodeType t);
const char* linkTypeName(LinkType t);
const char* pathTypeName(PathType t);
// Order of path classes for comparisons (NVL and XGMI rank equal).
int pathRank(PathType t);
// A distance limit such as NCCL_P2P_LEVEL, as a pathRank: "LOC", "NVL" (or
// "XGMI"), "PIX", "PXB", "PHB", "SYS" (any case) or NCCL's integers 0..5 in
// that order; "" (unset) is -1.
Status parsePathLevel(const std::string& text, int* rank);
inline bool isFastPath(PathType t) {
  return t == PathType::Nvl || t == PathType::Xgmi;
}

struct TopoLink {
  int to = -1;
  LinkType type = LinkType::Pci;
  double bw = 0;  // GB/s in this direction
  int count = 1;  // NVLink / xGMI links bundled in it
};

struct TopoNode {
  NodeType type = NodeType::Cpu;
  std::string busId;  // PCI devices: "0000:19:00.0" (lower case)
  // CPU
  int numaId = -1;
  std::string cpuVendor;
  // GPU
  int dev = -1, rank = -1;
  std::string arch;  // "sm_90", "gfx90a"
  // Net port
  std::string netName;
  int netDev = -1, port = 0;
  double netGBs = 0;
  std::string guid;
  bool gdr = false;
  int cpu = -1;  // the CPU node this node hangs under (-1 for NVSwitch)
  std::vector<TopoLink> links;
};

struct TopoPath {
  PathType type = PathType::Dis;
  double bw = 0;           // bottleneck GB/s
  std::vector<int> nodes;  // from source to target, both included
};

struct TopoSystem {
  std::vector<TopoNode> nodes;
  std::vector<int> gpus;  // GPU node ids, XML document order
  std::vector<int> cpus;
  std::vector<int> nets;  // Net (port) node ids, document order
  int nvswitch = -1;      // the one NVSwitch node (all switches merged), -1 if none
  bool flat = false;      // every GPU and NIC sits right under a CPU: a VM's view
  std::unique_ptr<XmlNode> xml;
  // paths[g][n]: best path from gpus[g] to node n.
  std::vector<std::vector<TopoPath>> paths;

  int nGpus() const { return static_cast<int>(gpus.size()); }
  const TopoNode& gpu(int g) const { return nodes[static_cast<size_t>(gpus[static_cast<size_t>(g)])]; }
  const TopoPath& gpuPath(int a, int b) const {
    return paths[static_cast<size_t>(a)][static_cast<size_t>(gpus[static_cast<size_t>(b)])];
  }
  // Nets ordered by closeness to GPU g (path class, then bandwidth, then index).
  std::vector<int> netsByDistance(int g) const;
  // Capacity of the link u -> v (0 if none).
  double linkBw(int u, int v) const;
};

// Builds the system from a topology document; errors name the element's line.
Status topoFromXml(const XmlNode& doc, TopoSystem* sys);
// Loads NCCL_TOPO_FILE-format XML from a file.
Status topoLoadFile(const std::string& path, TopoSystem* sys);

// Per-link bandwidth (GB/s per direction) by architecture, and PCIe lane math.
double nvlinkBwPerLink(const std::string& arch);
double xgmiBwPerLink(const std::string& arch);
double pciBw(const std::string& linkSpeed, const std::string& linkWidth);

// Human-readable dump of nodes and links (braid-topo).
std::string describeSystem(const TopoSystem& sys);

}  // namespace braid
