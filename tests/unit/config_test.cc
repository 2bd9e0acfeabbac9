// Reading ncclConfig_t, including the smaller structs of older NCCL releases.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/config.h"

namespace braid {
namespace {

TEST(Config, NullMeansDefaults) {
  CommConfig c;
  ASSERT_TRUE(readCommConfig(nullptr, &c).ok());
  EXPECT_TRUE(c.blocking);
  EXPECT_TRUE(c.commName.empty());
}

TEST(Config, ReadsEveryField) {
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.blocking = 0;
  user.minCTAs = 2;
  user.maxCTAs = 16;
  user.netName = "Socket";
  user.commName = "trainer";
  user.splitShare = 1;
  user.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  user.nvlinkCentricSched = 1;
  CommConfig c;
  ASSERT_TRUE(readCommConfig(&user, &c).ok());
  EXPECT_FALSE(c.blocking);
  EXPECT_EQ(c.minCTAs, 2);
  EXPECT_EQ(c.maxCTAs, 16);
  EXPECT_EQ(c.netName, "Socket");
  EXPECT_EQ(c.commName, "trainer");
  EXPECT_TRUE(c.splitShare);
  EXPECT_EQ(c.ctaPolicy, NCCL_CTA_POLICY_EFFICIENCY);
  EXPECT_EQ(c.nvlinkCentricSched, 1);
}

TEST(Config, OlderSmallerStructReadsOnlyWhatFits) {
  // NCCL 2.17's config ended after netName; bytes past `size` must be ignored
  // (here: garbage that would be rejected if read).
  std::vector<unsigned char> raw(sizeof(ncclConfig_t), 0xff);
  ncclConfig_t* user = reinterpret_cast<ncclConfig_t*>(raw.data());
  user->size = offsetof(ncclConfig_t, netName) + sizeof(const char*);
  user->magic = NCCL_CONFIG_MAGIC;
  user->version = 21703;
  user->blocking = 1;
  user->cgaClusterSize = NCCL_CONFIG_UNDEF_INT;
  user->minCTAs = 1;
  user->maxCTAs = 4;
  user->netName = nullptr;
  CommConfig c;
  Status s = readCommConfig(user, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.maxCTAs, 4);
  EXPECT_FALSE(c.splitShare);  // not present in that release: default
  EXPECT_TRUE(c.commName.empty());
}

TEST(Config, RejectsInconsistentValues) {
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.minCTAs = 8;
  user.maxCTAs = 2;
  CommConfig c;
  Status s = readCommConfig(&user, &c);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("minCTAs"), std::string::npos);
  user = NCCL_CONFIG_INITIALIZER;
  user.CTAPolicy = 0x40;
  EXPECT_EQ(readCommConfig(&user, &c).code(), ncclInvalidArgument);
  user = NCCL_CONFIG_INITIALIZER;
  user.size = 1 << 20;
  EXPECT_EQ(readCommConfig(&user, &c).code(), ncclInvalidArgument);
  // netName names one of Braid's nets, as NCCL_NET does (before, any name
  // was kept and never read).
  user = NCCL_CONFIG_INITIALIZER;
  user.netName = "NoSuchNet";
  s = readCommConfig(&user, &c);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("netName"), std::string::npos) << s.message();
  user.netName = "ib";
  ASSERT_TRUE(readCommConfig(&user, &c).ok());
  EXPECT_EQ(c.netName, "IB");
}

}  // namespace
}  // namespace braid
