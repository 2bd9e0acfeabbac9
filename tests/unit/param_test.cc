// The parameter registry: precedence, types, bad values, listing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "util/param.h"

namespace braid {
namespace {

IntParam testInt("TEST_INT", 42, "an integer for tests");
BoolParam testBool("TEST_BOOL", false, "a flag for tests");
SizeParam testSize("TEST_SIZE", 4096, "a size for tests");
StringParam testChoice("TEST_CHOICE", "ring", "a choice for tests", {"ring", "tree"});
IntParam testRanged("TEST_RANGED", 7, "an integer from 0 to 15 for tests", 0, 15);

class ParamTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"BRAID_TEST_INT", "NCCL_TEST_INT", "NCCL_TEST_BOOL", "BRAID_TEST_SIZE",
                          "NCCL_TEST_CHOICE", "NCCL_TEST_RANGED"}) {
      unsetenv(v);
    }
    ParamRegistry::instance().reload();
  }
  static void set(const char* name, const char* value) {
    setenv(name, value, 1);
    ParamRegistry::instance().reload();
  }
};

TEST_F(ParamTest, DefaultsWhenUnset) {
  ParamRegistry::instance().reload();
  EXPECT_EQ(testInt.get(), 42);
  EXPECT_FALSE(testBool.get());
  EXPECT_EQ(testSize.get(), 4096u);
  EXPECT_EQ(testChoice.get(), "ring");
  EXPECT_EQ(testInt.source(), ParamSource::Default);
  EXPECT_EQ(testInt.defaultText(), "42");
  EXPECT_TRUE(ParamRegistry::instance().validate().ok());
}

TEST_F(ParamTest, NcclSpellingIsRead) {
  set("NCCL_TEST_INT", "7");
  EXPECT_EQ(testInt.get(), 7);
  EXPECT_EQ(testInt.source(), ParamSource::Nccl);
  EXPECT_EQ(testInt.sourceVariable(), "NCCL_TEST_INT");
}

TEST_F(ParamTest, BraidSpellingWins) {
  setenv("NCCL_TEST_INT", "7", 1);
  set("BRAID_TEST_INT", "9");
  EXPECT_EQ(testInt.get(), 9);
  EXPECT_EQ(testInt.sourceVariable(), "BRAID_TEST_INT");
}

TEST_F(ParamTest, Types) {
  set("NCCL_TEST_BOOL", "yes");
  EXPECT_TRUE(testBool.get());
  set("NCCL_TEST_BOOL", "0");
  EXPECT_FALSE(testBool.get());
  set("BRAID_TEST_SIZE", "64K");
  EXPECT_EQ(testSize.get(), 65536u);
  set("BRAID_TEST_SIZE", "2MiB");
  EXPECT_EQ(testSize.get(), 2u << 20);
  set("BRAID_TEST_INT", "0x10");
  EXPECT_EQ(testInt.get(), 16);
  set("NCCL_TEST_CHOICE", "TREE");
  EXPECT_EQ(testChoice.get(), "tree");  // canonical spelling
}

TEST_F(ParamTest, BadValueIsReportedNamingTheVariable) {
  set("BRAID_TEST_INT", "12abc");
  EXPECT_EQ(testInt.get(), 42);  // the default stands in while the error is reported
  Status s = ParamRegistry::instance().validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("BRAID_TEST_INT=12abc"), std::string::npos) << s.message();
}

TEST_F(ParamTest, EveryBadKindIsRejected) {
  const std::pair<const char*, const char*> bad[] = {
      {"NCCL_TEST_BOOL", "maybe"}, {"BRAID_TEST_SIZE", "-1"},      {"BRAID_TEST_SIZE", "12Q"},
      {"NCCL_TEST_CHOICE", "star"}, {"BRAID_TEST_INT", ""},         {"BRAID_TEST_INT", "99999999999999999999"},
  };
  for (const auto& [name, value] : bad) {
    set(name, value);
    Status s = ParamRegistry::instance().validate();
    EXPECT_FALSE(s.ok()) << name << "=" << value;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    unsetenv(name);
  }
}

