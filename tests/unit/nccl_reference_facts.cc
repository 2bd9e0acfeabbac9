// Compiled against NCCL 2.28's own nccl.h (from the CUDA toolkit) and nothing
// of Braid's, to report NCCL's ABI facts for abi_test.
#include <nccl.h>

#include <cstddef>

#include "nccl_facts.h"

// The device API's structures, where this NCCL has its device headers.
#if __has_include(<nccl_device.h>) && __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#include <nccl_device.h>
#define BRAID_REFERENCE_HAS_DEVICE_API 1
constexpr int kNcclGinMaxContexts = NCCL_GIN_MAX_CONTEXTS;
const size_t kNcclResourceUnit = ncclGetResourceBufferOffset(1);
#endif

#ifdef BRAID_NCCL_H
#error "this file must see NCCL's nccl.h, not Braid's"
#endif

std::vector<NcclFact> referenceNcclFacts() {
  std::vector<NcclFact> facts;
#define BRAID_FACT(name, expr) facts.push_back({#name, static_cast<long long>(expr)});
#include "nccl_facts.inc"
#ifdef BRAID_REFERENCE_HAS_DEVICE_API
#include "nccl_device_facts.inc"
#endif
#undef BRAID_FACT
  facts.push_back({"NCCL_MAJOR", NCCL_MAJOR});
  facts.push_back({"NCCL_MINOR", NCCL_MINOR});
  return facts;
}
