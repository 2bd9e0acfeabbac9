// Braid's nccl.h against NCCL 2.28's ABI: recorded facts as static_asserts,
// and, where NCCL's header is available, a live comparison with it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <string>

#include "braid.h"
#include "core/nccl_device_abi.h"
#include "nccl.h"
#include "nccl_facts.h"

// NCCL 2.28.9's values, recorded from its header.
static_assert(sizeof(ncclUniqueId) == 128, "unique id is 128 bytes");
static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t is 80 bytes in 2.28");
static_assert(offsetof(ncclConfig_t, magic) == 8 && offsetof(ncclConfig_t, version) == 12);
static_assert(offsetof(ncclConfig_t, blocking) == 16 && offsetof(ncclConfig_t, maxCTAs) == 28);
static_assert(offsetof(ncclConfig_t, netName) == 32 && offsetof(ncclConfig_t, splitShare) == 40);
static_assert(offsetof(ncclConfig_t, commName) == 48 && offsetof(ncclConfig_t, collnetEnable) == 56);
static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76);
static_assert(sizeof(ncclSimInfo_t) == 24 && offsetof(ncclSimInfo_t, estimatedTime) == 16);
static_assert(ncclInProgress == 7 && ncclRemoteError == 6 && ncclNumResults == 8);
static_assert(ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12);
static_assert(ncclFp8E4M3 == ncclFloat8e4m3 && ncclFp8E5M2 == ncclFloat8e5m2, "RCCL spellings");
static_assert(ncclAvg == 4 && ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff);
static_assert(NCCL_VERSION_CODE == 22809 && NCCL_VERSION(2, 28, 9) == 22809);
static_assert(NCCL_VERSION(2, 8, 4) == 2804, "old version encoding below 2.9");
static_assert(NCCL_CONFIG_MAGIC == 0xcafebeef);
static_assert(NCCL_SPLIT_NOCOLOR == -1);
// The device API's structures (nccl_device/impl/*__types.h).
static_assert(sizeof(ncclWindow_vidmem) == 72 && offsetof(ncclWindow_vidmem, stride4G) == 24);
static_assert(sizeof(ncclDevComm) == 200 && offsetof(ncclDevComm, resourceWindow_inlined) == 40);
static_assert(offsetof(ncclDevComm, lsaBarrier) == 120 && offsetof(ncclDevComm, ginSignalShadows) == 192);
static_assert(sizeof(ncclDevCommRequirements) == 56 && sizeof(ncclDevResourceRequirements) == 56);
static_assert(sizeof(ncclDevCommWindowTable) == 32 * 24 + 8);

namespace {

[[maybe_unused]] std::map<std::string, long long> braidFacts() {
  std::map<std::string, long long> facts;
#define BRAID_FACT(name, expr) facts[#name] = static_cast<long long>(expr);
#include "nccl_device_facts.inc"
#include "nccl_facts.inc"
#undef BRAID_FACT
  return facts;
}

TEST(Abi, ConfigInitializer) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(config.size, sizeof(ncclConfig_t));
  EXPECT_EQ(config.magic, 0xcafebeefu);
  EXPECT_EQ(config.version, 22809u);
  EXPECT_EQ(config.blocking, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.netName, nullptr);
  EXPECT_EQ(config.commName, nullptr);
  EXPECT_EQ(config.nvlinkCentricSched, NCCL_CONFIG_UNDEF_INT);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(sim.magic, 0x74685283u);
  EXPECT_FLOAT_EQ(sim.estimatedTime, -1.0f);
}

TEST(Abi, GetVersionReportsNccl228) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  int braid = 0;
  ASSERT_EQ(braidGetVersion(&braid), ncclSuccess);
  EXPECT_EQ(braid, BRAID_MAJOR * 10000 + BRAID_MINOR * 100 + BRAID_PATCH);
}

TEST(Abi, MatchesNcclHeader) {
#ifndef BRAID_HAVE_NCCL_REFERENCE
  GTEST_SKIP() << "NCCL's nccl.h was not found at configure time; recorded facts checked above";
#else
  std::map<std::string, long long> ours = braidFacts();
  std::vector<NcclFact> theirs = referenceNcclFacts();
  ASSERT_GT(theirs.size(), 50u);
  for (const NcclFact& f : theirs) {
    if (std::string(f.name) == "NCCL_MAJOR") {
      EXPECT_EQ(f.value, 2) << "reference header is not NCCL 2.x";
      continue;
    }
    if (std::string(f.name) == "NCCL_MINOR") {
      EXPECT_EQ(f.value, NCCL_MINOR) << "reference header is another NCCL minor release";
      continue;
    }
    auto it = ours.find(f.name);
    ASSERT_NE(it, ours.end()) << f.name;
    EXPECT_EQ(it->second, f.value) << "ABI fact " << f.name << " differs from NCCL's header";
  }
#endif
}

}  // namespace
