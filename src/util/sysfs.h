// Small reads of sysfs (and of saved or fake sysfs trees in tests), shared by
// the topology probe and the verbs transport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

// The file's contents, trimmed; "" if it cannot be read.
std::string readSysfs(const std::string& path);
// The directory's entries, sorted, without "." names; empty if unreadable.
std::vector<std::string> listDir(const std::string& path);
// The PCI address ("0000:3b:00.0") of a sysfs device path such as
// /sys/class/net/eth0/device: the last PCI component of its real path, so a
// virtio NIC gives the PCI function it sits on. "" when it has none.
std::string pciBusIdOf(const std::string& sysPath);
// The NUMA node sysfs gives the PCI function `busId`; -1 when unknown.
int pciNumaNode(const std::string& busId);
// A GID as sysfs writes it: "fe80:0000:0000:0000:0202:c9ff:fe00:0001".
std::string gidText(const uint8_t raw[16]);

}  // namespace braid
