// fp16, bf16 and fp8 conversions and arithmetic, checked exhaustively where
// the value space allows, against independent references: the compiler's
// _Float16 for fp16, and brute-force nearest-value search for bf16 and fp8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/datatypes.h"
#include "exec/reduce_ops.h"

namespace braid {
namespace {

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

std::vector<float> sampleFloats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3.0f, 1e-8f, 1e-30f, 65504.0f, 65520.0f, 1e10f,
                          448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 300000; ++i) {
    float f = bitsToFloat(bits(rng));
    if (!std::isnan(f)) v.push_back(f);
  }
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 300000; ++i) v.push_back(small(rng));
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 100000; ++i) v.push_back(tiny(rng));
  return v;
}

TEST(Datatypes, HalfMatchesCompilerFloat16) {
  for (uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    uint16_t bits = static_cast<uint16_t>(b);
    std::memcpy(&h, &bits, 2);
    float ref = static_cast<float>(h);
    float got = Half{bits}.toFloat();
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(std::memcmp(&ref, &got, 4), 0) << "bits " << b;
      ASSERT_EQ(Half::fromFloat(ref).bits, bits) << "round trip " << b;
    }
  }
  for (float f : sampleFloats()) {
    _Float16 h = static_cast<_Float16>(f);
    uint16_t ref;
    std::memcpy(&ref, &h, 2);
    ASSERT_EQ(Half::fromFloat(f).bits, ref) << f;
  }
  // Ties between neighbours go to the even encoding.
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    float lo = Half{static_cast<uint16_t>(b)}.toFloat(), hi = Half{static_cast<uint16_t>(b + 1)}.toFloat();
    float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(Half::fromFloat(mid).bits, (b % 2 == 0) ? b : b + 1) << b;
  }
}

TEST(Datatypes, BFloat16IsNearestEven) {
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 x{static_cast<uint16_t>(b)};
    float f = x.toFloat();
    uint32_t widened = b << 16;
    ASSERT_EQ(std::memcmp(&f, &widened, 4), 0);
    if (!std::isnan(f)) {
      ASSERT_EQ(BFloat16::fromFloat(f).bits, b);
    }
  }
  for (float f : sampleFloats()) {
    if (std::isinf(f)) continue;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t lo = u >> 16, hi = lo + 1;  // the two neighbours (same sign)
    // Past the largest finite value the next step is infinity, which IEEE
    // rounding treats as 2^128 for the distance.
    double vhi = (hi & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), f) : bitsToFloat(hi << 16);
    double dlo = std::fabs(static_cast<double>(f) - bitsToFloat(lo << 16));
    double dhi = std::fabs(static_cast<double>(f) - vhi);
    uint32_t want = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    ASSERT_EQ(BFloat16::fromFloat(f).bits, want) << f;
  }
}

// Every finite value of an 8-bit format, for brute-force nearest search.
template <typename T>
std::vector<std::pair<float, uint8_t>> finiteValues() {
  std::vector<std::pair<float, uint8_t>> v;
  for (int b = 0; b < 256; ++b) {
    float f = T{static_cast<uint8_t>(b)}.toFloat();
    if (std::isfinite(f)) v.push_back({f, static_cast<uint8_t>(b)});
  }
  return v;
}

template <typename T>
void checkFp8(float maxFinite, uint8_t maxCode) {
  auto values = finiteValues<T>();
  for (auto [f, b] : values) {
    if (f == 0.0f) continue;  // +0 and -0 both fine
    ASSERT_EQ(T::fromFloat(f).bits, b) << "round trip of code " << int(b);
  }
  EXPECT_EQ(T{maxCode}.toFloat(), maxFinite);
  for (float f : sampleFloats()) {
    uint8_t got = T::fromFloat(f).bits;
    if (std::fabs(f) >= maxFinite) {  // saturates, keeps the sign
      ASSERT_EQ(got, static_cast<uint8_t>(maxCode | (std::signbit(f) ? 0x80 : 0))) << f;
      continue;
    }
    double best = 1e300;
    std::vector<uint8_t> ties;
    for (auto [v, b] : values) {
      if (std::signbit(v) != std::signbit(f) && v != 0.0f) continue;
      if (v == 0.0f && std::signbit(v) != std::signbit(f)) continue;
      double d = std::fabs(static_cast<double>(f) - v);
      if (d < best) {
        best = d;
        ties = {b};
      } else if (d == best) {
        ties.push_back(b);
      }
    }
    uint8_t want = ties[0];
    for (uint8_t t : ties) {
      if (t % 2 == 0) want = t;  // tie: the even code
    }
    ASSERT_EQ(got, want) << f;
  }
}

TEST(Datatypes, Fp8E4M3) {
  checkFp8<Fp8E4M3>(448.0f, 0x7e);
  EXPECT_TRUE(std::isnan(Fp8E4M3{0x7f}.toFloat()));
  EXPECT_EQ(Fp8E4M3{0x01}.toFloat(), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3{0x08}.toFloat(), std::ldexp(1.0f, -6));
  EXPECT_EQ(Fp8E4M3::fromFloat(std::nanf("")).bits & 0x7f, 0x7f);
}

