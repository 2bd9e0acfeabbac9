// Element types without native C++ arithmetic: fp16, bf16, fp8 (e4m3, e5m2).
//
// Each is a trivially copyable struct holding the bits, usable on the host
// and in kernels alike, with conversions to and from float and the operators
// the reduction functors need (+, *, <), so OpSum/OpProd/OpMin/OpMax work on
// them unchanged.
//
// Accumulation precision: every binary operation converts both operands to
// float, computes in float, and rounds the result back to the type (round to
// nearest, ties to even). A reduction over n ranks therefore rounds n-1 times
// in the element type, as NCCL does for these types.
//
// fp8 follows the OCP 8-bit floating point specification: e4m3 ("fn": no
// infinities, NaN = S.1111.111, largest finite 448) and e5m2 (IEEE-like,
// infinities and NaNs, largest finite 57344). Conversions from float
// saturate to the largest finite value (CUDA's __NV_SATFINITE), and NaN stays
// NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "platform/host_device.h"

namespace braid {

namespace detail {

BRAID_HOST_DEVICE BRAID_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));  // std::memcpy is host-only under HIP
  return u;
}
BRAID_HOST_DEVICE BRAID_INLINE float bitsFloat(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}

// Rounds a float to a narrower binary format with `mant` mantissa bits,
// `expBits` exponent bits and exponent bias `bias`; returns sign | exponent |
// mantissa in the low bits. Overflow past `maxFinite` (an encoding without
// sign) saturates to it if `saturate`, else becomes `infBits`; NaN becomes
// `nanBits`. Rounds to nearest, ties to even; handles subnormals both ways.
BRAID_HOST_DEVICE inline uint32_t roundToNarrow(float f, int mant, int expBits, int bias, uint32_t maxFinite,
                                                bool saturate, uint32_t infBits, uint32_t nanBits) {
  const uint32_t u = floatBits(f);
  const uint32_t s = (u >> 31) << (mant + expBits);
  uint32_t absBits = u & 0x7fffffffu;
  if (absBits > 0x7f800000u) return s | nanBits;  // NaN
  if (absBits == 0x7f800000u) return s | (saturate ? maxFinite : infBits);
  float a = bitsFloat(absBits);
  // Smallest normal of the target: 2^(1-bias).
  int e = static_cast<int>(absBits >> 23) - 127;  // unbiased exponent of the input (normal inputs)
  uint32_t out;
  if (absBits < 0x00800000u || e < 1 - bias) {
    // Target subnormal (or zero): value / 2^(1-bias-mant), rounded to an integer.
    float scaled = a * bitsFloat(static_cast<uint32_t>(127 - (1 - bias - mant)) << 23);
    // Round half to even on the integer part.
    uint32_t q = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    out = q;  // q == 2^mant becomes the smallest normal, which the encoding handles
  } else {
    uint32_t m = absBits & 0x7fffffu;
    int shift = 23 - mant;
    uint32_t keep = m >> shift;
    uint32_t rest = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    uint32_t biased = static_cast<uint32_t>(e + bias);
    out = (biased << mant) | keep;
    if (rest > half || (rest == half && (keep & 1u))) ++out;  // may carry into the exponent: correct
  }
  if (out > maxFinite) return s | (saturate ? maxFinite : infBits);
  return s | out;
}

// Expands a narrow encoding (sign bit above the exponent) to float.
BRAID_HOST_DEVICE inline float expandNarrow(uint32_t bits, int mant, int expBits, int bias, bool hasInf) {
  uint32_t signBit = (bits >> (mant + expBits)) & 1u;
  uint32_t exp = (bits >> mant) & ((1u << expBits) - 1);
  uint32_t m = bits & ((1u << mant) - 1);
  float v;
  uint32_t expMax = (1u << expBits) - 1;
  if (hasInf && exp == expMax) {
    v = m == 0 ? bitsFloat(0x7f800000u) : bitsFloat(0x7fc00000u);
  } else if (!hasInf && exp == expMax && m == (1u << mant) - 1) {
    v = bitsFloat(0x7fc00000u);  // e4m3fn's only NaN
  } else if (exp == 0) {
    // Subnormal: m * 2^(1 - bias - mant).
    v = static_cast<float>(m) * bitsFloat(static_cast<uint32_t>(127 + 1 - bias - mant) << 23);
  } else {
    v = bitsFloat(((exp - static_cast<uint32_t>(bias) + 127u) << 23) | (m << (23 - mant)));
  }
  return signBit ? -v : v;
}

