// NICs: RDMA devices through libibverbs (dlopen; port state, link layer,
// speed, GIDs), falling back to /sys/class/infiniband, and Ethernet netdevs
// through /sys/class/net (speed, PCI location).
#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "topology/probe/probe.h"
#include "util/strings.h"

namespace braid {

namespace {

// libibverbs' stable C ABI: the legacy ibv_port_attr (as ibv_query_port@IBVERBS_1.1
// fills it) with room to spare, and a GID.
struct IbvPortAttr {
  int state, maxMtu, activeMtu, gidTblLen;
  uint32_t portCapFlags, maxMsgSz, badPkeyCntr, qkeyViolCntr;
  uint16_t pkeyTblLen, lid, smLid;
  uint8_t lmc, maxVlNum, smSl, subnetTimeout, initTypeReply, activeWidth, activeSpeed, physState, linkLayer,
      flags;
  uint16_t portCapFlags2;
  uint8_t reserved[128];
};
union IbvGid {
  uint8_t raw[16];
};

const char* portState(int s) {
  switch (s) {
    case 1: return "DOWN";
    case 2: return "INIT";
    case 3: return "ARMED";
    case 4: return "ACTIVE";
    case 5: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

double laneGbps(int speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4: return 10.0;
    case 8: return 10.0;
    case 16: return 14.0;
    case 32: return 25.0;
    case 64: return 50.0;
    case 128: return 100.0;
    case 256: return 200.0;
    default: return 0;
  }
}
int lanes(int width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

void addSysfsInfo(const std::string& name, NicInfo* nic) {
  const std::string base = "/sys/class/infiniband/" + name;
  nic->busId = pciBusIdOf(base + "/device");
  std::vector<std::string> nets = listDir(base + "/device/net");
  if (!nets.empty()) nic->netdev = nets[0];
}

// The GID's type from sysfs ("RoCE v2"), "" where unknown.
std::string gidType(const std::string& name, int port, int index) {
  return readSysfs(strCat("/sys/class/infiniband/", name, "/ports/", port, "/gid_attrs/types/", index));
}

bool verbsNics(std::vector<NicInfo>* nics, std::vector<std::string>* notes) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    notes->push_back("libibverbs.so.1 not found: RDMA devices read from sysfs");
    return false;
  }
  auto getList = reinterpret_cast<void** (*)(int*)>(dlsym(lib, "ibv_get_device_list"));
  auto freeList = reinterpret_cast<void (*)(void**)>(dlsym(lib, "ibv_free_device_list"));
  auto devName = reinterpret_cast<const char* (*)(void*)>(dlsym(lib, "ibv_get_device_name"));
  auto open = reinterpret_cast<void* (*)(void*)>(dlsym(lib, "ibv_open_device"));
  auto close = reinterpret_cast<int (*)(void*)>(dlsym(lib, "ibv_close_device"));
  auto queryPort = reinterpret_cast<int (*)(void*, uint8_t, IbvPortAttr*)>(dlsym(lib, "ibv_query_port"));
  auto queryGid = reinterpret_cast<int (*)(void*, uint8_t, int, IbvGid*)>(dlsym(lib, "ibv_query_gid"));
  if (!getList || !freeList || !devName || !open || !close || !queryPort || !queryGid) {
    notes->push_back("libibverbs lacks expected entry points: RDMA devices read from sysfs");
    dlclose(lib);
    return false;
  }
  int n = 0;
  void** list = getList(&n);
  for (int i = 0; list != nullptr && i < n; ++i) {
    NicInfo nic;
    nic.name = devName(list[i]);
    nic.source = "ibverbs";
    addSysfsInfo(nic.name, &nic);
    void* ctx = open(list[i]);
    if (ctx == nullptr) {
      notes->push_back(nic.name + ": ibv_open_device failed (permissions?)");
      nics->push_back(nic);
      continue;
    }
    for (int p = 1; p <= 8; ++p) {
      IbvPortAttr attr;
      std::memset(&attr, 0, sizeof(attr));
      if (queryPort(ctx, static_cast<uint8_t>(p), &attr) != 0) break;
      NetPortInfo port;
      port.port = p;
      port.state = portState(attr.state);
      port.linkLayer = attr.linkLayer == 2 ? "Ethernet" : "InfiniBand";
      port.gbps = laneGbps(attr.activeSpeed) * lanes(attr.activeWidth);
      for (int g = 0; g < std::min(attr.gidTblLen, 16); ++g) {
        IbvGid gid;
        std::memset(&gid, 0, sizeof(gid));
        if (queryGid(ctx, static_cast<uint8_t>(p), g, &gid) != 0) break;
        static const uint8_t zero[16] = {};
        if (std::memcmp(gid.raw, zero, 16) == 0) continue;
        std::string type = gidType(nic.name, p, g);
        port.gids.push_back(strCat(g, ": ", gidText(gid.raw), type.empty() ? "" : " (" + type + ")"));
      }
      nic.ports.push_back(port);
    }
    close(ctx);
    nics->push_back(nic);
  }
  if (list != nullptr) freeList(list);
  dlclose(lib);
  return true;
}

void sysfsIbNics(std::vector<NicInfo>* nics) {
  for (const std::string& name : listDir("/sys/class/infiniband")) {
    NicInfo nic;
    nic.name = name;
    nic.source = "sysfs-ib";
    addSysfsInfo(name, &nic);
    for (const std::string& p : listDir("/sys/class/infiniband/" + name + "/ports")) {
      const std::string base = "/sys/class/infiniband/" + name + "/ports/" + p;
      NetPortInfo port;
      port.port = std::atoi(p.c_str());
      std::string state = readSysfs(base + "/state");  // "4: ACTIVE"
      size_t colon = state.find(':');
      port.state = colon == std::string::npos ? state : trim(state.substr(colon + 1));
      port.linkLayer = readSysfs(base + "/link_layer");
      port.gbps = std::atof(readSysfs(base + "/rate").c_str());  // "400 Gb/sec (4X NDR)"
      for (int g = 0; g < 16; ++g) {
        std::string gid = readSysfs(strCat(base, "/gids/", g));
        if (gid.empty() || gid == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
        std::string type = gidType(name, port.port, g);
        port.gids.push_back(strCat(g, ": ", gid, type.empty() ? "" : " (" + type + ")"));
      }
      nic.ports.push_back(port);
    }
    nics->push_back(nic);
  }
}

}  // namespace

void probeNics(std::vector<NicInfo>* nics, std::vector<std::string>* notes) {
  nics->clear();
  if (!verbsNics(nics, notes)) sysfsIbNics(nics);
  if (nics->empty()) notes->push_back("no RDMA device found");
  std::vector<std::string> backing;
  for (const NicInfo& n : *nics) backing.push_back(n.netdev);
  for (const std::string& name : listDir("/sys/class/net")) {
    if (name == "lo" || std::find(backing.begin(), backing.end(), name) != backing.end()) continue;
    const std::string base = "/sys/class/net/" + name;
    const std::string bus = pciBusIdOf(base + "/device");
    if (bus.empty()) continue;  // virtual interfaces (bridges, veth, ifb) carry no PCI location
    NicInfo nic;
    nic.name = name;
    nic.source = "netdev";
    nic.busId = bus;
    nic.netdev = name;
    NetPortInfo port;
    port.port = 0;
    port.state = readSysfs(base + "/operstate");
    port.linkLayer = "Ethernet";
    const int mbps = std::atoi(readSysfs(base + "/speed").c_str());
    port.gbps = mbps > 0 ? mbps / 1000.0 : 10;
    if (mbps <= 0)
      notes->push_back(name + ": link speed unknown (a virtual NIC?), assumed 10 Gb/s as NCCL does");
    nic.ports.push_back(port);
    nics->push_back(nic);
  }
}

}  // namespace braid
