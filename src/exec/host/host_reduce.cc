#include "exec/host/host_reduce.h"

#include <algorithm>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BRAID_STREAM_X86 1
#endif

namespace braid {
namespace {

#ifdef BRAID_STREAM_X86
// Each aligns the destination to its vector, streams whole vectors and
// copies the ragged ends with memcpy.
__attribute__((target("avx2"))) void streamAvx2(char* dst, const char* src, size_t bytes) {
  size_t i = std::min(bytes, (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31);
  std::memcpy(dst, src, i);
  for (; i + 32 <= bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

void streamSse2(char* dst, const char* src, size_t bytes) {  // SSE2: every x86-64
  size_t i = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, i);
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}
#endif

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
    // In pieces: glibc 2.36 on AMD copies with REP MOVSB below the L2's
    // size and with a vector loop from there up, which ran 10-20% slower
    // on the CI VM's EPYC (1-32 MiB in cache: 42-46 GB/s whole against
    // 49-56 in 512 KiB pieces). Elsewhere each piece takes the path the
    // whole would; copies large enough for glibc's streaming stores are
    // not made here (outputs beyond the caches go to streamBytes).
    constexpr size_t kPiece = size_t(512) << 10;
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    for (; bytes > kPiece; bytes -= kPiece, d += kPiece, s += kPiece) std::memcpy(d, s, kPiece);
    std::memcpy(d, s, bytes);
  } else {
    copyBytesLoop(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  }
}

void streamBytes(void* dst, const void* src, size_t bytes) {
#ifdef BRAID_STREAM_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    streamAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  } else {
    streamSse2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  }
#else
  copyBytes(dst, src, bytes);
#endif
}

}  // namespace braid
