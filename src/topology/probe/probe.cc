// Assembles the live machine's topology document from the probes.
#include "topology/probe/probe.h"

#include <map>
#include <set>

#include "platform/gpu.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {

namespace {

class DocBuilder {
 public:
  explicit DocBuilder(ProbeResult* out) : out_(out) {
    out_->xml = std::make_unique<XmlNode>();
    out_->xml->name = "system";
    out_->xml->setAttr("version", "1");
    for (const CpuInfo& c : probeCpus(&out_->notes)) {
      XmlNode* cpu = out_->xml->addChild("cpu");
      cpu->setAttr("numaid", strCat(c.numaId));
      if (!c.affinity.empty()) cpu->setAttr("affinity", c.affinity);
      cpu->setAttr("arch", c.arch);
      if (!c.vendor.empty()) cpu->setAttr("vendor", c.vendor);
      if (!c.familyId.empty()) cpu->setAttr("familyid", c.familyId);
      if (!c.modelId.empty()) cpu->setAttr("modelid", c.modelId);
      cpus_[c.numaId] = cpu;
    }
  }

  // The <pci> element of a device, created with the bridges above it.
  XmlNode* device(const std::string& busId) {
    std::vector<PciHop> chain;
    int numa = -1;
    if (!pciChain(busId, &chain, &numa)) {
      out_->notes.push_back(busId +
                            " not found in /sys/bus/pci: placed under the first CPU without link details");
      chain.push_back(PciHop{normalizeBusId(busId), "", "", "", "", ""});
    }
    XmlNode* at = cpus_.count(numa) ? cpus_[numa] : out_->xml->children.front().get();
    for (const PciHop& hop : chain) {
      XmlNode* next = nullptr;
      for (const auto& c : at->children) {
        if (c->name == "pci" && c->attrOr("busid", "") == hop.busId) next = c.get();
      }
      if (next == nullptr) {
        next = at->addChild("pci");
        next->setAttr("busid", hop.busId);
        if (!hop.cls.empty()) next->setAttr("class", hop.cls);
        if (!hop.vendor.empty()) next->setAttr("vendor", hop.vendor);
        if (!hop.device.empty()) next->setAttr("device", hop.device);
        if (!hop.linkSpeed.empty()) next->setAttr("link_speed", hop.linkSpeed);
        if (!hop.linkWidth.empty()) next->setAttr("link_width", hop.linkWidth);
      }
      at = next;
    }
    return at;
  }

 private:
  ProbeResult* out_;
  std::map<int, XmlNode*> cpus_;
};

}  // namespace

Status probeSystem(ProbeResult* out) {
  *out = ProbeResult();
  DocBuilder doc(out);
  out->virtualMachine = looksLikeVirtualMachine();

  int count = 0;
  BRAID_CHECK(gpuDeviceCount(&count));
  std::vector<GpuInfo> gpus;
  std::vector<std::string> busIds;
  std::map<std::string, XmlNode*> gpuXml;
  for (int d = 0; d < count; ++d) {
    GpuInfo info;
    BRAID_CHECK(gpuDeviceInfo(d, &info));
    info.busId = normalizeBusId(info.busId);
    XmlNode* pci = doc.device(info.busId);
    XmlNode* gpu = pci->addChild("gpu");
    gpu->setAttr("dev", strCat(d));
    if (info.arch.rfind("sm_", 0) == 0) gpu->setAttr("sm", info.arch.substr(3));
    if (info.arch.rfind("gfx", 0) == 0) gpu->setAttr("gcn", info.arch.substr(0, info.arch.find(':')));
    gpu->setAttr("gdr", "1");
    gpuXml[info.busId] = gpu;
    busIds.push_back(info.busId);
    gpus.push_back(info);
  }
  if (count == 0)
    out->notes.push_back("no GPU visible to the runtime (" + std::string(gpuFlavorName()) + " build)");

  std::set<std::pair<std::string, std::string>> fast;
  for (const GpuLink& l : probeGpuLinks(busIds, &out->notes)) {
    XmlNode* link = gpuXml[l.from]->addChild(l.xgmi ? "xgmi" : "nvlink");
    link->setAttr("target", l.target);
    link->setAttr("count", strCat(l.count));
    link->setAttr("tclass", l.targetClass);
    fast.insert({l.from, l.target});
  }
  // PCIe peer access, asked in both directions; an asymmetric answer is noted.
  for (int a = 0; a < count; ++a) {
    for (int b = a + 1; b < count; ++b) {
      bool ab = false, ba = false;
      if (!gpuCanAccessPeer(a, b, &ab).ok() || !gpuCanAccessPeer(b, a, &ba).ok()) continue;
      if (ab != ba) {
        out->notes.push_back(strCat("GPU ", a, " -> ", b, " peer access ", ab ? "yes" : "no", " but ", b,
                                    " -> ", a, " ", ba ? "yes" : "no", ": treated as no peer access"));
      } else if (!ab && !fast.count({busIds[static_cast<size_t>(a)], busIds[static_cast<size_t>(b)]})) {
        out->notes.push_back(
            strCat("GPUs ", a, " and ", b, " cannot access each other: traffic goes through host memory"));
      }
    }
  }

  probeNics(&out->nics, &out->notes);
  bool rdma = false;
  for (const NicInfo& n : out->nics) {
    for (const NetPortInfo& p : n.ports) rdma = rdma || (n.source != "netdev" && p.state == "ACTIVE");
  }
  int netDev = 0;
  for (const NicInfo& n : out->nics) {
    if ((n.source == "netdev") == rdma || n.busId.empty())
      continue;  // RDMA ports if any are up, else netdevs
    XmlNode* nic = nullptr;
    XmlNode* pci = doc.device(n.busId);
    for (const auto& c : pci->children) {
      if (c->name == "nic") nic = c.get();
    }
    if (nic == nullptr) nic = pci->addChild("nic");
    for (const NetPortInfo& p : n.ports) {
      if (n.source != "netdev" && p.state != "ACTIVE") continue;
      XmlNode* net = nic->addChild("net");
      net->setAttr("name", n.name);
      net->setAttr("dev", strCat(netDev++));
      net->setAttr("speed", strCat(static_cast<long>(p.gbps * 1000)));
      net->setAttr("port", strCat(p.port));
      net->setAttr("gdr", "0");
    }
  }
  if (out->virtualMachine) {
    out->notes.push_back("running in a virtual machine (hypervisor flag): the PCI tree may be flattened");
  }
  for (const std::string& n : out->notes) BRAID_INFO(kLogGraph, "topology probe: %s", n.c_str());
  return okStatus();
}

}  // namespace braid
