// Reduction operators shared by the host engine and the GPU kernels.
//
// Each is a functor `T operator()(T a, T b)` plus `T pre(T x)`, the
// transformation a rank's own input goes through before it enters the
// reduction (identity for all but PreMulSum, which scales it). `kHasPre`
// lets executors skip the identity. Usable in host code and in kernels
// alike; types without native arithmetic (fp16, bf16, fp8) bring their own
// operators with the datatype layer.
#pragma once

#include "platform/host_device.h"

namespace braid {

struct NoPre {
  static constexpr bool kHasPre = false;
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T pre(T x) const { return x; }
};

struct OpSum : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a + b; }
};
struct OpProd : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a * b; }
};
struct OpMin : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return b < a ? b : a; }
};
struct OpMax : NoPre {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a < b ? b : a; }
};

// ncclRedOpCreatePreMulSum: sum over ranks of scalar * input. The scalar is
// fixed for one collective (read from the caller's memory when it runs, for
// ncclScalarDevice operators).
template <typename T>
struct OpPreMulSum {
  static constexpr bool kHasPre = true;
  T scalar;
  BRAID_HOST_DEVICE BRAID_INLINE T pre(T x) const { return static_cast<T>(x * scalar); }
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a + b; }
};

}  // namespace braid
