#include "topology/topology.h"

#include "topology/probe/probe.h"
#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid {

namespace {

Status validateRings(const std::string& text) {
  for (char c : text) {
    if (!(c >= '0' && c <= '9') && c != ' ' && c != ',' && c != '-' && c != '|' && c != '\t') {
      return invalidArgument(
          "expected GPU indices separated by spaces and rings by '|' (\"0 1 2 3|3 2 1 0\"), found '",
          std::string(1, c), "'");
    }
  }
  return okStatus();
}

StringParam paramTopoFile(
    "TOPO_FILE", "",
    "Topology XML (NCCL's format, RCCL's xgmi elements too) used instead of probing the machine");
StringParam paramTopoDumpFile("TOPO_DUMP_FILE", "", "Write the topology Braid found to this XML file");
StringParam paramRings(
    "RINGS", "",
    "Ring orders inside a node, replacing the search: GPU indices in topology order, rings "
    "separated by '|' (\"0 1 2 3|3 2 1 0\")",
    {}, &validateRings);

}  // namespace

std::string ringsOverride() {
  return paramRings.get();
}

Status localTopology(TopoSystem* sys, std::vector<std::string>* notes) {
  const std::string file = paramTopoFile.get();
  if (!file.empty()) {
    BRAID_CHECK(topoLoadFile(file, sys));
    BRAID_INFO(kLogGraph, "topology loaded from NCCL_TOPO_FILE %s: %d GPUs", file.c_str(), sys->nGpus());
  } else {
    ProbeResult probe;
    BRAID_CHECK(probeSystem(&probe));
    BRAID_CHECK(topoFromXml(*probe.xml, sys));
    *notes = probe.notes;
    if (sys->flat && sys->nGpus() > 1) {
      BRAID_INFO(kLogGraph, "topology: flat PCI view (every GPU right under a CPU)%s",
                 probe.virtualMachine ? ", as a virtual machine shows it" : "");
    }
  }
  const std::string dump = paramTopoDumpFile.get();
  if (!dump.empty()) {
    BRAID_CHECK(writeXmlFile(dump, *sys->xml));
    BRAID_INFO(kLogGraph, "topology written to NCCL_TOPO_DUMP_FILE %s", dump.c_str());
  }
  return okStatus();
}

std::vector<std::string> scheduleLogLines(const Schedule& s, const std::vector<int>& ranks) {
  std::vector<std::string> lines;
  const int n = s.nChannels();
  for (int c = 0; c < n; ++c) {
    char head[32];
    std::snprintf(head, sizeof(head), "Channel %02d/%02d :", c, n);
    lines.push_back(strCat(head, " ", ringText(s.rings[static_cast<size_t>(c)])));
  }
  if (s.trees.empty()) return lines;
  const int total = static_cast<int>(s.trees[0].size());
  std::vector<int> who = ranks;
  if (who.empty()) {
    for (int r = 0; r < total; ++r) who.push_back(r);
  }
  for (int r : who) {
    std::string line = "Trees";
    for (int c = 0; c < n; ++c) {
      const TreeNodeLinks& t = s.trees[static_cast<size_t>(c)][static_cast<size_t>(r)];
      int down[3] = {-1, -1, -1};
      for (size_t i = 0; i < t.children.size() && i < 3; ++i) down[i] = t.children[i];
      line += strCat(" [", c, "] ", down[0], "/", down[1], "/", down[2], "->", r, "->", t.parent);
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace braid
