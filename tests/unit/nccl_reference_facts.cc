// Compiled against NCCL 2.28's own nccl.h (from the CUDA toolkit) and nothing
// of Braid's, to report NCCL's ABI facts for abi_test.
#include <nccl.h>

#include <cstddef>

#include "nccl_facts.h"

#ifdef BRAID_NCCL_H
#error "this file must see NCCL's nccl.h, not Braid's"
#endif

std::vector<NcclFact> referenceNcclFacts() {
  std::vector<NcclFact> facts;
#define BRAID_FACT(name, expr) facts.push_back({#name, static_cast<long long>(expr)});
#include "nccl_facts.inc"
#undef BRAID_FACT
  facts.push_back({"NCCL_MAJOR", NCCL_MAJOR});
  facts.push_back({"NCCL_MINOR", NCCL_MINOR});
  return facts;
}