TEST(Datatypes, Fp8E5M2) {
  checkFp8<Fp8E5M2>(57344.0f, 0x7b);
  EXPECT_TRUE(std::isinf(Fp8E5M2{0x7c}.toFloat()));
  EXPECT_TRUE(std::isnan(Fp8E5M2{0x7e}.toFloat()));
  EXPECT_EQ(Fp8E5M2{0x01}.toFloat(), std::ldexp(1.0f, -16));
}

TEST(Datatypes, ReductionFunctorsRoundEachStep) {
  Half a = Half::fromFloat(1.0f), b = Half::fromFloat(2.0f);
  EXPECT_EQ(OpSum()(a, b).toFloat(), 3.0f);
  EXPECT_EQ(OpProd()(a, b).toFloat(), 2.0f);
  EXPECT_EQ(OpMin()(a, b).toFloat(), 1.0f);
  EXPECT_EQ(OpMax()(a, b).toFloat(), 2.0f);
  // 2048 + 1 is not representable in fp16: the sum rounds to 2048 (even).
  EXPECT_EQ(OpSum()(Half::fromFloat(2048.0f), Half::fromFloat(1.0f)).toFloat(), 2048.0f);
  BFloat16 c = BFloat16::fromFloat(256.0f), d = BFloat16::fromFloat(1.0f);
  EXPECT_EQ(OpSum()(c, d).toFloat(), 256.0f);
  Fp8E4M3 e = Fp8E4M3::fromFloat(400.0f);
  EXPECT_EQ(OpSum()(e, e).toFloat(), 448.0f);  // saturates
  Fp8E5M2 g = Fp8E5M2::fromFloat(3.0f), h = Fp8E5M2::fromFloat(-5.0f);
  EXPECT_EQ(OpMin()(g, h).toFloat(), -5.0f);
}

// Min and max are NCCL's fmin/fmax and __hmin/__hmax: whichever operand
// holds a NaN, the other one wins (the result of a reduction must not
// depend on which rank holds the NaN, nor on the algorithm's order), and
// in the narrow types -0 is below +0.
template <typename T>
void expectOrderFree(T one, T nan, T plusZero, T minusZero, bool signedZeros) {
  auto bits = [](T x) {
    uint64_t b = 0;
    std::memcpy(&b, &x, sizeof(T));
    return b;
  };
  for (bool swap : {false, true}) {
    T a = swap ? nan : one, b = swap ? one : nan;
    EXPECT_EQ(bits(OpMin()(a, b)), bits(one)) << "min, NaN " << (swap ? "first" : "second");
    EXPECT_EQ(bits(OpMax()(a, b)), bits(one)) << "max, NaN " << (swap ? "first" : "second");
    if (signedZeros) {
      T z1 = swap ? minusZero : plusZero, z2 = swap ? plusZero : minusZero;
      EXPECT_EQ(bits(OpMin()(z1, z2)), bits(minusZero)) << "min(+0, -0)";
      EXPECT_EQ(bits(OpMax()(z1, z2)), bits(plusZero)) << "max(+0, -0)";
    }
  }
  EXPECT_NE(bits(OpMin()(nan, nan)), bits(one));
}

TEST(Datatypes, MinAndMaxDoNotDependOnOperandOrder) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  expectOrderFree<float>(1.0f, qnan, 0.0f, -0.0f, false);
  expectOrderFree<double>(1.0, std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0, false);
  expectOrderFree(Half::fromFloat(1.0f), Half::fromFloat(qnan), Half::fromFloat(0.0f), Half::fromFloat(-0.0f),
                  true);
  expectOrderFree(BFloat16::fromFloat(1.0f), BFloat16::fromFloat(qnan), BFloat16::fromFloat(0.0f),
                  BFloat16::fromFloat(-0.0f), true);
  expectOrderFree(Fp8E4M3::fromFloat(1.0f), Fp8E4M3{0x7f}, Fp8E4M3::fromFloat(0.0f),
                  Fp8E4M3::fromFloat(-0.0f), true);
  expectOrderFree(Fp8E5M2::fromFloat(1.0f), Fp8E5M2{0x7e}, Fp8E5M2::fromFloat(0.0f),
                  Fp8E5M2::fromFloat(-0.0f), true);
}

// Signed sums and products wrap, computed so that a sanitizer build (which
// traps signed overflow) agrees with the release build.
TEST(Datatypes, SignedOverflowWraps) {
  EXPECT_EQ(OpSum()(std::numeric_limits<int32_t>::max(), int32_t{1}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(OpSum()(std::numeric_limits<int64_t>::max(), int64_t{1}), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(OpProd()(int32_t{65536}, int32_t{65536}), 0);
  EXPECT_EQ(OpProd()(int64_t{-3}, int64_t{5}), -15);
  EXPECT_EQ(OpSum()(int8_t{127}, int8_t{1}), int8_t{-128});
  OpPreMulSum<int32_t> pre{std::numeric_limits<int32_t>::max()};
  EXPECT_EQ(pre.pre(int32_t{2}), -2);
}

}  // namespace
}  // namespace braid
