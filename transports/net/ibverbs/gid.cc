#include "transports/net/ibverbs/gid.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "util/strings.h"

namespace braid {
namespace {

bool isZero(const uint8_t* raw) {
  for (int i = 0; i < 16; ++i) {
    if (raw[i] != 0) return false;
  }
  return true;
}
bool isLinkLocal(const uint8_t* raw) {
  return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}
bool isV4Mapped(const uint8_t* raw) {
  for (int i = 0; i < 10; ++i) {
    if (raw[i] != 0) return false;
  }
  return raw[10] == 0xff && raw[11] == 0xff;
}
bool isV2(const GidEntry& e) {
  return e.type.find("v2") != std::string::npos;
}
bool isV1(const GidEntry& e) {
  return e.type.find("v1") != std::string::npos;
}

std::string ipText(int family, const uint8_t* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, addr, buf, sizeof(buf));
  return buf;
}

// True if the first `bits` bits of a and b agree.
bool samePrefix(const uint8_t* a, const uint8_t* b, int bits) {
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

std::string subnetText(const InterfaceAddress& a) {
  uint8_t net[16] = {};
  const int bytes = a.family == AF_INET ? 4 : 16;
  for (int i = 0, bits = a.prefixLen; i < bytes; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
    net[i] = a.addr[i] & mask;
  }
  return strCat(ipText(a.family, net), "/", a.prefixLen);
}

// The interface address whose subnet holds the GID's address, or null.
const InterfaceAddress* subnetOf(const GidEntry& e, const std::vector<InterfaceAddress>& addrs) {
  const bool v4 = isV4Mapped(e.raw);
  for (const InterfaceAddress& a : addrs) {
    if (v4 && a.family == AF_INET && samePrefix(e.raw + 12, a.addr, a.prefixLen)) return &a;
    if (!v4 && a.family == AF_INET6 && samePrefix(e.raw, a.addr, a.prefixLen)) return &a;
  }
  return nullptr;
}

std::string subnetsOf(const std::vector<InterfaceAddress>& addrs, int family) {
  std::string s;
  for (const InterfaceAddress& a : addrs) {
    if (a.family == family) s += (s.empty() ? "" : ", ") + subnetText(a);
  }
  return s;
}

std::string typeText(const GidEntry& e) {
  return e.type.empty() ? "type unknown" : e.type;
}

std::string where(const PortGids& p) {
  return strCat(p.device, " port ", p.port);
}

bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string ibRoot(const std::string& root) {
  return root + "/sys/class/infiniband";
}

}  // namespace


Status parseGidText(const std::string& text, uint8_t raw[16]) {
  const std::string t = trim(text);
  // sysfs' fixed form first; anything inet_pton reads ("fe80::1") too.
  in6_addr a;
  if (inet_pton(AF_INET6, t.c_str(), &a) == 1) {
    std::memcpy(raw, &a, 16);
    return okStatus();
  }
  return invalidArgument("'", t, "' is not a GID (expected 8 groups of 4 hex digits)");
}

std::string gidDescription(const uint8_t raw[16]) {
  if (isZero(raw)) return "zero";
  if (isV4Mapped(raw)) return "IPv4 " + ipText(AF_INET, raw + 12);
  if (isLinkLocal(raw)) return "link-local " + ipText(AF_INET6, raw);
  return "IPv6 " + ipText(AF_INET6, raw);
}

Status selectGid(const PortGids& port, const std::vector<InterfaceAddress>& addrs, int forcedIndex,
                 GidChoice* out) {
  if (forcedIndex >= 0) {
    const GidEntry* hit = nullptr;
    for (const GidEntry& e : port.table) {
      if (e.index == forcedIndex) hit = &e;
    }
    if (hit == nullptr) {
      return invalidArgument(
          where(port), ": NCCL_IB_GID_INDEX selects GID index ", forcedIndex,
          ", but the port's GID table has ", port.table.size(),
          port.table.empty() ? " entries" : strCat(" entries (0..", port.table.size() - 1, ")"),
          "; see `braid-topo --net` for the table");
    }
    if (isZero(hit->raw)) {
      return invalidArgument(where(port), ": NCCL_IB_GID_INDEX selects GID index ", forcedIndex,
                             ", which is empty (a zero GID: no address behind it); see `braid-topo --net` "
                             "for the populated entries");
    }
    out->index = forcedIndex;
    out->reason = strCat("index ", forcedIndex, ": set by NCCL_IB_GID_INDEX (", typeText(*hit), ", ",
                         gidDescription(hit->raw), ")");
    return okStatus();
  }
  if (port.infiniband) {
    if (port.table.empty() || isZero(port.table[0].raw)) {
      return systemError(where(port), ": InfiniBand port without a port GID at index 0");
    }
    out->index = port.table[0].index;
    out->reason = strCat("index ", out->index, ": InfiniBand port, its port GID (",
                         gidText(port.table[0].raw), "; routing by LID)");
    return okStatus();
  }
  const std::string ifname = addrs.empty() ? std::string("the interface") : addrs[0].name;
  // Rule 1: RoCE v2, IPv4 on the interface's subnet.
  for (const GidEntry& e : port.table) {
    if (!isV2(e) || !isV4Mapped(e.raw)) continue;
    if (const InterfaceAddress* a = subnetOf(e, addrs)) {
      out->index = e.index;
      out->reason = strCat("index ", e.index, ": RoCE v2, ", gidDescription(e.raw), " on ", a->name,
                           "'s subnet ", subnetText(*a));
      return okStatus();
    }
  }
  // Rule 2: any RoCE v2 IPv4.
  for (const GidEntry& e : port.table) {
    if (!isV2(e) || !isV4Mapped(e.raw)) continue;
    const std::string subnets = subnetsOf(addrs, AF_INET);
    out->index = e.index;
    out->reason = strCat("index ", e.index, ": RoCE v2, ", gidDescription(e.raw),
                         subnets.empty() ? strCat(" (", ifname, " has no IPv4 address to match)")
                                         : strCat(" (not on ", ifname, "'s subnets ", subnets, ")"));
    return okStatus();
  }
  // Rule 3: RoCE v2, global IPv6: on the interface's subnet first.
  const GidEntry* v6 = nullptr;
  const InterfaceAddress* v6Subnet = nullptr;
  for (const GidEntry& e : port.table) {
    if (!isV2(e) || isZero(e.raw) || isLinkLocal(e.raw) || isV4Mapped(e.raw)) continue;
    const InterfaceAddress* a = subnetOf(e, addrs);
    if (v6 == nullptr || (a != nullptr && v6Subnet == nullptr)) {
      v6 = &e;
      v6Subnet = a;
    }
  }
  if (v6 != nullptr) {
    out->index = v6->index;
    out->reason =
        strCat("index ", v6->index, ": RoCE v2, ", gidDescription(v6->raw),
               v6Subnet != nullptr ? strCat(" on ", v6Subnet->name, "'s subnet ", subnetText(*v6Subnet))
                                   : std::string(""),
               " (no RoCE v2 GID with an IPv4 address)");
    return okStatus();
  }
  // Rule 4: RoCE v1 (then entries of unknown type).
  for (int pass = 0; pass < 2; ++pass) {
    for (const GidEntry& e : port.table) {
      if (isZero(e.raw) || isLinkLocal(e.raw) || isV2(e)) continue;
      if (pass == 0 && !isV1(e)) continue;
      out->index = e.index;
      out->reason = strCat("index ", e.index, ": ", typeText(e), ", ", gidDescription(e.raw),
                           " (no RoCE v2 GID with a routable address: traffic cannot cross an IP router)");
      return okStatus();
    }
  }
  size_t linkLocal = 0;
  for (const GidEntry& e : port.table) linkLocal += isLinkLocal(e.raw) ? 1 : 0;
  return systemError(where(port), ": no usable GID: the table has ", port.table.size(), " entries, ",
                     linkLocal, " link-local (fe80::/10) and the rest empty; give the port's interface",
                     addrs.empty() ? std::string("") : " " + ifname,
                     " an IPv4 or global IPv6 address (ip addr add ...), or set NCCL_IB_GID_INDEX");
}

Status parseInterfaceAddress(const std::string& text, InterfaceAddress* out) {
  const std::string t = trim(text);
  const size_t slash = t.find('/');
  const std::string ip = t.substr(0, slash);
  int64_t prefix = -1;
  if (inet_pton(AF_INET, ip.c_str(), out->addr) == 1) {
    out->family = AF_INET;
  } else if (inet_pton(AF_INET6, ip.c_str(), out->addr) == 1) {
    out->family = AF_INET6;
  } else {
    return invalidArgument("'", t, "' is not an address/prefix (10.0.0.5/24, fd00::5/64)");
  }
  const int maxBits = out->family == AF_INET ? 32 : 128;
  if (slash == std::string::npos) {
    prefix = maxBits;
  } else {
    const char* s = t.c_str() + slash + 1;
    char* end = nullptr;
    prefix = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || prefix < 0 || prefix > maxBits) {
      return invalidArgument("'", t, "': the prefix length must be 0..", maxBits);
    }
  }
  out->prefixLen = static_cast<int>(prefix);
  return okStatus();
}

