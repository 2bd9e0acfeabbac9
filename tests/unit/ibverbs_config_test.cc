// NCCL_IB_HCA's matcher, NCCL_IB_GID_INDEX's per-HCA syntax, NCCL_NET_GDR_LEVEL
// and the range checks of the verbs transport's integer parameters.
#include <gtest/gtest.h>

#include <cstdlib>

#include "transports/net/ibverbs/ib_config.h"
#include "util/param.h"

namespace braid {
namespace {

HcaFilter filter(const std::string& spec) {
  HcaFilter f;
  Status s = HcaFilter::parse(spec, &f);
  EXPECT_TRUE(s.ok()) << spec << ": " << s.message();
  return f;
}

TEST(IbverbsHcaFilter, EmptySelectsEverything) {
  HcaFilter f = filter("");
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_TRUE(f.matches("bnxt_re0", 2));
}

TEST(IbverbsHcaFilter, NamesArePrefixes) {
  HcaFilter f = filter("mlx5");
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_TRUE(f.matches("mlx5_11", 2));
  EXPECT_FALSE(f.matches("mlx4_0", 1));
  HcaFilter g = filter("mlx5_1");
  EXPECT_TRUE(g.matches("mlx5_1", 1));
  EXPECT_TRUE(g.matches("mlx5_10", 1));  // a prefix, as NCCL matches it
  EXPECT_FALSE(g.matches("mlx5_2", 1));
}

TEST(IbverbsHcaFilter, EqualsMeansExactNames) {
  HcaFilter f = filter("=mlx5_1");
  EXPECT_TRUE(f.exact());
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  EXPECT_FALSE(f.matches("mlx5_10", 1));
}

TEST(IbverbsHcaFilter, PortsRestrictTheDevice) {
  HcaFilter f = filter("mlx5_0:1,mlx5_1:2");
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_FALSE(f.matches("mlx5_0", 2));
  EXPECT_TRUE(f.matches("mlx5_1", 2));
  EXPECT_FALSE(f.matches("mlx5_1", 1));
  EXPECT_FALSE(f.matches("mlx5_2", 1));
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[1].name, "mlx5_1");
  EXPECT_EQ(f.entries()[1].port, 2);
}

TEST(IbverbsHcaFilter, CaretExcludes) {
  HcaFilter f = filter("^mlx5_0");
  EXPECT_TRUE(f.exclude());
  EXPECT_FALSE(f.matches("mlx5_0", 1));
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  HcaFilter g = filter("^=mlx5_1:1");
  EXPECT_TRUE(g.exclude());
  EXPECT_TRUE(g.exact());
  EXPECT_FALSE(g.matches("mlx5_1", 1));
  EXPECT_TRUE(g.matches("mlx5_1", 2));
  EXPECT_TRUE(g.matches("mlx5_10", 1));
}

TEST(IbverbsHcaFilter, BadSpecsAreRejected) {
  for (const char* bad : {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", ":1", "mlx5_0,,mlx5_1", "^", "="}) {
    HcaFilter f;
    Status s = HcaFilter::parse(bad, &f);
    EXPECT_FALSE(s.ok()) << bad;
  }
}

GidIndexConfig gidConfig(const std::string& spec) {
  GidIndexConfig c;
  Status s = GidIndexConfig::parse(spec, &c);
  EXPECT_TRUE(s.ok()) << spec << ": " << s.message();
  return c;
}

TEST(IbverbsGidIndexConfig, PlainIntegerAppliesEverywhere) {
  EXPECT_EQ(gidConfig("").indexFor("mlx5_0", 1), GidIndexConfig::kAuto);
  EXPECT_EQ(gidConfig("-1").indexFor("mlx5_0", 1), GidIndexConfig::kAuto);
  EXPECT_EQ(gidConfig("3").indexFor("mlx5_0", 1), 3);
  EXPECT_EQ(gidConfig("3").indexFor("bnxt_re1", 2), 3);
}

TEST(IbverbsGidIndexConfig, PerHcaAndPerPort) {
  GidIndexConfig c = gidConfig("mlx5_0:3,mlx5_1:1");
  EXPECT_EQ(c.indexFor("mlx5_0", 1), 3);
  EXPECT_EQ(c.indexFor("mlx5_0", 2), 3);
  EXPECT_EQ(c.indexFor("mlx5_1", 1), 1);
  EXPECT_EQ(c.indexFor("mlx5_10", 1), GidIndexConfig::kAuto);  // names are exact
  EXPECT_EQ(c.indexFor("mlx5_2", 1), GidIndexConfig::kAuto);

  GidIndexConfig d = gidConfig("mlx5_0:2:5, mlx5_0:3, 1");
  EXPECT_EQ(d.indexFor("mlx5_0", 2), 5);  // the port's entry wins
  EXPECT_EQ(d.indexFor("mlx5_0", 1), 3);  // then the device's
  EXPECT_EQ(d.indexFor("mlx5_1", 1), 1);  // then the plain one
}

TEST(IbverbsGidIndexConfig, BadSpecsAreRejected) {
  for (const char* bad :
       {"x", "-2", "mlx5_0:", "mlx5_0:a", ":3", "mlx5_0:0:1", "a:1:2:3", "1,2", "mlx5_0:1,mlx5_0:2"}) {
    GidIndexConfig c;
    EXPECT_FALSE(GidIndexConfig::parse(bad, &c).ok()) << bad;
  }
}

TEST(IbverbsGdrLevel, NamesAndLegacyIntegers) {
  GdrLevel l = GdrLevel::Auto;
  ASSERT_TRUE(parseGdrLevel("pxb", &l).ok());
  EXPECT_EQ(l, GdrLevel::Pxb);
  ASSERT_TRUE(parseGdrLevel("SYS", &l).ok());
  EXPECT_EQ(l, GdrLevel::Sys);
  ASSERT_TRUE(parseGdrLevel("0", &l).ok());
  EXPECT_EQ(l, GdrLevel::Loc);
  ASSERT_TRUE(parseGdrLevel("3", &l).ok());
  EXPECT_EQ(l, GdrLevel::Phb);
  ASSERT_TRUE(parseGdrLevel("", &l).ok());
  EXPECT_EQ(l, GdrLevel::Auto);
  EXPECT_FALSE(parseGdrLevel("NVL", &l).ok());
  EXPECT_FALSE(parseGdrLevel("5", &l).ok());
}

class IbverbsParams : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_TIMEOUT",
                          "NCCL_IB_RETRY_CNT", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_NET_GDR_LEVEL"}) {
      unsetenv(v);
    }
    ParamRegistry::instance().reload();
  }
};

