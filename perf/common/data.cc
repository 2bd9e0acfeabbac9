#include "data.h"

#include <algorithm>
#include <cmath>

namespace perf {

DataSpec::DataSpec(const TypeInfo& type, const OpInfo& op, int nranks, int seed)
    : type_(type), op_(op.op), nranks_(nranks), seed_(seed) {
  // Inputs 0..range_-1 keep a sum of all ranks within the type's exact
  // integers: n * (range_ - 1) <= maxExact, with at least {0, 1} and at most
  // 0..10 for variety.
  // mulsum: inputs scaled by up to 2 (preMulScalar) before the sum.
  const double scale = op_ == kPreMulSum ? 2.0 : 1.0;
  double perRank = std::floor(type.maxExact / (scale * nranks));
  range_ = static_cast<int>(std::min(11.0, std::max(2.0, perRank + 1)));
  if (type.isInteger) return;  // integers wrap identically in any order
  const double eps = std::ldexp(1.0, -type.manBits);
  bool exact = true;
  if (op_ == ncclSum || op_ == kPreMulSum) exact = scale * nranks * (range_ - 1) <= type.maxExact;
  if (op_ == ncclAvg) exact = false;  // a division (or NCCL's pre-multiplication) rounds
  if (op_ == ncclProd) exact = std::ldexp(1.0, nranks) <= type.maxExact * 16;  // powers of two, no overflow
  if (!exact) tolerance_ = eps * (nranks + 2);
}

double DataSpec::input(int rank, size_t i) const {
  const uint64_t h =
      (static_cast<uint64_t>(rank) + 1) * 7919u + i * 31u + static_cast<uint64_t>(seed_) * 131u;
  if (op_ == ncclProd) return (h + i / 3) % 5 == 0 ? 2.0 : 1.0;  // products of 1s and 2s
  return static_cast<double>((h ^ (h >> 5)) % static_cast<uint64_t>(range_));
}

double DataSpec::reduced(size_t i) const {
  // mulsum (as nccl-tests' expected values): sum of preMulScalar(r) * input.
  const bool mulsum = op_ == kPreMulSum;
  double acc = mulsum ? preMulScalar(0) * input(0, i) : input(0, i);
  for (int r = 1; r < nranks_; ++r) {
    double v = mulsum ? preMulScalar(r) * input(r, i) : input(r, i);
    switch (op_) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: acc += v; break;  // sum, avg
    }
  }
  if (op_ == ncclAvg) {
    if (type_.isInteger) {
      // Integer avg divides the wrapped sum (ours never wraps: inputs >= 0).
      return std::floor(acc / nranks_);
    }
    return acc / nranks_;
  }
  return acc;
}

void fillInput(const DataSpec& d, int rank, void* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) storeElement(d.type(), buf, i, d.input(rank, i));
}

int64_t countWrong(const DataSpec& d, const Collective& coll, const Layout& layout, int rank, int nranks,
                   int root, const void* out) {
  if (!coll.checked(rank, root)) return 0;
  const TypeInfo& t = d.type();
  int64_t wrong = 0;
  alignas(8) unsigned char expectedBits[8];
  for (size_t j = 0; j < layout.recvCount; ++j) {
    Source s = coll.source(rank, nranks, root, j, layout);
    double want = s.srcRank == Source::kAllRanks ? d.reduced(s.srcIndex) : d.input(s.srcRank, s.srcIndex);
    // What the library must store: the value rounded (or wrapped) to the type.
    storeElement(t, expectedBits, 0, want);
    double expected = loadElement(t, expectedBits, 0);
    double got = loadElement(t, out, j);
    if (d.tolerance() == 0 || t.isInteger) {
      if (!(got == expected)) ++wrong;
    } else if (!(std::fabs(got - want) <= d.tolerance() * std::max(1.0, std::fabs(want)))) {
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace perf
