// The host engine's element loops: out = op(a, b) over any length, built
// twice on x86-64 with GCC (AVX2 and baseline, picked at load time by the
// CPU: target_clones), since the library itself is built for the baseline
// CPU and AVX2 doubles what a core reduces from cache. An output may be
// exactly one of the inputs (in place); no other overlap is allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

// Not under the sanitizers: the clones' resolver runs while the program is
// relocated, before their runtime starts (TSan crashes there).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define BRAID_HOST_CLONES __attribute__((target_clones("avx2", "default")))
#define BRAID_NO_LOOP_DEPS _Pragma("GCC ivdep")
#elif defined(__GNUC__) && !defined(__clang__)
#define BRAID_HOST_CLONES
#define BRAID_NO_LOOP_DEPS _Pragma("GCC ivdep")
#elif defined(__clang__)
#define BRAID_HOST_CLONES
#define BRAID_NO_LOOP_DEPS _Pragma("clang loop vectorize(assume_safety)")
#else
#define BRAID_HOST_CLONES
#define BRAID_NO_LOOP_DEPS
#endif

// Clang reports every loop its vectorizer could not do although asked
// (fp16/bf16/fp8 operators): expected, not worth a warning per instance.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace braid {

// dst[i] = op(a[i], b[i]).
template <typename T, typename Op>
BRAID_HOST_CLONES void reduceInto(T* dst, const T* a, const T* b, size_t n, Op op) {
  BRAID_NO_LOOP_DEPS
  for (size_t i = 0; i < n; ++i) dst[i] = op(a[i], b[i]);
}

// d0[i] = d1[i] = op(a[i], b[i]): one pass writing two outputs.
template <typename T, typename Op>
BRAID_HOST_CLONES void reduceInto2(T* d0, T* d1, const T* a, const T* b, size_t n, Op op) {
  BRAID_NO_LOOP_DEPS
  for (size_t i = 0; i < n; ++i) {
    const T v = op(a[i], b[i]);
    d0[i] = v;
    d1[i] = v;
  }
}

// dst[0, bytes) = src[0, bytes); the ranges do not overlap. glibc's memcpy
// is the fastest copy when both pointers share their alignment modulo 64,
// and collapses when they do not: on the CI machine's AMD EPYC, 8-128 KiB
// copies to a destination 4 bytes past the source modulo a page ran at
// 1.7-3 GB/s, against 40 GB/s for the vector loop here (user buffers that
// are views into larger tensors are offset like that). See copyBytesLoop.
void copyBytes(void* dst, const void* src, size_t bytes);

template <typename T>
void copyElems(T* dst, const T* src, size_t n) {
  copyBytes(dst, src, n * sizeof(T));
}

// The same copy with non-temporal (streaming) stores where the CPU has them,
// then a store fence: for outputs larger than the caches, whose lines would
// otherwise be read from memory before being overwritten (a 64 MiB copy in
// 128 KiB pieces: 6.0-8.3 GB/s against 5.2-6.0 with memcpy on the CI VM).
void streamBytes(void* dst, const void* src, size_t bytes);

template <typename T>
void streamElems(T* dst, const T* src, size_t n) {
  streamBytes(dst, src, n * sizeof(T));
}

}  // namespace braid

#if defined(__clang__)
#pragma clang diagnostic pop
#endif