TEST_F(ParamTest, RangedIntegerRejectsValuesOutside) {
  set("NCCL_TEST_RANGED", "15");
  EXPECT_EQ(testRanged.get(), 15);
  EXPECT_TRUE(ParamRegistry::instance().validate().ok());
  for (const char* bad : {"16", "-1"}) {
    set("NCCL_TEST_RANGED", bad);
    EXPECT_EQ(testRanged.get(), 7);  // the default stands in
    Status s = ParamRegistry::instance().validate();
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("NCCL_TEST_RANGED"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("from 0 to 15"), std::string::npos) << s.message();
  }
}

// The library's timeouts: a value that would make every wait end at once
// (0, negative) or overflow a deadline is refused, naming the variable
// (before, -5 s made every init fail "within the bootstrap timeout (-5 s)",
// and a huge bootstrap timeout left ranks waiting forever). Channel counts
// past an int were truncated (2^32 + 4 ran 4 channels), negative ones ignored.
TEST_F(ParamTest, LibraryTimeoutsAndChannelCountsRefuseValuesOutsideTheirRange) {
  const struct {
    const char* name;
    std::vector<const char*> bad;
  } cases[] = {{"NCCL_STALL_TIMEOUT", {"-5", "0", "99999999999"}},
               {"NCCL_BOOTSTRAP_TIMEOUT", {"-5", "0", "9223372036854775807"}},
               {"NCCL_NET_LINK_TIMEOUT", {"-1", "0", "5000000"}},
               {"NCCL_MIN_NCHANNELS", {"-7", "4294967300"}},
               {"NCCL_MAX_NCHANNELS", {"-1", "4294967295"}}};
  for (const auto& c : cases) {
    ASSERT_NE(ParamRegistry::instance().find(c.name + 5), nullptr) << c.name;
    for (const char* bad : c.bad) {
      set(c.name, bad);
      Status s = ParamRegistry::instance().validate();
      EXPECT_FALSE(s.ok()) << c.name << "=" << bad;
      EXPECT_NE(s.message().find(c.name), std::string::npos) << s.message();
    }
    unsetenv(c.name);
  }
  set("NCCL_MIN_NCHANNELS", "64");  // more than Braid has: taken as 32
  EXPECT_TRUE(ParamRegistry::instance().validate().ok());
  unsetenv("NCCL_MIN_NCHANNELS");
}

TEST_F(ParamTest, ListIsSortedAndComplete) {
  auto params = ParamRegistry::instance().list();
  ASSERT_GE(params.size(), 4u);
  for (size_t i = 1; i < params.size(); ++i) EXPECT_LT(params[i - 1]->name(), params[i]->name());
  EXPECT_NE(ParamRegistry::instance().find("TEST_INT"), nullptr);
  EXPECT_NE(ParamRegistry::instance().find("DEBUG"), nullptr);  // the library's own
  EXPECT_EQ(ParamRegistry::instance().find("NO_SUCH_PARAM"), nullptr);
}

TEST(ParamParsers, Sizes) {
  uint64_t v = 0;
  EXPECT_TRUE(parseSize("1G", &v).ok());
  EXPECT_EQ(v, 1ull << 30);
  EXPECT_TRUE(parseSize(" 512 ", &v).ok());
  EXPECT_EQ(v, 512u);
  EXPECT_FALSE(parseSize("99999999999T", &v).ok());
  EXPECT_FALSE(parseSize("K", &v).ok());
  EXPECT_TRUE(parseSize("4KiB", &v).ok());
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(parseSize("2mb", &v).ok());
  EXPECT_EQ(v, 2u << 20);
  // An I only after a unit letter: these were read as 100 and 16 bytes.
  EXPECT_FALSE(parseSize("100I", &v).ok());
  EXPECT_FALSE(parseSize("16IB", &v).ok());
}

}  // namespace
}  // namespace braid
