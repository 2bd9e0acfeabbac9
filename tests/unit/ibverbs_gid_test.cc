// RoCE GID selection over recorded-style GID tables, and the sysfs reader
// over a fake /sys tree written to a temporary directory.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "transports/net/ibverbs/gid.h"

namespace braid {
namespace {

const char* kV1 = "IB/RoCE v1";
const char* kV2 = "RoCE v2";
const char* kZero = "0000:0000:0000:0000:0000:0000:0000:0000";

GidEntry gid(int index, const char* text, const char* type, const char* netdev = "eth0") {
  GidEntry e;
  e.index = index;
  Status s = parseGidText(text, e.raw);
  EXPECT_TRUE(s.ok()) << s.message();
  e.type = type;
  e.netdev = netdev;
  return e;
}

InterfaceAddress addr(const char* name, const char* text) {
  InterfaceAddress a;
  a.name = name;
  Status s = parseInterfaceAddress(text, &a);
  EXPECT_TRUE(s.ok()) << s.message();
  return a;
}

// An mlx5 RoCE port whose netdev has a link-local, an IPv4 and a ULA IPv6
// address: each address appears once as RoCE v1 and once as RoCE v2, in the
// order the mlx5 driver fills the table; the rest is empty.
PortGids mlx5Port() {
  PortGids p;
  p.device = "mlx5_0";
  p.port = 1;
  p.table = {
      gid(0, "fe80:0000:0000:0000:0ac0:ebff:fe5a:1b2c", kV1),
      gid(1, "fe80:0000:0000:0000:0ac0:ebff:fe5a:1b2c", kV2),
      gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0005", kV1),
      gid(3, "0000:0000:0000:0000:0000:ffff:0a00:0005", kV2),
      gid(4, "fd00:0000:0000:0000:0000:0000:0000:0005", kV1),
      gid(5, "fd00:0000:0000:0000:0000:0000:0000:0005", kV2),
      gid(6, kZero, "", ""),
      gid(7, kZero, "", ""),
  };
  return p;
}

GidChoice choose(const PortGids& p, const std::vector<InterfaceAddress>& addrs, int forced = -1) {
  GidChoice c;
  Status s = selectGid(p, addrs, forced, &c);
  EXPECT_TRUE(s.ok()) << s.message();
  return c;
}

TEST(IbverbsGid, Mlx5PrefersRoceV2Ipv4OnTheSubnet) {
  GidChoice c = choose(mlx5Port(), {addr("eth0", "10.0.0.5/24"), addr("eth0", "fd00::5/64")});
  EXPECT_EQ(c.index, 3);
  EXPECT_EQ(c.reason, "index 3: RoCE v2, IPv4 10.0.0.5 on eth0's subnet 10.0.0.0/24");
}

TEST(IbverbsGid, TwoSubnetsTheInterfacesOneWins) {
  PortGids p;
  p.device = "mlx5_1";
  p.table = {
      gid(0, "fe80::1", kV1),
      gid(1, "fe80::1", kV2),
      gid(2, "::ffff:192.168.1.5", kV1),
      gid(3, "::ffff:192.168.1.5", kV2),
      gid(4, "::ffff:10.1.2.5", kV1),
      gid(5, "::ffff:10.1.2.5", kV2),
  };
  GidChoice c = choose(p, {addr("ens1f0", "10.1.0.0/16")});
  EXPECT_EQ(c.index, 5);
  EXPECT_EQ(c.reason, "index 5: RoCE v2, IPv4 10.1.2.5 on ens1f0's subnet 10.1.0.0/16");
  // With the other subnet on the interface, the other entry.
  EXPECT_EQ(choose(p, {addr("ens1f0", "192.168.1.5/24")}).index, 3);
  // On neither subnet: the first RoCE v2 IPv4 entry, saying so.
  GidChoice far = choose(p, {addr("ens1f0", "172.16.0.1/12")});
  EXPECT_EQ(far.index, 3);
  EXPECT_NE(far.reason.find("not on ens1f0's subnets 172.16.0.0/12"), std::string::npos) << far.reason;
  // No address known for the interface at all.
  GidChoice none = choose(p, {});
  EXPECT_EQ(none.index, 3);
  EXPECT_NE(none.reason.find("no IPv4 address"), std::string::npos) << none.reason;
}

TEST(IbverbsGid, Ipv6OnlyUsesRoceV2GlobalPreferringTheSubnet) {
  PortGids p;
  p.device = "mlx5_0";
  p.table = {
      gid(0, "fe80::1", kV1),       gid(1, "fe80::1", kV2),       gid(2, "2001:db8:1::5", kV1),
      gid(3, "2001:db8:1::5", kV2), gid(4, "2001:db8:2::5", kV2),
  };
  GidChoice c = choose(p, {addr("eth2", "2001:db8:2::5/64")});
  EXPECT_EQ(c.index, 4);
  EXPECT_NE(c.reason.find("RoCE v2, IPv6 2001:db8:2::5 on eth2's subnet 2001:db8:2::/64"), std::string::npos)
      << c.reason;
  EXPECT_EQ(choose(p, {}).index, 3);
}

TEST(IbverbsGid, OnlyRoceV1FallsBackToV1) {
  PortGids p;
  p.device = "mlx4_0";
  p.table = {gid(0, "fe80::202:c9ff:fe00:1", kV1), gid(1, "::ffff:10.0.0.7", kV1), gid(2, kZero, "", "")};
  GidChoice c = choose(p, {addr("eth0", "10.0.0.7/24")});
  EXPECT_EQ(c.index, 1);
  EXPECT_NE(c.reason.find("index 1: IB/RoCE v1, IPv4 10.0.0.7"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("no RoCE v2"), std::string::npos) << c.reason;
}

TEST(IbverbsGid, OnlyLinkLocalIsAnErrorSayingNoUsableGid) {
  PortGids p;
  p.device = "mlx5_3";
  p.port = 2;
  p.table = {gid(0, "fe80::1", kV1), gid(1, "fe80::1", kV2), gid(2, kZero, "", "")};
  GidChoice c;
  Status s = selectGid(p, {addr("eth3", "fe80::1/64")}, -1, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mlx5_3 port 2: no usable GID"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("link-local"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NCCL_IB_GID_INDEX"), std::string::npos) << s.message();
}

TEST(IbverbsGid, OverrideIsTakenWhenValid) {
  GidChoice c = choose(mlx5Port(), {addr("eth0", "10.0.0.5/24")}, 5);
  EXPECT_EQ(c.index, 5);
  EXPECT_EQ(c.reason, "index 5: set by NCCL_IB_GID_INDEX (RoCE v2, IPv6 fd00::5)");
  // Even a link-local one: the user asked for it.
  EXPECT_EQ(choose(mlx5Port(), {}, 0).index, 0);
}

TEST(IbverbsGid, OverrideOutOfTheTableOrOnAZeroGidIsAnError) {
  GidChoice c;
  Status out = selectGid(mlx5Port(), {}, 8, &c);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.code(), ncclInvalidArgument);
  EXPECT_NE(out.message().find("mlx5_0 port 1"), std::string::npos) << out.message();
  EXPECT_NE(out.message().find("GID index 8"), std::string::npos) << out.message();
  EXPECT_NE(out.message().find("8 entries (0..7)"), std::string::npos) << out.message();
  Status zero = selectGid(mlx5Port(), {}, 6, &c);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("mlx5_0 port 1"), std::string::npos) << zero.message();
  EXPECT_NE(zero.message().find("GID index 6"), std::string::npos) << zero.message();
  EXPECT_NE(zero.message().find("zero GID"), std::string::npos) << zero.message();
}

