// The init-time consistency checks over all-gathered peer info.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/comm.h"
#include "core/connectors.h"

namespace braid {
namespace {

std::vector<PeerInfo> peers(int n, Backend backend) {
  std::vector<PeerInfo> v(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    PeerInfo& p = v[static_cast<size_t>(r)];
    p.rank = r;
    p.pid = 1000 + r;
    p.braidVersion = 100;
    p.backend = static_cast<uint32_t>(backend);
    p.hostHash = 42;
    std::strcpy(p.hostId, "nodeA");
    std::snprintf(p.busId, sizeof(p.busId), "0000:%02x:00.0", r + 1);
  }
  return v;
}

TEST(PeerCheck, ConsistentPeersPass) {
  EXPECT_TRUE(checkPeers(peers(4, Backend::Host), 2).ok());
  EXPECT_TRUE(checkPeers(peers(4, Backend::Gpu), 0).ok());
}

TEST(PeerCheck, VersionMismatchNamesBothRanks) {
  auto v = peers(3, Backend::Host);
  v[2].braidVersion = 200;
  Status s = checkPeers(v, 0);
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  EXPECT_NE(s.message().find("rank 2 (nodeA, pid 1002) runs 0.2.0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0 (nodeA, pid 1000) runs 0.1.0"), std::string::npos) << s.message();
}

TEST(PeerCheck, BackendMismatch) {
  auto v = peers(2, Backend::Host);
  v[1].backend = static_cast<uint32_t>(Backend::Gpu);
  Status s = checkPeers(v, 0);
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  EXPECT_NE(s.message().find("uses the gpu backend"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("BRAID_BACKEND"), std::string::npos);
}

TEST(PeerCheck, SharedGpuOnOneHostIsRefusedButNotAcrossHosts) {
  auto v = peers(2, Backend::Gpu);
  std::strcpy(v[1].busId, v[0].busId);
  Status s = checkPeers(v, 0);
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  EXPECT_NE(s.message().find("same GPU"), std::string::npos);
  v[1].hostHash = 43;  // same bus id on another node is a different GPU
  std::strcpy(v[1].hostId, "nodeB");
  EXPECT_TRUE(checkPeers(v, 0).ok());
}

TEST(NetDevice, TheFirstPreferredNicTheNetHas) {
  std::vector<NetProperties> devs(3);
  devs[0].name = "lo";  // virtual: no PCI address
  devs[1].name = "eth1";
  devs[1].busId = "0000:3b:00.0";
  devs[2].name = "eth2";
  devs[2].busId = "0000:b1:00.0";
  EXPECT_EQ(nearestNetDevice(devs, {"0000:B1:00.0", "0000:3b:00.0"}), 2);  // case-insensitive
  EXPECT_EQ(nearestNetDevice(devs, {"0000:19:00.0", "0000:3b:00.0"}), 1);  // the nearest is not the Net's
  EXPECT_EQ(nearestNetDevice(devs, {"0000:19:00.0"}), -1);
  EXPECT_EQ(nearestNetDevice(devs, {}), -1);
  EXPECT_EQ(nearestNetDevice(devs, {""}), -1);
}

}  // namespace
}  // namespace braid