// Conversions in hardware, in device code where the target has them. The
// generic rounding above is exact but long: inlined into every reduction
// loop it took two thirds of the kernel table's compile time (f16 and both
// fp8 types) and slowed their reductions. For every input but NaN these give
// the same bits as the generic code (round to nearest even; fp16 overflows
// to infinity, fp8 saturates to its largest finite value, as the PTX
// .satfinite modifier does); NaN payloads may differ.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define BRAID_HW_HALF 1
#if defined(__CUDA_ARCH__)
__device__ inline uint16_t hwFloatToHalf(float f) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ inline float hwHalfToFloat(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
#else
__device__ inline uint16_t hwFloatToHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  __builtin_memcpy(&b, &h, sizeof(b));
  return b;
}
__device__ inline float hwHalfToFloat(uint16_t b) {
  _Float16 h;
  __builtin_memcpy(&h, &b, sizeof(h));
  return static_cast<float>(h);
}
#endif
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define BRAID_HW_FP8 1
// cvt.*x2 converts pairs: the low byte (or half) goes with the second operand.
__device__ inline uint8_t hwFloatToE4M3(float f) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return static_cast<uint8_t>(r & 0xffu);
}
__device__ inline uint8_t hwFloatToE5M2(float f) {
  uint16_t r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return static_cast<uint8_t>(r & 0xffu);
}
// Both fp8 formats widen to fp16 exactly.
__device__ inline float hwE4M3ToFloat(uint8_t b) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<uint16_t>(b)));
  return hwHalfToFloat(static_cast<uint16_t>(h2 & 0xffffu));
}
__device__ inline float hwE5M2ToFloat(uint8_t b) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(static_cast<uint16_t>(b)));
  return hwHalfToFloat(static_cast<uint16_t>(h2 & 0xffffu));
}
#endif
#if defined(__HIP_DEVICE_COMPILE__)
// AMD's gfx90a and gfx940 have no OCP fp8 conversions (gfx940's are the
// FNUZ formats), so fp8 stays in software there, out of line: inlined into
// every reduction loop it took over four minutes per fp8 type to compile.
#define BRAID_OUTLINE_NARROW 1
__device__ __attribute__((noinline)) inline uint32_t roundToNarrowOutline(float f, int mant, int expBits,
                                                                          int bias, uint32_t maxFinite,
                                                                          bool saturate, uint32_t infBits,
                                                                          uint32_t nanBits) {
  return roundToNarrow(f, mant, expBits, bias, maxFinite, saturate, infBits, nanBits);
}
__device__ __attribute__((noinline)) inline float expandNarrowOutline(uint32_t bits, int mant, int expBits,
                                                                      int bias, bool hasInf) {
  return expandNarrow(bits, mant, expBits, bias, hasInf);
}
#endif

}  // namespace detail

// fp16 and both fp8 formats: IEEE-style binary formats narrower than float,
// told apart only by their parameters.
template <typename Storage, int kMant, int kExpBits, int kBias, uint32_t kMaxFinite, bool kSaturate, bool kHasInf,
          uint32_t kInfBits, uint32_t kNanBits>