Status interfaceAddresses(const std::string& name, std::vector<InterfaceAddress>* out) {
  out->clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoError("getifaddrs", errno);
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_netmask == nullptr || name != i->ifa_name) continue;
    InterfaceAddress a;
    a.name = name;
    a.family = i->ifa_addr->sa_family;
    const uint8_t* mask = nullptr;
    int bytes = 0;
    if (a.family == AF_INET) {
      std::memcpy(a.addr, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
      mask = reinterpret_cast<const uint8_t*>(&reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr);
      bytes = 4;
    } else if (a.family == AF_INET6) {
      std::memcpy(a.addr, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
      mask = reinterpret_cast<const uint8_t*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_netmask)->sin6_addr);
      bytes = 16;
    } else {
      continue;
    }
    for (int b = 0; b < bytes; ++b) a.prefixLen += __builtin_popcount(mask[b]);
    out->push_back(a);
  }
  freeifaddrs(list);
  return okStatus();
}

std::vector<SysfsRdmaPort> listSysfsRdmaPorts(const std::string& root) {
  std::vector<SysfsRdmaPort> ports;
  for (const std::string& dev : listDir(ibRoot(root))) {
    const std::string devDir = ibRoot(root) + "/" + dev;
    std::vector<std::string> devNets = listDir(devDir + "/device/net");
    std::vector<int> numbers;
    for (const std::string& p : listDir(devDir + "/ports")) {
      if (allDigits(p)) numbers.push_back(std::atoi(p.c_str()));
    }
    std::sort(numbers.begin(), numbers.end());
    for (int n : numbers) {
      const std::string base = strCat(devDir, "/ports/", n);
      SysfsRdmaPort port;
      port.device = dev;
      port.port = n;
      port.linkLayer = readSysfs(base + "/link_layer");
      const std::string state = readSysfs(base + "/state");  // "4: ACTIVE"
      const size_t colon = state.find(':');
      port.state = colon == std::string::npos ? state : trim(state.substr(colon + 1));
      // The netdev most GID entries name, else the device's first one.
      std::map<std::string, int> seen;
      for (const std::string& i : listDir(base + "/gid_attrs/ndevs")) {
        const std::string nd = readSysfs(base + "/gid_attrs/ndevs/" + i);
        if (!nd.empty()) ++seen[nd];
      }
      int best = 0;
      for (const auto& [name, count] : seen) {
        if (count > best) {
          best = count;
          port.netdev = name;
        }
      }
      if (port.netdev.empty() && !devNets.empty()) port.netdev = devNets[0];
      ports.push_back(port);
    }
  }
  return ports;
}

Status readGidTable(const std::string& root, const std::string& device, int port,
                    std::vector<GidEntry>* out) {
  out->clear();
  const std::string base = strCat(ibRoot(root), "/", device, "/ports/", port);
  std::vector<int> indexes;
  for (const std::string& i : listDir(base + "/gids")) {
    if (allDigits(i)) indexes.push_back(std::atoi(i.c_str()));
  }
  if (indexes.empty()) return systemError(device, " port ", port, ": no GID table under ", base, "/gids");
  std::sort(indexes.begin(), indexes.end());
  for (int i : indexes) {
    GidEntry e;
    e.index = i;
    const std::string text = readSysfs(strCat(base, "/gids/", i));
    if (!text.empty() && !parseGidText(text, e.raw).ok()) {
      return systemError(device, " port ", port, ": GID ", i, " reads '", text, "', not a GID");
    }
    // Reading the attributes of an empty entry fails (EINVAL) on real sysfs.
    e.type = readSysfs(strCat(base, "/gid_attrs/types/", i));
    e.netdev = readSysfs(strCat(base, "/gid_attrs/ndevs/", i));
    out->push_back(e);
  }
  return okStatus();
}

}  // namespace braid