TEST(IbverbsGid, InfinibandPortUsesGidZero) {
  PortGids p;
  p.device = "mlx5_0";
  p.infiniband = true;
  p.table = {gid(0, "fe80::248a:703:9c:1234", kV1, "")};
  GidChoice c = choose(p, {});
  EXPECT_EQ(c.index, 0);
  EXPECT_NE(c.reason.find("InfiniBand"), std::string::npos) << c.reason;
}

TEST(IbverbsGid, TextForms) {
  uint8_t raw[16];
  ASSERT_TRUE(parseGidText("0000:0000:0000:0000:0000:ffff:0a00:0005", raw).ok());
  EXPECT_EQ(gidText(raw), "0000:0000:0000:0000:0000:ffff:0a00:0005");
  EXPECT_EQ(gidDescription(raw), "IPv4 10.0.0.5");
  EXPECT_FALSE(parseGidText("not a gid", raw).ok());
  InterfaceAddress a;
  EXPECT_FALSE(parseInterfaceAddress("10.0.0.5/33", &a).ok());
  EXPECT_FALSE(parseInterfaceAddress("eth0", &a).ok());
  ASSERT_TRUE(parseInterfaceAddress("10.0.0.5", &a).ok());
  EXPECT_EQ(a.prefixLen, 32);
}

