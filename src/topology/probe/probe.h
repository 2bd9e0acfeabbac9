// Discovery of the live machine (DESIGN.md §5): GPUs from the GPU runtime,
// GPU-GPU links (NVLink through NVML, xGMI through rocm-smi or KFD sysfs,
// PCIe peer access through the runtime), CPUs and NUMA nodes (hwloc when
// libhwloc is present, else sysfs), the PCI tree (sysfs), NICs (libibverbs
// when present, else sysfs) and netdevs (sysfs). Every vendor library is
// opened with dlopen and may be missing: what cannot be learned is left out
// and said in `notes`, never invented.
//
// The result is a document in NCCL's topology XML format, so the live
// machine and an NCCL_TOPO_FILE go through one model builder. Called once
// per process (communicator init, braid-topo); not thread-safe against
// itself, safe against everything else.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "topology/xml.h"
#include "util/status.h"
#include "util/sysfs.h"

namespace braid {

struct NetPortInfo {
  int port = 1;
  std::string state;      // "ACTIVE", "DOWN", ...
  std::string linkLayer;  // "InfiniBand", "Ethernet"
  double gbps = 0;
  std::vector<std::string> gids;  // "index: fe80:...:0001"
};

struct NicInfo {
  std::string name;    // "mlx5_0" or a netdev "eth0"
  std::string source;  // "ibverbs", "sysfs-ib" or "netdev"
  std::string busId;   // PCI location, "" if virtual
  std::string netdev;  // the Ethernet interface of the device, if any
  std::vector<NetPortInfo> ports;
};

struct ProbeResult {
  std::unique_ptr<XmlNode> xml;
  std::vector<NicInfo> nics;
  std::vector<std::string> notes;  // what was skipped and why
  bool virtualMachine = false;
};

Status probeSystem(ProbeResult* out);
// NICs only (braid-topo --net).
void probeNics(std::vector<NicInfo>* nics, std::vector<std::string>* notes);

// ---- pieces, exposed for the prober's files ---------------------------------

struct PciHop {
  std::string busId, cls, linkSpeed, linkWidth, vendor, device;
};
// The PCI path from the root port down to `busId` (sysfs), and its NUMA node
// (-1 unknown). False if the device is not in sysfs.
bool pciChain(const std::string& busId, std::vector<PciHop>* chain, int* numa);

struct CpuInfo {
  int numaId = 0;
  std::string affinity, vendor, arch, familyId, modelId;
};
// NUMA nodes with their CPU sets: hwloc when it loads, else sysfs.
std::vector<CpuInfo> probeCpus(std::vector<std::string>* notes);
// The NUMA node every CPU of this thread's affinity belongs to (sysfs), or -1
// when the affinity spans several nodes or the machine says nothing.
int affinityNumaNode();
// NUMA node of a PCI device by hwloc (-1 if hwloc is absent or does not know).
int hwlocNumaOf(const std::string& busId);

struct GpuLink {
  std::string from, target;  // bus ids
  bool xgmi = false;
  int count = 1;
  std::string targetClass;  // "0x068000" for an NVSwitch
};
// NVLink (NVML) and xGMI (rocm-smi, else KFD sysfs) links of the given GPUs.
std::vector<GpuLink> probeGpuLinks(const std::vector<std::string>& gpuBusIds,
                                   std::vector<std::string>* notes);

bool looksLikeVirtualMachine();
std::string normalizeBusId(const std::string& busId);

}  // namespace braid
