#include "types.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace perf {

const std::vector<TypeInfo>& allTypes() {
  static const std::vector<TypeInfo> types = {
      {ncclInt8, "int8", 1, true, true, 0, 0, 127.0},
      {ncclUint8, "uint8", 1, true, false, 0, 0, 255.0},
      {ncclInt32, "int32", 4, true, true, 0, 0, 2147483647.0},
      {ncclUint32, "uint32", 4, true, false, 0, 0, 4294967295.0},
      {ncclInt64, "int64", 8, true, true, 0, 0, 9.0e18},
      {ncclUint64, "uint64", 8, true, false, 0, 0, 1.8e19},
      {ncclFloat16, "half", 2, false, true, 5, 10, 2048.0},
      {ncclFloat32, "float", 4, false, true, 8, 23, 16777216.0},
      {ncclFloat64, "double", 8, false, true, 11, 52, 9007199254740992.0},
      {ncclBfloat16, "bfloat16", 2, false, true, 8, 7, 256.0},
      {ncclFloat8e4m3, "f8e4m3", 1, false, true, 4, 3, 16.0},
      {ncclFloat8e5m2, "f8e5m2", 1, false, true, 5, 2, 8.0},
  };
  return types;
}

const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> ops = {{ncclSum, "sum"}, {ncclProd, "prod"}, {ncclMax, "max"},
                                          {ncclMin, "min"}, {ncclAvg, "avg"},   {kPreMulSum, "mulsum"}};
  return ops;
}

namespace {

struct Alias {
  const char* alias;
  const char* name;
};
const Alias kTypeAliases[] = {{"char", "int8"},       {"int", "int32"},      {"fp16", "half"},
                              {"float16", "half"},    {"fp32", "float"},     {"float32", "float"},
                              {"fp64", "double"},     {"float64", "double"}, {"bf16", "bfloat16"},
                              {"fp8_e4m3", "f8e4m3"}, {"fp8_e5m2", "f8e5m2"}};

}  // namespace

bool parseTypes(const std::string& name, std::vector<TypeInfo>* out) {
  if (name == "all") {
    *out = allTypes();
    return true;
  }
  std::string canonical = name;
  for (const Alias& a : kTypeAliases) {
    if (name == a.alias) canonical = a.name;
  }
  for (const TypeInfo& t : allTypes()) {
    if (canonical == t.name) {
      *out = {t};
      return true;
    }
  }
  return false;
}

bool parseOps(const std::string& name, std::vector<OpInfo>* out) {
  if (name == "all") {
    *out = allOps();
    return true;
  }
  for (const OpInfo& o : allOps()) {
    if (name == o.name) {
      *out = {o};
      return true;
    }
  }
  return false;
}

uint32_t encodeFloat(double v, int expBits, int manBits, bool hasInfinity) {
  const uint32_t sign = std::signbit(v) ? 1u << (expBits + manBits) : 0u;
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t manMask = (1u << manBits) - 1;
  const int maxExp = hasInfinity ? (1 << expBits) - 2 : (1 << expBits) - 1;
  // Largest finite: all-ones mantissa, except e4m3-style formats whose
  // all-ones pattern is NaN.
  const uint32_t maxFinite =
      (static_cast<uint32_t>(maxExp) << manBits) | (hasInfinity ? manMask : manMask - 1);
  double a = std::fabs(v);
  if (std::isnan(v)) return sign | (static_cast<uint32_t>((1 << expBits) - 1) << manBits) | manMask;
  if (a == 0) return sign;
  int e = 0;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + bias;
  if (exp <= 0) {  // subnormal: integer multiple of 2^(1 - bias - manBits)
    auto mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, manBits - 1 + bias)));
    return sign | mant;  // a carry into the exponent field is the smallest normal
  }
  auto mant = static_cast<uint64_t>(std::nearbyint(std::ldexp(m, manBits + 1)));
  if (mant == (uint64_t{1} << (manBits + 1))) {
    mant >>= 1;
    ++exp;
  }
  uint32_t bits = (static_cast<uint32_t>(exp) << manBits) | (static_cast<uint32_t>(mant) & manMask);
  if (exp > maxExp || bits > maxFinite) bits = maxFinite;
  return sign | bits;
}

double decodeFloat(uint32_t bits, int expBits, int manBits, bool hasInfinity) {
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t manMask = (1u << manBits) - 1;
  const uint32_t expAll = (1u << expBits) - 1;
  const bool negative = (bits >> (expBits + manBits)) & 1;
  const uint32_t exp = (bits >> manBits) & expAll;
  const uint32_t mant = bits & manMask;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - manBits);
  } else if (exp == expAll && hasInfinity) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == expAll && mant == manMask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << manBits)), static_cast<int>(exp) - bias - manBits);
  }
  return negative ? -v : v;
}

double loadElement(const TypeInfo& t, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * t.size;
  switch (t.type) {
    case ncclInt8: return *reinterpret_cast<const int8_t*>(p);
    case ncclUint8: return *reinterpret_cast<const uint8_t*>(p);
    case ncclInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ncclUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ncclInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclUint64: {
      uint64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ncclFloat64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return decodeFloat(x, t.expBits, t.manBits, true);
    }
    default:  // fp8: e4m3 has no infinity, e5m2 has
      return decodeFloat(*reinterpret_cast<const uint8_t*>(p), t.expBits, t.manBits,
                         t.type == ncclFloat8e5m2);
  }
}

void storeElement(const TypeInfo& t, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * t.size;
  if (t.isInteger) {
    // Integers wrap: keep the low bytes of the two's complement value.
    uint64_t x =
        v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v))
              : (v >= 9.2e18 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(static_cast<int64_t>(v)));
    std::memcpy(p, &x, t.size);  // little-endian: the low bytes come first
    return;
  }
  switch (t.type) {
    case ncclFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case ncclFloat64: std::memcpy(p, &v, 8); return;
    case ncclFloat16:
    case ncclBfloat16: {
      auto x = static_cast<uint16_t>(encodeFloat(v, t.expBits, t.manBits, true));
      std::memcpy(p, &x, 2);
      return;
    }
    default:
      *reinterpret_cast<uint8_t*>(p) =
          static_cast<uint8_t>(encodeFloat(v, t.expBits, t.manBits, t.type == ncclFloat8e5m2));
  }
}

}  // namespace perf
