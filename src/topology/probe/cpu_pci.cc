// CPUs, NUMA nodes and PCI paths: hwloc (opened with dlopen) for NUMA and
// locality when it is installed, sysfs for the PCI chain and link widths.
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <utility>

#include "topology/probe/probe.h"
#include "util/strings.h"

#if defined(__has_include)
#if __has_include(<hwloc.h>)
#include <hwloc.h>
#define BRAID_HWLOC_HEADERS 1
#endif
#endif

namespace braid {

std::string normalizeBusId(const std::string& busId) {
  std::string s;
  for (char c : busId) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // "00000000:19:00.0" (NVML's 8-digit domain) -> "0000:19:00.0"
  if (s.size() == 16 && s.compare(0, 4, "0000") == 0 && s[8] == ':') s = s.substr(4);
  return s;
}

namespace {

bool isBdf(const std::string& s) {
  // dddd:bb:dd.f
  return s.size() == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
         });
}

std::vector<int> parseCpuList(const std::string& list) {
  std::vector<int> cpus;
  for (const std::string& part : splitString(list, ',')) {
    if (part.empty()) continue;
    size_t dash = part.find('-');
    int lo = std::atoi(part.c_str()),
        hi = dash == std::string::npos ? lo : std::atoi(part.c_str() + dash + 1);
    for (int c = lo; c <= hi && c - lo < 65536; ++c) cpus.push_back(c);
  }
  return cpus;
}

// "ffffffff,ffffffff": NCCL's affinity format, 32-bit words high first.
std::string maskText(const std::vector<int>& cpus) {
  int maxCpu = 0;
  for (int c : cpus) maxCpu = std::max(maxCpu, c);
  std::vector<uint32_t> words(static_cast<size_t>(maxCpu / 32 + 1), 0);
  for (int c : cpus) words[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
  std::string out;
  for (size_t i = words.size(); i-- > 0;) {
    char buf[12];
    std::snprintf(buf, sizeof(buf), "%08x", words[i]);
    out += strCat(out.empty() ? "" : ",", buf);
  }
  return out;
}

// NUMA nodes as sysfs lists them: (node id, its CPUs).
std::vector<std::pair<int, std::vector<int>>> sysfsNumaNodes() {
  std::vector<std::pair<int, std::vector<int>>> nodes;
  for (const std::string& name : listDir("/sys/devices/system/node")) {
    if (name.rfind("node", 0) != 0 || name.size() < 5 || !std::isdigit(static_cast<unsigned char>(name[4])))
      continue;
    nodes.emplace_back(std::atoi(name.c_str() + 4),
                       parseCpuList(readSysfs("/sys/devices/system/node/" + name + "/cpulist")));
  }
  return nodes;
}

void cpuIdentity(CpuInfo* cpu) {
#if defined(__x86_64__)
  cpu->arch = "x86_64";
#elif defined(__aarch64__)
  cpu->arch = "arm64";
#else
  cpu->arch = "unknown";
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "vendor_id" && cpu->vendor.empty()) cpu->vendor = value;
    if (key == "cpu family" && cpu->familyId.empty()) cpu->familyId = value;
    if (key == "model" && cpu->modelId.empty()) cpu->modelId = value;
  }
}

#ifdef BRAID_HWLOC_HEADERS
// The few exported hwloc 2.x entry points used (the inline helpers of
// hwloc.h are avoided so that only these symbols are needed).
struct Hwloc {
  int (*topologyInit)(hwloc_topology_t*) = nullptr;
  int (*setIoFilter)(hwloc_topology_t, enum hwloc_type_filter_e) = nullptr;
  int (*topologyLoad)(hwloc_topology_t) = nullptr;
  void (*topologyDestroy)(hwloc_topology_t) = nullptr;
  int (*getTypeDepth)(hwloc_topology_t, hwloc_obj_type_t) = nullptr;
  unsigned (*nbobjsByDepth)(hwloc_topology_t, int) = nullptr;
  hwloc_obj_t (*objByDepth)(hwloc_topology_t, int, unsigned) = nullptr;
  int (*bitmapFirst)(hwloc_const_bitmap_t) = nullptr;
  int (*bitmapNext)(hwloc_const_bitmap_t, int) = nullptr;
  hwloc_topology_t topo = nullptr;
  bool ok = false;

  Hwloc() {
    void* lib = dlopen("libhwloc.so.15", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    topologyInit = reinterpret_cast<decltype(topologyInit)>(dlsym(lib, "hwloc_topology_init"));
    setIoFilter = reinterpret_cast<decltype(setIoFilter)>(dlsym(lib, "hwloc_topology_set_io_types_filter"));
    topologyLoad = reinterpret_cast<decltype(topologyLoad)>(dlsym(lib, "hwloc_topology_load"));
    topologyDestroy = reinterpret_cast<decltype(topologyDestroy)>(dlsym(lib, "hwloc_topology_destroy"));
    getTypeDepth = reinterpret_cast<decltype(getTypeDepth)>(dlsym(lib, "hwloc_get_type_depth"));
    nbobjsByDepth = reinterpret_cast<decltype(nbobjsByDepth)>(dlsym(lib, "hwloc_get_nbobjs_by_depth"));
    objByDepth = reinterpret_cast<decltype(objByDepth)>(dlsym(lib, "hwloc_get_obj_by_depth"));
    bitmapFirst = reinterpret_cast<decltype(bitmapFirst)>(dlsym(lib, "hwloc_bitmap_first"));
    bitmapNext = reinterpret_cast<decltype(bitmapNext)>(dlsym(lib, "hwloc_bitmap_next"));
    if (!topologyInit || !setIoFilter || !topologyLoad || !topologyDestroy || !getTypeDepth ||
        !nbobjsByDepth || !objByDepth || !bitmapFirst || !bitmapNext) {
      return;  // the library stays loaded: harmless
    }
    if (topologyInit(&topo) != 0) return;
    setIoFilter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (topologyLoad(topo) != 0) {
      topologyDestroy(topo);
      topo = nullptr;
      return;
    }
    ok = true;
  }
  ~Hwloc() {
    if (topo != nullptr) topologyDestroy(topo);
  }
  std::vector<int> bits(hwloc_const_bitmap_t set) const {
    std::vector<int> out;
    for (int i = bitmapFirst(set); i >= 0; i = bitmapNext(set, i)) out.push_back(i);
    return out;
  }
};

Hwloc& hwloc() {
  static Hwloc h;
  return h;
}
#endif

}  // namespace

