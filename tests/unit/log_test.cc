// Logging: levels, subsystems, file output with %h/%p, line prefixes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pattern_ = ::testing::TempDir() + "braid-log-%h-%p.txt";
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string h(host);
    h = h.substr(0, h.find('.'));
    path_ = ::testing::TempDir() + "braid-log-" + h + "-" + std::to_string(getpid()) + ".txt";
    std::remove(path_.c_str());
  }
  void TearDown() override {
    for (const char* v : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "BRAID_DEBUG"}) unsetenv(v);
    ParamRegistry::instance().reload();
    logReset();
    std::remove(path_.c_str());
  }
  void configure(const char* level, const char* subsys) {
    setenv("NCCL_DEBUG", level, 1);
    if (subsys) {
      setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
    } else {
      unsetenv("NCCL_DEBUG_SUBSYS");
    }
    setenv("NCCL_DEBUG_FILE", pattern_.c_str(), 1);
    ParamRegistry::instance().reload();
    logReset();
  }
  std::string readLog() {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string pattern_, path_;
};

TEST_F(LogTest, WarnLevelHidesInfo) {
  configure("WARN", nullptr);
  BRAID_WARN("warned %d", 1);
  BRAID_INFO(kLogInit, "informed %d", 2);
  std::string log = readLog();
  EXPECT_NE(log.find("BRAID WARN warned 1"), std::string::npos) << log;
  EXPECT_EQ(log.find("informed"), std::string::npos) << log;
}

TEST_F(LogTest, InfoHonoursSubsystems) {
  configure("INFO", "INIT,NET");
  BRAID_INFO(kLogInit, "init line");
  BRAID_INFO(kLogNet, "net line");
  BRAID_INFO(kLogColl, "coll line");
  BRAID_TRACE(kLogInit, "trace line");
  std::string log = readLog();
  EXPECT_NE(log.find("BRAID INFO INIT init line"), std::string::npos) << log;
  EXPECT_NE(log.find("BRAID INFO NET net line"), std::string::npos) << log;
  EXPECT_EQ(log.find("coll line"), std::string::npos) << log;
  EXPECT_EQ(log.find("trace line"), std::string::npos) << log;
}

TEST_F(LogTest, CaretExcludes) {
  configure("TRACE", "^COLL");
  BRAID_INFO(kLogColl, "coll line");
  BRAID_TRACE(kLogNet, "net trace");
  std::string log = readLog();
  EXPECT_EQ(log.find("coll line"), std::string::npos) << log;
  EXPECT_NE(log.find("BRAID TRACE NET log_test.cc:"), std::string::npos) << log;
}

TEST_F(LogTest, NoneIsSilent) {
  configure("NONE", nullptr);
  BRAID_WARN("should not appear");
  EXPECT_EQ(readLog().find("should not appear"), std::string::npos);
}

TEST_F(LogTest, LinesCarryHostPidTidAndRank) {
  configure("INFO", "ALL");
  {
    LogRankScope scope(5);
    BRAID_INFO(kLogColl, "ranked");
  }
  BRAID_INFO(kLogColl, "unranked");
  std::string log = readLog();
  std::string pid = ":" + std::to_string(getpid()) + ":";
  EXPECT_NE(log.find(pid), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 5] BRAID INFO COLL ranked"), std::string::npos) << log;
  EXPECT_NE(log.find(" BRAID INFO COLL unranked"), std::string::npos) << log;
  EXPECT_EQ(log.find("[rank 5] BRAID INFO COLL unranked"), std::string::npos) << log;
}

TEST_F(LogTest, BadLevelOrSubsystemIsRejected) {
  setenv("NCCL_DEBUG", "LOUD", 1);
  ParamRegistry::instance().reload();
  Status s = ParamRegistry::instance().validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("NCCL_DEBUG=LOUD"), std::string::npos) << s.message();
  unsetenv("NCCL_DEBUG");
  setenv("NCCL_DEBUG_SUBSYS", "INIT,BOGUS", 1);
  ParamRegistry::instance().reload();
  s = ParamRegistry::instance().validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("BOGUS"), std::string::npos) << s.message();
}

// NCCL's names for its own subsystems are accepted (a job's environment set
// for NCCL must not stop Braid) and select no Braid line.
TEST_F(LogTest, NcclOnlySubsystemsAreAcceptedAndSelectNothing) {
  configure("INFO", "nvls,PROFILE,RAS");
  EXPECT_TRUE(ParamRegistry::instance().validate().ok());
  BRAID_INFO(kLogInit, "init line");
  BRAID_WARN("still warned");
  std::string log = readLog();
  EXPECT_EQ(log.find("init line"), std::string::npos) << log;
  EXPECT_NE(log.find("BRAID WARN still warned"), std::string::npos) << log;
}

// NCCL_DEBUG=ABORT logs as INFO does and aborts on the first WARN.
TEST_F(LogTest, AbortLevelLogsInfoAndAbortsOnTheFirstWarn) {
  configure("abort", "INIT");
  EXPECT_TRUE(ParamRegistry::instance().validate().ok());
  BRAID_INFO(kLogInit, "informed");
  BRAID_TRACE(kLogInit, "traced");
  std::string log = readLog();
  EXPECT_NE(log.find("BRAID INFO INIT informed"), std::string::npos) << log;
  EXPECT_EQ(log.find("traced"), std::string::npos) << log;
  EXPECT_DEATH(BRAID_WARN("the first warning"), "ABORT after the WARN above");
}

}  // namespace
}  // namespace braid
