// The verbs entry-point table: the library's (where libibverbs.so.1 loads),
// a test's own table, and what NCCL_NET=IB says with each.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "transports/net/ibverbs/verbs_api.h"
#include "transports/net/net.h"
#include "util/param.h"

namespace braid {
namespace {

// A fake verbs provider: devices with a number of Ethernet ports, nothing else.
std::vector<ibv_device> gDevices;
std::map<std::string, int> gPortCount;

ibv_device** fakeGetDeviceList(int* n) {
  auto** list = static_cast<ibv_device**>(std::calloc(gDevices.size() + 1, sizeof(ibv_device*)));
  for (size_t i = 0; i < gDevices.size(); ++i) list[i] = &gDevices[i];
  *n = static_cast<int>(gDevices.size());
  return list;
}
void fakeFreeDeviceList(ibv_device** list) {
  std::free(list);
}
const char* fakeGetDeviceName(ibv_device* d) {
  return d->name;
}
ibv_context* fakeOpenDevice(ibv_device* d) {
  auto* ctx = static_cast<ibv_context*>(std::calloc(1, sizeof(ibv_context)));
  ctx->device = d;
  return ctx;
}
int fakeCloseDevice(ibv_context* ctx) {
  std::free(ctx);
  return 0;
}
int fakeQueryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  attr->phys_port_cnt = static_cast<uint8_t>(gPortCount[ctx->device->name]);
  return 0;
}
int fakeQueryPort(ibv_context*, uint8_t, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  attr->state = IBV_PORT_ACTIVE;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}
int fakeQueryGid(ibv_context*, uint8_t, int, ibv_gid* gid) {
  std::memset(gid, 0, sizeof(*gid));
  return 0;
}
ibv_pd* fakeAllocPd(ibv_context*) {
  return nullptr;
}
int fakeDeallocPd(ibv_pd*) {
  return 0;
}
ibv_mr* fakeRegMr(ibv_pd*, void*, size_t, int) {
  return nullptr;
}
int fakeDeregMr(ibv_mr*) {
  return 0;
}
ibv_cq* fakeCreateCq(ibv_context*, int, void*, ibv_comp_channel*, int) {
  return nullptr;
}
int fakeDestroyCq(ibv_cq*) {
  return 0;
}
int fakePollCq(ibv_cq*, int, ibv_wc*) {
  return 0;
}
ibv_qp* fakeCreateQp(ibv_pd*, ibv_qp_init_attr*) {
  return nullptr;
}
int fakeModifyQp(ibv_qp*, ibv_qp_attr*, int) {
  return 0;
}
int fakeQueryQp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) {
  return 0;
}
int fakeDestroyQp(ibv_qp*) {
  return 0;
}
int fakePostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) {
  return 0;
}
int fakePostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) {
  return 0;
}

VerbsApi fakeApi() {
  VerbsApi api;
  api.origin = "fake verbs";
  api.getDeviceList = fakeGetDeviceList;
  api.freeDeviceList = fakeFreeDeviceList;
  api.getDeviceName = fakeGetDeviceName;
  api.openDevice = fakeOpenDevice;
  api.closeDevice = fakeCloseDevice;
  api.queryDevice = fakeQueryDevice;
  api.queryPort = fakeQueryPort;
  api.queryGid = fakeQueryGid;
  api.allocPd = fakeAllocPd;
  api.deallocPd = fakeDeallocPd;
  api.regMr = fakeRegMr;
  api.deregMr = fakeDeregMr;
  api.createCq = fakeCreateCq;
  api.destroyCq = fakeDestroyCq;
  api.pollCq = fakePollCq;
  api.createQp = fakeCreateQp;
  api.modifyQp = fakeModifyQp;
  api.queryQp = fakeQueryQp;
  api.destroyQp = fakeDestroyQp;
  api.postSend = fakePostSend;
  api.postRecv = fakePostRecv;
  return api;
}

void addDevice(const char* name, int ports) {
  ibv_device d;
  std::memset(&d, 0, sizeof(d));
  std::snprintf(d.name, sizeof(d.name), "%s", name);
  gDevices.push_back(d);
  gPortCount[name] = ports;
}

