// Time of the ring and tree search (DESIGN.md goal: under 50 ms for one
// 8-GPU node, under 2 s for 1,024 nodes of 8 GPUs) on the saved machines.
//
//   topo_search_bench [FIXTURE_DIR] [REPEATS]
// Prints one line per machine and node count: channels, expected bus
// bandwidth, the median search time and the goal it is held against.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "topology/model.h"
#include "topology/search.h"
#include "topology/topology.h"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : BRAID_TOPO_FIXTURES;
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::printf("%-22s %6s %9s %12s %10s %8s\n", "machine", "nodes", "channels", "busbw GB/s", "search ms", "goal ms");
  int over = 0;
  for (const char* f : {"mi300x.xml", "dgx_h100.xml", "mi250_8gcd.xml", "pcie_2socket_8gpu.xml"}) {
    braid::TopoSystem sys;
    braid::Status s = braid::topoLoadFile(dir + "/" + f, &sys);
    if (!s.ok()) {
      std::printf("%-22s cannot load: %s\n", f, s.message().c_str());
      return 1;
    }
    for (int nodes : {1, 1024}) {
      braid::SearchOptions opt;
      opt.nodes = nodes;
      std::vector<double> ms;
      braid::Schedule sched;
      for (int i = 0; i < repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        s = braid::searchSchedule(sys, opt, &sched);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        if (!s.ok()) {
          std::printf("%-22s search failed: %s\n", f, s.message().c_str());
          return 1;
        }
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2], goal = nodes == 1 ? 50.0 : 2000.0;
      over += median > goal;
      std::printf("%-22s %6d %9d %12.1f %10.1f %8.0f%s\n", f, nodes, sched.nChannels(), sched.ringBusBw, median, goal,
                  median > goal ? "  OVER" : "");
    }
  }
  std::printf("%s\n", over ? "some searches are over the goal" : "every search within the goal");
  return 0;
}
