// A table of ABI facts (see nccl_facts.inc), filled once from Braid's header
// and once from NCCL's, in separate translation units.
#pragma once

#include <vector>

struct NcclFact {
  const char* name;
  long long value;
};

std::vector<NcclFact> referenceNcclFacts();  // from NCCL's own nccl.h
