// GPU-GPU links: NVLink through NVML, xGMI through rocm-smi or, without it,
// the KFD topology in sysfs. Both libraries are opened with dlopen; the few
// entry points used are declared here (their C ABI is stable).
#include <dirent.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include "topology/probe/probe.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {

namespace {

// ---- NVML --------------------------------------------------------------------
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr unsigned kNvmlMaxLinks = 18;
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvmlDeviceTypeSwitch = 2;

void nvlinks(const std::vector<std::string>& gpus, std::vector<GpuLink>* out,
             std::vector<std::string>* notes) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    notes->push_back("NVML (libnvidia-ml.so.1) not found: no NVLink information");
    return;
  }
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlShutdown"));
  auto byBus = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto state = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>(
      dlsym(lib, "nvmlDeviceGetNvLinkState"));
  auto remote = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlPciInfo_t*)>(
      dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  auto remoteType = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>(
      dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType"));
  if (!init || !shutdown || !byBus || !state || !remote) {
    notes->push_back("NVML lacks the NVLink entry points: no NVLink information");
    dlclose(lib);
    return;
  }
  if (init() != 0) {
    notes->push_back("nvmlInit failed: no NVLink information");
    dlclose(lib);
    return;
  }
  const std::set<std::string> known(gpus.begin(), gpus.end());
  for (const std::string& bus : gpus) {
    nvmlDevice_t dev = nullptr;
    if (byBus(bus.c_str(), &dev) != 0) continue;  // an AMD GPU, or not NVML's
    std::map<std::string, GpuLink> byTarget;
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      if (state(dev, l, &active) != 0 || active != kNvmlFeatureEnabled) continue;
      nvmlPciInfo_t pci{};
      if (remote(dev, l, &pci) != 0) continue;
      const std::string target = normalizeBusId(pci.busId);
      int type = -1;
      if (remoteType != nullptr && remoteType(dev, l, &type) != 0) type = -1;
      GpuLink& link = byTarget[target];
      if (link.from.empty()) {
        link.from = bus;
        link.target = target;
        link.count = 0;
        // A target that is no GPU of ours is a switch (NCCL's rule when the type is unknown).
        const bool toSwitch = type == kNvmlDeviceTypeSwitch || (type < 0 && known.count(target) == 0);
        link.targetClass = toSwitch ? "0x068000" : "0x030200";
      }
      ++link.count;
    }
    for (auto& kv : byTarget) out->push_back(kv.second);
  }
  shutdown();
  dlclose(lib);
}

// ---- rocm-smi ----------------------------------------------------------------
using rsmi_status_t = int;
constexpr int kRsmiIoLinkXgmi = 2;

bool rsmiLinks(const std::vector<std::string>& gpus, std::vector<GpuLink>* out,
               std::vector<std::string>* notes) {
  void* lib = dlopen("librocm_smi64.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen("librocm_smi64.so.7", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen("librocm_smi64.so.6", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    notes->push_back("rocm-smi (librocm_smi64.so) not found");
    return false;
  }
  auto init = reinterpret_cast<rsmi_status_t (*)(uint64_t)>(dlsym(lib, "rsmi_init"));
  auto shutdown = reinterpret_cast<rsmi_status_t (*)()>(dlsym(lib, "rsmi_shut_down"));
  auto count = reinterpret_cast<rsmi_status_t (*)(uint32_t*)>(dlsym(lib, "rsmi_num_monitor_devices"));
  auto pciId = reinterpret_cast<rsmi_status_t (*)(uint32_t, uint64_t*)>(dlsym(lib, "rsmi_dev_pci_id_get"));
  auto linkType = reinterpret_cast<rsmi_status_t (*)(uint32_t, uint32_t, uint64_t*, int*)>(
      dlsym(lib, "rsmi_topo_get_link_type"));
  uint32_t n = 0;
  if (!init || !shutdown || !count || !pciId || !linkType || init(0) != 0) {
    notes->push_back("rocm-smi could not be initialised");
    dlclose(lib);
    return false;
  }
  if (count(&n) != 0) n = 0;
  std::vector<std::string> bus(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t id = 0;
    if (pciId(i, &id) != 0) continue;
    char text[16];
    std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", static_cast<unsigned>((id >> 32) & 0xffff),
                  static_cast<unsigned>((id >> 8) & 0xff), static_cast<unsigned>((id >> 3) & 0x1f),
                  static_cast<unsigned>(id & 0x7));
    bus[i] = text;
  }
  const std::set<std::string> wanted(gpus.begin(), gpus.end());
  for (uint32_t a = 0; a < n; ++a) {
    for (uint32_t b = 0; b < n; ++b) {
      if (a == b || !wanted.count(bus[a]) || !wanted.count(bus[b])) continue;
      uint64_t hops = 0;
      int type = 0;
      if (linkType(a, b, &hops, &type) == 0 && type == kRsmiIoLinkXgmi && hops == 1) {
        out->push_back(GpuLink{bus[a], bus[b], true, 1, "0x038000"});
      }
    }
  }
  shutdown();
  dlclose(lib);
  return true;
}

