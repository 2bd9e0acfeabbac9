// Reduction operators shared by the host engine and the GPU kernels.
//
// Each is a functor `T operator()(T a, T b)` plus `T pre(T x)`, the
// transformation a rank's own input goes through before it enters the
// reduction (identity for all but PreMulSum, which scales it). `kHasPre`
// lets executors skip the identity. Usable in host code and in kernels
// alike; types without native arithmetic (fp16, bf16, fp8) bring their own
// operators with the datatype layer.
#pragma once

#include <type_traits>

#include "platform/host_device.h"

namespace braid {

struct NoPre {
  static constexpr bool kHasPre = false;
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T pre(T x) const { return x; }
};

namespace ops_detail {

// Signed overflow is undefined in C++; a collective's sum or product wraps
// (two's complement), as NCCL's does on the GPU. Narrow integers promote to
// int, where their sums and products cannot overflow.
template <typename T>
BRAID_HOST_DEVICE constexpr bool wrapsInUnsigned() {
  return std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int);
}

template <typename T>
BRAID_HOST_DEVICE BRAID_INLINE T add(T a, T b) {
  if constexpr (wrapsInUnsigned<T>()) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
BRAID_HOST_DEVICE BRAID_INLINE T mul(T a, T b) {
  if constexpr (wrapsInUnsigned<T>()) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

// Min and max do not depend on operand order, as NCCL's fmin/fmax and
// __hmin/__hmax do not: a NaN operand gives the other operand (NaN only
// when both are), and in the narrow float types -0 is below +0.
template <typename T>
BRAID_HOST_DEVICE BRAID_INLINE bool isNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    const float f = x.toFloat();
    return f != f;
  }
}
template <typename T>
BRAID_HOST_DEVICE BRAID_INLINE T pick(T a, T b, bool takeB, bool preferNegativeZero) {
  if constexpr (!std::is_arithmetic_v<T>) {
    // Equal values: only -0 and +0 differ in their bits.
    constexpr int kSignShift = 8 * sizeof(a.bits) - 1;
    if (!(a < b) && !(b < a) && a.bits != b.bits && !isNan(a) && !isNan(b)) {
      const bool aNegative = (a.bits >> kSignShift) & 1;
      return aNegative == preferNegativeZero ? a : b;
    }
  }
  (void)preferNegativeZero;
  return takeB ? b : a;
}

}  // namespace ops_detail

struct OpSum : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const {
    return ops_detail::add(a, b);
  }
};
struct OpProd : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const {
    return ops_detail::mul(a, b);
  }
};
struct OpMin : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const {
    return ops_detail::pick(a, b, b < a || ops_detail::isNan(a), /*preferNegativeZero=*/true);
  }
};
struct OpMax : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const {
    return ops_detail::pick(a, b, a < b || ops_detail::isNan(a), /*preferNegativeZero=*/false);
  }
};

// ncclRedOpCreatePreMulSum: sum over ranks of scalar * input. The scalar is
// fixed for one collective (read from the caller's memory when it runs, for
// ncclScalarDevice operators).
template <typename T>
struct OpPreMulSum {
  static constexpr bool kHasPre = true;
  T scalar;
  BRAID_HOST_DEVICE BRAID_INLINE T pre(T x) const { return ops_detail::mul(x, scalar); }
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return ops_detail::add(a, b); }
};

}  // namespace braid
