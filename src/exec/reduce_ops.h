// Reduction operators shared by the host engine and the GPU kernels.
//
// Each is a stateless functor `T operator()(T a, T b)`, usable in host code
// and in kernels alike. Types without native arithmetic (fp16, bf16, fp8)
// get their specializations with the datatype layer.
#pragma once

#include "platform/host_device.h"

namespace braid {

struct OpSum {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a + b; }
};
struct OpProd {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a * b; }
};
struct OpMin {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return b < a ? b : a; }
};
struct OpMax {
  template <typename T>
  BRAID_HOST_DEVICE BRAID_INLINE T operator()(T a, T b) const { return a < b ? b : a; }
};

}  // namespace braid
