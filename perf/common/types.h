// Datatypes and reduction operators of the perf programs: names as nccl-tests
// spells them, element sizes, and host-side conversion between a double and
// the stored bit pattern (integers wrap as two's complement; half, bfloat16
// and fp8 round to nearest even). Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace perf {

struct TypeInfo {
  ncclDataType_t type;
  const char* name;  // nccl-tests' name: int8 ... bfloat16, f8e4m3, f8e5m2
  size_t size;       // bytes per element
  bool isInteger;
  bool isSigned;
  int expBits, manBits;  // floating types only
  // Largest integer up to which every integer is exactly representable
  // (integers: no overflow of a non-negative sum).
  double maxExact;
};

struct OpInfo {
  ncclRedOp_t op;    // kPreMulSum for mulsum
  const char* name;  // sum, prod, max, min, avg, mulsum
};

// nccl-tests' "mulsum": not an op of its own but, per rank and call, one
// made by ncclRedOpCreatePreMulSum with the scalar preMulScalar(rank).
constexpr ncclRedOp_t kPreMulSum = ncclNumOps;
// nccl-tests' ncclVerifiablePremulScalar: 1 on even ranks, 2 on odd ones.
inline double preMulScalar(int rank) {
  return rank % 2 == 0 ? 1.0 : 2.0;
}

// All types / ops in nccl-tests' order (what "-d all" / "-o all" run).
const std::vector<TypeInfo>& allTypes();
const std::vector<OpInfo>& allOps();

// Parses one name ("float", "bf16", "all", ...); false if unknown.
bool parseTypes(const std::string& name, std::vector<TypeInfo>* out);
bool parseOps(const std::string& name, std::vector<OpInfo>* out);

// Element i of a buffer of `t`, as a double / set from a double.
double loadElement(const TypeInfo& t, const void* buf, size_t i);
void storeElement(const TypeInfo& t, void* buf, size_t i, double v);

// Narrow floating formats (exposed for tests): encode with round to nearest
// even, saturating to the largest finite value; decode exactly.
uint32_t encodeFloat(double v, int expBits, int manBits, bool hasInfinity);
double decodeFloat(uint32_t bits, int expBits, int manBits, bool hasInfinity);

}  // namespace perf