// ---- KFD sysfs -----------------------------------------------------------------
// /sys/class/kfd/kfd/topology/nodes/N/{properties,io_links/L/properties}.
std::map<std::string, std::string> props(const std::string& path) {
  std::map<std::string, std::string> m;
  for (const std::string& line : splitString(readSysfs(path), '\n')) {
    size_t sp = line.find(' ');
    if (sp != std::string::npos) m[line.substr(0, sp)] = trim(line.substr(sp + 1));
  }
  return m;
}

void kfdLinks(const std::vector<std::string>& gpus, std::vector<GpuLink>* out,
              std::vector<std::string>* notes) {
  const std::string root = "/sys/class/kfd/kfd/topology/nodes";
  DIR* dir = opendir(root.c_str());
  if (dir == nullptr) {
    notes->push_back("no KFD topology in sysfs: no xGMI information");
    return;
  }
  std::map<int, std::string> busOfNode;
  std::vector<int> nodes;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int node = std::atoi(e->d_name);
    auto p = props(strCat(root, "/", node, "/properties"));
    if (p["simd_count"].empty() || p["simd_count"] == "0") continue;  // a CPU node
    const long loc = std::atol(p["location_id"].c_str());
    char text[16];
    std::snprintf(text, sizeof(text), "%04x:%02lx:%02lx.%lx",
                  static_cast<unsigned>(std::atol(p["domain"].c_str())), (loc >> 8) & 0xff, (loc >> 3) & 0x1f,
                  loc & 0x7);
    busOfNode[node] = text;
    nodes.push_back(node);
  }
  closedir(dir);
  const std::set<std::string> wanted(gpus.begin(), gpus.end());
  for (int node : nodes) {
    const std::string links = strCat(root, "/", node, "/io_links");
    DIR* ld = opendir(links.c_str());
    if (ld == nullptr) continue;
    while (dirent* e = readdir(ld)) {
      if (e->d_name[0] == '.') continue;
      auto p = props(links + "/" + e->d_name + "/properties");
      const int type = std::atoi(p["type"].c_str());
      const int to = std::atoi(p["node_to"].c_str());
      if ((type != 11 && type != 16) || !busOfNode.count(to)) continue;  // 11: XGMI (HSA_IOLINKTYPE_XGMI)
      if (!wanted.count(busOfNode[node]) || !wanted.count(busOfNode[to])) continue;
      out->push_back(GpuLink{busOfNode[node], busOfNode[to], true, 1, "0x038000"});
    }
    closedir(ld);
  }
}

}  // namespace

std::vector<GpuLink> probeGpuLinks(const std::vector<std::string>& gpuBusIds,
                                   std::vector<std::string>* notes) {
  std::vector<GpuLink> links;
  if (gpuBusIds.empty()) return links;
  nvlinks(gpuBusIds, &links, notes);
  std::vector<GpuLink> xgmi;
  if (!rsmiLinks(gpuBusIds, &xgmi, notes)) kfdLinks(gpuBusIds, &xgmi, notes);
  links.insert(links.end(), xgmi.begin(), xgmi.end());
  return links;
}

}  // namespace braid
