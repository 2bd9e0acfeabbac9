// NCCL 2.28's device API as the library sees it: the structures of the
// public nccl_device.h (NCCL's layout to the byte, checked against NCCL's
// headers by abi_test through tests/unit/nccl_device_facts.inc), and what
// the library computes for kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_device.h"

constexpr int kNcclGinMaxContexts = NCCL_GIN_MAX_CONTEXTS;
constexpr size_t kNcclResourceUnit = 128;  // a ncclDevResourceHandle counts these

namespace braid {
// The reciprocal NCCL's kernels divide by (nccl::utility::idivFast32).
constexpr uint32_t ncclDivisorReciprocal(uint32_t x) {
  return UINT32_MAX / x + ((x & (x - 1)) == 0 ? 1u : 0u);
}
}  // namespace braid
