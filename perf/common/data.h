// Test data and its check. Input element i of rank r is a small integer that
// depends on rank, position and a seed, chosen per type, op and rank count so
// that every sum, product, min and max is exact in any summation order (the
// library may reduce in any order); a tolerance applies only where the type
// forces rounding (avg of floating types, or sums too large for half,
// bfloat16 or fp8 at this rank count). mulsum scales rank r's inputs by
// preMulScalar(r) (1 or 2, exact in every type) before the sum. Host-side,
// any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective.h"
#include "types.h"

namespace perf {

class DataSpec {
 public:
  DataSpec(const TypeInfo& type, const OpInfo& op, int nranks, int seed);
  // Input element i of `rank`.
  double input(int rank, size_t i) const;
  // The reduction over all ranks of input element i, as the library should
  // produce it (before rounding to the type).
  double reduced(size_t i) const;
  // Relative tolerance of the check (0: bit-exact).
  double tolerance() const { return tolerance_; }
  const TypeInfo& type() const { return type_; }

 private:
  TypeInfo type_;
  ncclRedOp_t op_;
  int nranks_, seed_;
  int range_;  // inputs are 0 .. range_-1 (sum, min, max) or 1 and 2 (prod)
  double tolerance_ = 0;
};

// Fills `count` input elements of `rank` into host memory `buf`.
void fillInput(const DataSpec& d, int rank, void* buf, size_t count);

// Counts wrong elements of `rank`'s output (host copy `out`, layout.recvCount
// elements) for the collective.
int64_t countWrong(const DataSpec& d, const Collective& coll, const Layout& layout, int rank, int nranks,
                   int root, const void* out);

}  // namespace perf