struct NarrowFloat {
  Storage bits;
  static constexpr bool kIsHalf = kMant == 10 && kExpBits == 5;
  static constexpr bool kIsE4M3 = kMant == 3 && kExpBits == 4;
  static constexpr bool kIsE5M2 = kMant == 2 && kExpBits == 5;
  BRAID_HOST_DEVICE static NarrowFloat fromFloat(float f) {
#if defined(BRAID_HW_HALF)
    if constexpr (kIsHalf) return {detail::hwFloatToHalf(f)};
#endif
#if defined(BRAID_HW_FP8)
    if constexpr (kIsE4M3) return {detail::hwFloatToE4M3(f)};
    if constexpr (kIsE5M2) return {detail::hwFloatToE5M2(f)};
#endif
#if defined(BRAID_OUTLINE_NARROW)
    return {static_cast<Storage>(
        detail::roundToNarrowOutline(f, kMant, kExpBits, kBias, kMaxFinite, kSaturate, kInfBits, kNanBits))};
#endif
    return {static_cast<Storage>(
        detail::roundToNarrow(f, kMant, kExpBits, kBias, kMaxFinite, kSaturate, kInfBits, kNanBits))};
  }
  BRAID_HOST_DEVICE float toFloat() const {
#if defined(BRAID_HW_HALF)
    if constexpr (kIsHalf) return detail::hwHalfToFloat(bits);
#endif
#if defined(BRAID_HW_FP8)
    if constexpr (kIsE4M3) return detail::hwE4M3ToFloat(bits);
    if constexpr (kIsE5M2) return detail::hwE5M2ToFloat(bits);
#endif
#if defined(BRAID_OUTLINE_NARROW)
    return detail::expandNarrowOutline(bits, kMant, kExpBits, kBias, kHasInf);
#endif
    return detail::expandNarrow(bits, kMant, kExpBits, kBias, kHasInf);
  }
};

// IEEE binary16: overflow becomes infinity.
using Half = NarrowFloat<uint16_t, 10, 5, 15, 0x7bffu, false, true, 0x7c00u, 0x7e00u>;
// OCP e4m3fn: largest finite S.1111.110 = 448, NaN S.1111.111, no infinity.
using Fp8E4M3 = NarrowFloat<uint8_t, 3, 4, 7, 0x7eu, true, false, 0x7eu, 0x7fu>;
// OCP e5m2: largest finite S.11110.11 = 57344, infinity S.11111.00, NaN above.
using Fp8E5M2 = NarrowFloat<uint8_t, 2, 5, 15, 0x7bu, true, true, 0x7cu, 0x7eu>;

struct BFloat16 {
  uint16_t bits;
  BRAID_HOST_DEVICE static BFloat16 fromFloat(float f) {
    uint32_t u = detail::floatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
    uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow becomes inf
    return {static_cast<uint16_t>(rounded >> 16)};
  }
  BRAID_HOST_DEVICE float toFloat() const { return detail::bitsFloat(static_cast<uint32_t>(bits) << 16); }
};

// +, * and < through float, rounding the result back to the type.
template <typename T>
struct IsFloatLike : std::false_type {};
template <typename S, int M, int E, int B, uint32_t X, bool Sat, bool I, uint32_t IB, uint32_t NB>
struct IsFloatLike<NarrowFloat<S, M, E, B, X, Sat, I, IB, NB>> : std::true_type {};
template <>
struct IsFloatLike<BFloat16> : std::true_type {};

template <typename T, typename = std::enable_if_t<IsFloatLike<T>::value>>
BRAID_HOST_DEVICE inline T operator+(T a, T b) {
  return T::fromFloat(a.toFloat() + b.toFloat());
}
template <typename T, typename = std::enable_if_t<IsFloatLike<T>::value>>
BRAID_HOST_DEVICE inline T operator*(T a, T b) {
  return T::fromFloat(a.toFloat() * b.toFloat());
}
template <typename T, typename = std::enable_if_t<IsFloatLike<T>::value>>
BRAID_HOST_DEVICE inline bool operator<(T a, T b) {
  return a.toFloat() < b.toFloat();
}

}  // namespace braid
