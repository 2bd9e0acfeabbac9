// RoCE GID selection: which entry of a port's GID table the verbs transport
// addresses its queue pairs with. Users' most common RoCE failure is a wrong
// GID, so the choice is a pure function over the table (tested on recorded
// tables) and comes with the reason it was made.
//
// Rules (InfiniBand ports use GID 0, routing is by LID):
//   - zero entries and link-local ones (fe80::/10) are never chosen;
//   - RoCE v2 with an IPv4-mapped address (::ffff:a.b.c.d) on the subnet of
//     one of the interface's addresses, then any RoCE v2 IPv4-mapped one,
//     then RoCE v2 with a global IPv6 address (on the interface's subnet
//     first), then RoCE v1; the lowest index wins within a rule;
//   - a forced index (NCCL_IB_GID_INDEX) is taken as is, after checking that
//     it is in the table and not a zero entry.
//
// The table comes from verbs or from sysfs (readGidTable, whose root
// argument lets tests point it at a fake tree):
//   <root>/sys/class/infiniband/<dev>/ports/<port>/gids/<i>          "fe80:0000:...:0001"
//   <root>/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i>  "IB/RoCE v1" or "RoCE v2"
//   <root>/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<i>  "eth0"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"
#include "util/sysfs.h"

namespace braid {

struct GidEntry {
  int index = 0;
  uint8_t raw[16] = {};
  std::string type;    // as sysfs names it: "IB/RoCE v1", "RoCE v2"; "" unknown
  std::string netdev;  // the net device the entry belongs to; "" unknown
};

// One address of a network interface.
struct InterfaceAddress {
  std::string name;       // "eth0"
  int family = 0;         // AF_INET or AF_INET6
  uint8_t addr[16] = {};  // AF_INET: the first 4 bytes
  int prefixLen = 0;
};

struct PortGids {
  std::string device;  // "mlx5_0"
  int port = 1;
  bool infiniband = false;  // link layer InfiniBand (else Ethernet: RoCE)
  std::vector<GidEntry> table;
};

struct GidChoice {
  int index = -1;
  std::string reason;  // "index 3: RoCE v2, IPv4 10.0.0.5 on eth0's subnet 10.0.0.0/24"
};

// Chooses the GID of `port`; `addrs` are the addresses of the interface the
// job uses on that port (its netdev); forcedIndex is NCCL_IB_GID_INDEX's
// value for this port (-1: choose). Errors name the device, port and index.
Status selectGid(const PortGids& port, const std::vector<InterfaceAddress>& addrs, int forcedIndex,
                 GidChoice* out);

// "fe80:0000:0000:0000:0202:c9ff:fe00:0001" (sysfs' form, util/sysfs.h's gidText) -> 16 bytes.
Status parseGidText(const std::string& text, uint8_t raw[16]);
// A readable form: "IPv4 10.0.0.5", "IPv6 2001:db8::5", "link-local fe80::...", "zero".
std::string gidDescription(const uint8_t raw[16]);

// "10.0.0.5/24" or "fd00::5/64" into *out (name left as is).
Status parseInterfaceAddress(const std::string& text, InterfaceAddress* out);
// The addresses of interface `name` on this machine (getifaddrs).
Status interfaceAddresses(const std::string& name, std::vector<InterfaceAddress>* out);

// An RDMA port as sysfs shows it.
struct SysfsRdmaPort {
  std::string device;
  int port = 0;
  std::string linkLayer;  // "Ethernet", "InfiniBand"
  std::string state;      // "ACTIVE", "DOWN", ...
  std::string netdev;     // the port's net device ("" for InfiniBand)
};
// Every port under <root>/sys/class/infiniband ("" root: the real /sys).
std::vector<SysfsRdmaPort> listSysfsRdmaPorts(const std::string& root);
// The GID table of one port; an error if the port has no gids directory.
Status readGidTable(const std::string& root, const std::string& device, int port, std::vector<GidEntry>* out);

}  // namespace braid