int hwlocNumaOf(const std::string& busId) {
#ifdef BRAID_HWLOC_HEADERS
  Hwloc& h = hwloc();
  if (!h.ok) return -1;
  const int depth = h.getTypeDepth(h.topo, HWLOC_OBJ_PCI_DEVICE);
  const unsigned n = h.nbobjsByDepth(h.topo, depth);
  for (unsigned i = 0; i < n; ++i) {
    hwloc_obj_t obj = h.objByDepth(h.topo, depth, i);
    const auto& p = obj->attr->pcidev;
    char bdf[16];
    std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.%x", p.domain, p.bus, p.dev, p.func);
    if (normalizeBusId(busId) != bdf) continue;
    hwloc_obj_t up = obj;
    while (up != nullptr && up->nodeset == nullptr) up = up->parent;  // I/O objects have no nodeset
    if (up == nullptr) return -1;
    std::vector<int> nodes = h.bits(up->nodeset);
    return nodes.size() == 1 ? nodes[0] : -1;
  }
#else
  (void)busId;
#endif
  return -1;
}

std::vector<CpuInfo> probeCpus(std::vector<std::string>* notes) {
  std::vector<CpuInfo> cpus;
  CpuInfo identity;
  cpuIdentity(&identity);
#ifdef BRAID_HWLOC_HEADERS
  Hwloc& h = hwloc();
  if (h.ok) {
    const int depth = h.getTypeDepth(h.topo, HWLOC_OBJ_NUMANODE);
    const unsigned n = h.nbobjsByDepth(h.topo, depth);
    for (unsigned i = 0; i < n; ++i) {
      hwloc_obj_t obj = h.objByDepth(h.topo, depth, i);
      CpuInfo c = identity;
      c.numaId = static_cast<int>(obj->os_index);
      if (obj->cpuset != nullptr) c.affinity = maskText(h.bits(obj->cpuset));
      cpus.push_back(c);
    }
    if (!cpus.empty()) return cpus;
  }
  notes->push_back("hwloc (libhwloc.so.15) not loadable or found no NUMA node: NUMA nodes read from sysfs");
#else
  notes->push_back("built without hwloc headers: NUMA nodes read from sysfs");
#endif
  for (const auto& [id, cpuList] : sysfsNumaNodes()) {
    CpuInfo c = identity;
    c.numaId = id;
    c.affinity = maskText(cpuList);
    cpus.push_back(c);
  }
  if (cpus.empty()) cpus.push_back(identity);  // no NUMA information: one CPU node
  std::sort(cpus.begin(), cpus.end(), [](const CpuInfo& a, const CpuInfo& b) { return a.numaId < b.numaId; });
  return cpus;
}

int affinityNumaNode() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  // node<N> -> the CPUs it holds, from each node's cpulist.
  std::vector<int> nodeOfCpu(CPU_SETSIZE, -1);
  for (const auto& [id, cpuList] : sysfsNumaNodes()) {
    for (int cpu : cpuList) {
      if (cpu >= 0 && cpu < CPU_SETSIZE) nodeOfCpu[static_cast<size_t>(cpu)] = id;
    }
  }
  int node = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const int n = nodeOfCpu[static_cast<size_t>(cpu)];
    if (n < 0 || (node >= 0 && n != node)) return -1;
    node = n;
  }
  return node;
}

bool pciChain(const std::string& busId, std::vector<PciHop>* chain, int* numa) {
  chain->clear();
  const std::string bdf = normalizeBusId(busId);
  char real[PATH_MAX];
  if (realpath(("/sys/bus/pci/devices/" + bdf).c_str(), real) == nullptr) return false;
  std::string path;
  for (const std::string& part : splitString(real, '/')) {
    if (part.empty()) continue;
    path += "/" + part;
    if (!isBdf(part)) continue;
    PciHop hop;
    hop.busId = part;
    hop.cls = readSysfs(path + "/class");
    if (hop.cls.size() > 8) hop.cls = hop.cls.substr(0, 8);  // 0x030200
    hop.linkSpeed = readSysfs(path + "/current_link_speed");
    hop.linkWidth = readSysfs(path + "/current_link_width");
    hop.vendor = readSysfs(path + "/vendor");
    hop.device = readSysfs(path + "/device");
    chain->push_back(hop);
  }
  std::string n = readSysfs("/sys/bus/pci/devices/" + bdf + "/numa_node");
  *numa = n.empty() ? -1 : std::atoi(n.c_str());
  const int byHwloc = hwlocNumaOf(bdf);
  if (byHwloc >= 0) *numa = byHwloc;
  return !chain->empty();
}

bool looksLikeVirtualMachine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return line.find(" hypervisor") != std::string::npos;
  }
  const std::string vendor = readSysfs("/sys/class/dmi/id/sys_vendor");
  for (const char* v : {"QEMU", "KVM", "Microsoft Corporation", "Amazon EC2", "Google", "VMware"}) {
    if (vendor.find(v) != std::string::npos) return true;
  }
  return false;
}

}  // namespace braid