TEST_F(IbverbsParams, DefaultsAndValuesReachTheSettings) {
  ParamRegistry::instance().reload();
  IbSettings d;
  ASSERT_TRUE(ibSettings(&d).ok());
  EXPECT_TRUE(d.hca.empty());
  EXPECT_EQ(d.gidIndex.indexFor("mlx5_0", 1), GidIndexConfig::kAuto);
  EXPECT_EQ(d.timeout, 20);
  EXPECT_EQ(d.retryCount, 7);
  EXPECT_EQ(d.qpsPerConnection, 1);
  EXPECT_EQ(d.gdrLevel, GdrLevel::Auto);

  setenv("NCCL_IB_HCA", "=mlx5_1:1", 1);
  setenv("NCCL_IB_GID_INDEX", "mlx5_1:3", 1);
  setenv("NCCL_IB_TC", "106", 1);
  setenv("NCCL_IB_SL", "3", 1);
  setenv("NCCL_IB_TIMEOUT", "22", 1);
  setenv("NCCL_IB_RETRY_CNT", "5", 1);
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  setenv("NCCL_NET_GDR_LEVEL", "PHB", 1);
  ParamRegistry::instance().reload();
  ASSERT_TRUE(ParamRegistry::instance().validate().ok());
  IbSettings s;
  ASSERT_TRUE(ibSettings(&s).ok());
  EXPECT_TRUE(s.hca.matches("mlx5_1", 1));
  EXPECT_FALSE(s.hca.matches("mlx5_1", 2));
  EXPECT_EQ(s.gidIndex.indexFor("mlx5_1", 1), 3);
  EXPECT_EQ(s.trafficClass, 106);
  EXPECT_EQ(s.serviceLevel, 3);
  EXPECT_EQ(s.timeout, 22);
  EXPECT_EQ(s.retryCount, 5);
  EXPECT_EQ(s.qpsPerConnection, 4);
  EXPECT_EQ(s.gdrLevel, GdrLevel::Phb);
}

TEST_F(IbverbsParams, BadValuesFailValidationNamingTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"NCCL_IB_HCA", "mlx5_0:x"},   {"NCCL_IB_GID_INDEX", "mlx5_0"},
      {"NCCL_IB_TC", "256"},         {"NCCL_IB_SL", "16"},
      {"NCCL_IB_TIMEOUT", "0"},      {"NCCL_IB_TIMEOUT", "32"},
      {"NCCL_IB_RETRY_CNT", "8"},    {"NCCL_IB_QPS_PER_CONNECTION", "0"},
      {"NCCL_NET_GDR_LEVEL", "far"},
  };
  for (const auto& [name, value] : bad) {
    setenv(name, value, 1);
    ParamRegistry::instance().reload();
    Status s = ParamRegistry::instance().validate();
    EXPECT_FALSE(s.ok()) << name << "=" << value;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    unsetenv(name);
  }
}

}  // namespace
}  // namespace braid