// A fake sysfs tree under a temporary directory.
class IbverbsSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void write(const std::string& rel, const std::string& text) {
    const std::string path = root_ + "/" + rel;
    const std::string dir = path.substr(0, path.rfind('/'));
    const std::string cmd = "mkdir -p '" + dir + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ofstream(path) << text << "\n";
  }
  void writeGid(const std::string& dev, int port, int i, const char* gid, const char* type, const char* nd) {
    const std::string base = "sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/";
    write(base + "gids/" + std::to_string(i), gid);
    if (*type != '\0') write(base + "gid_attrs/types/" + std::to_string(i), type);
    if (*nd != '\0') write(base + "gid_attrs/ndevs/" + std::to_string(i), nd);
  }
  std::string root_;
};

TEST_F(IbverbsSysfs, ReadsTheTableAndChoosesFromIt) {
  write("sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet");
  write("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
  writeGid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0ac0:ebff:fe5a:1b2c", kV1, "eth0");
  writeGid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0ac0:ebff:fe5a:1b2c", kV2, "eth0");
  writeGid("mlx5_0", 1, 2, "0000:0000:0000:0000:0000:ffff:0a00:0005", kV1, "eth0");
  writeGid("mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a00:0005", kV2, "eth0");
  writeGid("mlx5_0", 1, 10, kZero, "", "");  // sorted numerically, after 3
  write("sys/class/infiniband/mlx5_1/ports/1/link_layer", "InfiniBand");
  write("sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN");
  writeGid("mlx5_1", 1, 0, "fe80:0000:0000:0000:248a:0703:009c:1234", kV1, "");

  std::vector<SysfsRdmaPort> ports = listSysfsRdmaPorts(root_);
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[0].port, 1);
  EXPECT_EQ(ports[0].linkLayer, "Ethernet");
  EXPECT_EQ(ports[0].state, "ACTIVE");
  EXPECT_EQ(ports[0].netdev, "eth0");
  EXPECT_EQ(ports[1].linkLayer, "InfiniBand");
  EXPECT_EQ(ports[1].state, "DOWN");

  PortGids p;
  p.device = "mlx5_0";
  ASSERT_TRUE(readGidTable(root_, "mlx5_0", 1, &p.table).ok());
  ASSERT_EQ(p.table.size(), 5u);
  EXPECT_EQ(p.table[3].index, 3);
  EXPECT_EQ(p.table[3].type, "RoCE v2");
  EXPECT_EQ(p.table[3].netdev, "eth0");
  EXPECT_EQ(p.table[4].index, 10);
  EXPECT_EQ(p.table[4].type, "");
  GidChoice c = choose(p, {addr("eth0", "10.0.0.1/24")});
  EXPECT_EQ(c.index, 3);
  EXPECT_EQ(c.reason, "index 3: RoCE v2, IPv4 10.0.0.5 on eth0's subnet 10.0.0.0/24");

  std::vector<GidEntry> none;
  Status missing = readGidTable(root_, "mlx5_0", 2, &none);
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(listSysfsRdmaPorts(root_ + "/nothing").empty());
}

TEST_F(IbverbsSysfs, AGarbledGidIsAnError) {
  writeGid("mlx5_0", 1, 0, "zzzz", kV2, "eth0");
  std::vector<GidEntry> t;
  Status s = readGidTable(root_, "mlx5_0", 1, &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mlx5_0 port 1: GID 0"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace braid
