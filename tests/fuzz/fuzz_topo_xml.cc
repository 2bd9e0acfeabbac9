// libFuzzer target: the topology XML reader, the model builder and the
// search on any text. Properties: a rejected file is an ncclInvalidArgument
// naming the file and line; an accepted one writes back to the same tree;
// a model that builds yields rings that visit every GPU once.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "topology/model.h"
#include "topology/search.h"
#include "topology/xml.h"

using namespace braid;
using braid::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<XmlNode> root;
  Status s = parseXml(text, "fuzz.xml", &root);
  if (!s.ok()) {
    fuzz::checkRejected(s);
    check(s.message().rfind("fuzz.xml:", 0) == 0);
    return 0;
  }
  std::unique_ptr<XmlNode> again;
  check(parseXml(writeXml(*root), "again.xml", &again).ok());
  check(xmlEqual(*root, *again));

  TopoSystem sys;
  Status m = topoFromXml(*root, &sys);
  if (!m.ok()) {
    fuzz::checkRejected(m);
    return 0;
  }
  if (sys.nGpus() == 0 || sys.nGpus() > 8) return 0;  // bounded work per input
  for (int nodes : {1, 2}) {
    SearchOptions opt;
    opt.nodes = nodes;
    Schedule sched;
    check(searchSchedule(sys, opt, &sched).ok());
    const int total = nodes * sys.nGpus();
    for (const auto& ring : sched.rings) {
      std::vector<int> seen(static_cast<size_t>(total), 0);
      check(static_cast<int>(ring.size()) == total);
      for (int g : ring) {
        check(g >= 0 && g < total && seen[static_cast<size_t>(g)]++ == 0);
      }
    }
  }
  return 0;
}