class IbverbsApi : public ::testing::Test {
 protected:
  void TearDown() override {
    setVerbsApiForTesting(nullptr);
    gDevices.clear();
    gPortCount.clear();
    unsetenv("NCCL_NET");
    unsetenv("NCCL_IB_HCA");
    ParamRegistry::instance().reload();
  }
  static Status selectIb(const char* hca = nullptr) {
    setenv("NCCL_NET", "IB", 1);
    if (hca != nullptr) setenv("NCCL_IB_HCA", hca, 1);
    ParamRegistry::instance().reload();
    Net* net = nullptr;
    Status s = selectNet(&net);
    EXPECT_EQ(net, nullptr);
    return s;
  }
};

TEST_F(IbverbsApi, AnIncompleteTableIsRejectedNamingTheEntry) {
  VerbsApi api = fakeApi();
  ASSERT_TRUE(checkVerbsApi(api).ok());
  api.postRecv = nullptr;
  setVerbsApiForTesting(&api);
  const VerbsApi* got = nullptr;
  Status s = verbsApi(&got);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("postRecv"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fake verbs"), std::string::npos) << s.message();
}

TEST_F(IbverbsApi, ATestTableIsWhatTheTransportGets) {
  const VerbsApi api = fakeApi();
  setVerbsApiForTesting(&api);
  const VerbsApi* got = nullptr;
  ASSERT_TRUE(verbsApi(&got).ok());
  EXPECT_EQ(got, &api);
}

TEST_F(IbverbsApi, ListsEveryPortOfEveryDevice) {
  addDevice("mlx5_0", 2);
  addDevice("mlx5_1", 1);
  const VerbsApi api = fakeApi();
  std::vector<RdmaPortInfo> ports;
  std::vector<std::string> notes;
  ASSERT_TRUE(listRdmaPorts(api, &ports, &notes).ok());
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[1].port, 2);
  EXPECT_EQ(ports[2].device, "mlx5_1");
  EXPECT_EQ(ports[2].linkLayer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_TRUE(notes.empty());
}

// The fake device has no GID table (no queryGidEx, nothing in sysfs) and no
// protection domains: the verbs Net cannot use it and says which port failed.
TEST_F(IbverbsApi, NetIbWithDevicesButNoUsablePortSaysWhy) {
  addDevice("mlx5_0", 1);
  addDevice("mlx5_1", 1);
  const VerbsApi api = fakeApi();
  setVerbsApiForTesting(&api);
  Status s = selectIb("=mlx5_1");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("RDMA port(s) mlx5_1:1 found, but none is usable"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("mlx5_1:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NCCL_NET=Socket"), std::string::npos) << s.message();
}

TEST_F(IbverbsApi, NetIbWithEveryDeviceFilteredOutNamesTheFilter) {
  addDevice("mlx5_0", 2);
  const VerbsApi api = fakeApi();
  setVerbsApiForTesting(&api);
  Status s = selectIb("^mlx5");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no RDMA device left after the filter NCCL_IB_HCA='^mlx5'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("mlx5_0:1, mlx5_0:2"), std::string::npos) << s.message();
}

TEST_F(IbverbsApi, NetIbWithoutDevicesSaysNoRdmaDevice) {
  const VerbsApi api = fakeApi();
  setVerbsApiForTesting(&api);
  Status s = selectIb();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ncclSystemError);
  EXPECT_NE(s.message().find("no RDMA device"), std::string::npos) << s.message();
}

// This machine as it is: libibverbs.so.1 loads or not, and RDMA devices exist or not.
TEST_F(IbverbsApi, NetIbOnThisMachineFailsFastSayingWhy) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  struct stat st;
  const bool haveDevices = stat("/sys/class/infiniband", &st) == 0;
  Status s = selectIb();
  ASSERT_FALSE(s.ok());
  if (lib == nullptr) {
    EXPECT_NE(s.message().find("cannot load libibverbs.so.1"), std::string::npos) << s.message();
    return;
  }
  dlclose(lib);
  const VerbsApi* api = nullptr;
  ASSERT_TRUE(verbsApi(&api).ok());
  EXPECT_TRUE(checkVerbsApi(*api).ok());
  EXPECT_STREQ(api->origin, "libibverbs.so.1");
  if (haveDevices) GTEST_SKIP() << "this machine has RDMA devices: " << s.message();
  EXPECT_NE(s.message().find("no RDMA device"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace braid
