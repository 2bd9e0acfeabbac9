#include "exec/host/host_reduce.h"

namespace braid {
namespace {

// A plain loop, vectorized with unaligned loads and stores; kept out of line
// so the clones' resolver picks AVX2 once.
BRAID_HOST_CLONES void copyBytesLoop(char* dst, const char* src, size_t bytes) {
  BRAID_NO_LOOP_DEPS
  for (size_t i = 0; i < bytes; ++i) dst[i] = src[i];
}

}  // namespace

void copyBytes(void* dst, const void* src, size_t bytes) {
  const uintptr_t skew = reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src);
  if (bytes < 256 || skew % 64 == 0) {
    std::memcpy(dst, src, bytes);
  } else {
    copyBytesLoop(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  }
}

}  // namespace braid
