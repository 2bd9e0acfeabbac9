// The software verbs device (softverbs.h): what it reports (device, port,
// GIDs and Braid's own GID choice on it), the QP state machine, memory
// protection, RC traffic between QPs of one process and of two processes,
// errors (bad keys, a peer that dies) and the fault knobs. CTest runs every
// test with BRAID_SOFTVERBS_IFNAME=lo; names start with "ibverbs.".
#include "tests/softverbs/softverbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "transports/net/ibverbs/gid.h"
#include "transports/net/ibverbs/verbs_api.h"

namespace braid {
namespace {

const VerbsApi& api() {
  return *braid_verbs_table();
}

// The device binds to lo unless told otherwise (CTest sets it too; this
// keeps the program right when run by hand).
const bool kIfnameDefaulted = setenv("BRAID_SOFTVERBS_IFNAME", "lo", /*overwrite=*/0) == 0;

constexpr int kIbvAccessAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One open device with a PD and one CQ for everything.
struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;

  bool open() {
    int n = 0;
    ibv_device** list = api().getDeviceList(&n);
    if (list == nullptr || n != 1) return false;
    ctx = api().openDevice(list[0]);
    api().freeDeviceList(list);
    if (ctx == nullptr) return false;
    pd = api().allocPd(ctx);
    cq = api().createCq(ctx, 1024, nullptr, nullptr, 0);
    return pd != nullptr && cq != nullptr;
  }
  void close() {
    if (cq != nullptr) api().destroyCq(cq);
    if (pd != nullptr) api().deallocPd(pd);
    if (ctx != nullptr) api().closeDevice(ctx);
    cq = nullptr;
    pd = nullptr;
    ctx = nullptr;
  }
};

// What a QP's peer needs to reach it and write into its buffer.
struct QpInfo {
  uint32_t qpn = 0;
  uint8_t gid[16] = {};
  uint64_t addr = 0;
  uint32_t rkey = 0;
};

ibv_qp* createQp(const Device& d, int sigAll = 0) {
  ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof(ia));
  ia.send_cq = d.cq;
  ia.recv_cq = d.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 64;
  ia.cap.max_recv_wr = 64;
  ia.cap.max_send_sge = 4;
  ia.cap.max_recv_sge = 4;
  ia.cap.max_inline_data = 64;
  ia.sq_sig_all = sigAll;
  return api().createQp(d.pd, &ia);
}

int toInit(ibv_qp* qp, int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = kIbvAccessAll;
  return api().modifyQp(qp, &a, mask);
}

constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC;

int toRtr(ibv_qp* qp, const QpInfo& peer, int mask = kRtrMask) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = 3;
  a.ah_attr.grh.hop_limit = 255;
  a.ah_attr.port_num = 1;
  return api().modifyQp(qp, &a, mask);
}

int toRts(ibv_qp* qp, int mask = kRtsMask) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return api().modifyQp(qp, &a, mask);
}

QpInfo infoOf(const Device& d, ibv_qp* qp, ibv_mr* mr) {
  QpInfo info;
  info.qpn = qp->qp_num;
  ibv_gid gid;
  api().queryGid(d.ctx, 1, 3, &gid);
  std::memcpy(info.gid, gid.raw, 16);
  if (mr != nullptr) {
    info.addr = reinterpret_cast<uint64_t>(mr->addr);
    info.rkey = mr->rkey;
  }
  return info;
}

ibv_qp_state stateOf(ibv_qp* qp) {
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  std::memset(&a, 0, sizeof(a));
  api().queryQp(qp, &a, IBV_QP_STATE, &ia);
  return a.qp_state;
}

// Polls `cq` until `n` completions arrived or a generous deadline passed.
std::vector<ibv_wc> waitWc(ibv_cq* cq, size_t n, double seconds = 20) {
  std::vector<ibv_wc> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int got = api().pollCq(cq, 16, wc);
    if (got < 0) break;
    for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    if (got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

int postWrite(ibv_qp* qp, ibv_mr* mr, size_t offset, size_t len, const QpInfo& peer, uint64_t remoteOffset,
              uint64_t wrId, bool withImm, uint32_t imm, bool signaled = true) {
  ibv_sge sge{reinterpret_cast<uint64_t>(mr->addr) + offset, static_cast<uint32_t>(len), mr->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = peer.addr + remoteOffset;
  wr.wr.rdma.rkey = peer.rkey;
  ibv_send_wr* bad = nullptr;
  return api().postSend(qp, &wr, &bad);
}

int postRecv(ibv_qp* qp, uint64_t wrId, ibv_mr* mr = nullptr, size_t offset = 0, size_t len = 0) {
  ibv_sge sge{};
  ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = wrId;
  if (mr != nullptr) {
    sge = {reinterpret_cast<uint64_t>(mr->addr) + offset, static_cast<uint32_t>(len), mr->lkey};
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  return api().postRecv(qp, &wr, &bad);
}

// Two connected QPs of one device (on lo), each with a 1 MiB registered buffer.
class IbverbsLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    softverbs::resetFaultsForTesting();
    ASSERT_TRUE(dev_.open());
    for (int i = 0; i < 2; ++i) {
      buf_[i].assign(kBytes, 0);
      mr_[i] = api().regMr(dev_.pd, buf_[i].data(), kBytes, kIbvAccessAll);
      ASSERT_NE(mr_[i], nullptr);
      qp_[i] = createQp(dev_);
      ASSERT_NE(qp_[i], nullptr);
      ASSERT_EQ(toInit(qp_[i]), 0);
    }
    for (int i = 0; i < 2; ++i) info_[i] = infoOf(dev_, qp_[i], mr_[i]);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(toRtr(qp_[i], info_[1 - i]), 0);
      ASSERT_EQ(toRts(qp_[i]), 0);
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (qp_[i] != nullptr) {
        EXPECT_EQ(api().destroyQp(qp_[i]), 0);
      }
      if (mr_[i] != nullptr) {
        EXPECT_EQ(api().deregMr(mr_[i]), 0);
      }
    }
    dev_.close();
    unsetenv("BRAID_SOFTVERBS_FAIL_AFTER");
    unsetenv("BRAID_SOFTVERBS_BAD_RKEY_AFTER");
    softverbs::resetFaultsForTesting();
  }
  static constexpr size_t kBytes = 1 << 20;
  Device dev_;
  std::vector<uint8_t> buf_[2];
  ibv_mr* mr_[2] = {};
  ibv_qp* qp_[2] = {};
  QpInfo info_[2];
};

TEST(IbverbsSoftDevice, ListsDevicePortAndGids) {
  ASSERT_TRUE(kIfnameDefaulted);
  const VerbsApi& t = api();
  EXPECT_STREQ(t.origin, "software verbs device");
  EXPECT_TRUE(checkVerbsApi(t).ok());
  int n = 0;
  ibv_device** list = t.getDeviceList(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(t.getDeviceName(list[0]), "softroce0");
  ibv_context* ctx = t.openDevice(list[0]);
  t.freeDeviceList(list);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr dattr;
  ASSERT_EQ(t.queryDevice(ctx, &dattr), 0);
  EXPECT_EQ(dattr.phys_port_cnt, 1);
  EXPECT_GE(dattr.max_qp_wr, 1024);
  EXPECT_GE(dattr.max_sge, 4);
  EXPECT_GT(dattr.max_mr, 0);
  ibv_port_attr pattr;
  ASSERT_EQ(t.queryPort(ctx, 1, &pattr), 0);
  EXPECT_EQ(pattr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pattr.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pattr.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(pattr.gid_tbl_len, 4);

  ibv_gid gid;
  ASSERT_EQ(t.queryGid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_EQ(gid.raw[1], 0x80);
  ASSERT_EQ(t.queryGid(ctx, 1, 3, &gid), 0);
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(gid.raw, loopback, 16), 0);
  EXPECT_EQ(t.queryGid(ctx, 1, 4, &gid), -1);
  ibv_gid_entry e;
  const ibv_gid_type types[4] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1,
                                 IBV_GID_TYPE_ROCE_V2};
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_EQ(t.queryGidEx(ctx, 1, i, &e, 0), 0);
    EXPECT_EQ(e.gid_index, i);
    EXPECT_EQ(e.gid_type, types[i]);
    EXPECT_EQ(e.ndev_ifindex, if_nametoindex("lo"));
  }
  EXPECT_NE(t.queryGidEx(ctx, 1, 4, &e, 0), 0);
  EXPECT_EQ(t.closeDevice(ctx), 0);

  std::vector<RdmaPortInfo> ports;
  std::vector<std::string> notes;
  ASSERT_TRUE(listRdmaPorts(t, &ports, &notes).ok());
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].device, "softroce0");
  EXPECT_EQ(ports[0].port, 1);
  EXPECT_EQ(ports[0].state, IBV_PORT_ACTIVE);
  EXPECT_EQ(ports[0].linkLayer, IBV_LINK_LAYER_ETHERNET);
}

TEST(IbverbsSoftDevice, SelectGidPicksRoceV2Ipv4) {
  Device d;
  ASSERT_TRUE(d.open());
  PortGids port;
  port.device = "softroce0";
  port.port = 1;
  for (uint32_t i = 0; i < 4; ++i) {
    ibv_gid_entry e;
    ASSERT_EQ(api().queryGidEx(d.ctx, 1, i, &e, 0), 0);
    GidEntry g;
    g.index = static_cast<int>(e.gid_index);
    std::memcpy(g.raw, e.gid.raw, 16);
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
    char name[IF_NAMESIZE] = {};
    ASSERT_NE(if_indextoname(e.ndev_ifindex, name), nullptr);
    g.netdev = name;
    port.table.push_back(g);
  }
  d.close();
  std::vector<InterfaceAddress> addrs;
  ASSERT_TRUE(interfaceAddresses("lo", &addrs).ok());
  GidChoice choice;
  ASSERT_TRUE(selectGid(port, addrs, -1, &choice).ok());
  EXPECT_EQ(choice.index, 3);
  EXPECT_NE(choice.reason.find("RoCE v2"), std::string::npos) << choice.reason;
  EXPECT_NE(choice.reason.find("127.0.0.1"), std::string::npos) << choice.reason;
}

TEST(IbverbsSoftDevice, QpStateMachine) {
  Device d;
  ASSERT_TRUE(d.open());
  ibv_qp_init_attr ud;
  std::memset(&ud, 0, sizeof(ud));
  ud.send_cq = d.cq;
  ud.recv_cq = d.cq;
  ud.qp_type = IBV_QPT_UD;
  EXPECT_EQ(api().createQp(d.pd, &ud), nullptr);

  ibv_qp* a = createQp(d);
  ibv_qp* b = createQp(d);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->qp_num, b->qp_num);
  EXPECT_EQ(a->qp_num >> 24, 0u);
  EXPECT_EQ(a->qp_type, IBV_QPT_RC);
  EXPECT_EQ(a->pd, d.pd);
  EXPECT_EQ(stateOf(a), IBV_QPS_RESET);
  const QpInfo bi = infoOf(d, b, nullptr);

  EXPECT_EQ(toRtr(a, bi), EINVAL);                           // RESET -> RTR
  EXPECT_EQ(toInit(a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);  // masks missing
  EXPECT_EQ(postRecv(a, 1), EINVAL);                         // receives from INIT on
  ASSERT_EQ(toInit(a), 0);
  EXPECT_EQ(stateOf(a), IBV_QPS_INIT);
  EXPECT_EQ(toRts(a), EINVAL);  // INIT -> RTS
  EXPECT_EQ(toRtr(a, bi, kRtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  QpInfo v6 = bi;
  v6.gid[10] = 0;  // not IPv4-mapped
  EXPECT_EQ(toRtr(a, v6), EINVAL);

  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(api().postSend(a, &wr, &bad), EINVAL);  // sends only in RTS
  EXPECT_EQ(bad, &wr);

  ASSERT_EQ(toInit(b), 0);
  ASSERT_EQ(toRtr(a, bi), 0);
  EXPECT_EQ(stateOf(a), IBV_QPS_RTR);
  EXPECT_EQ(toRts(a, kRtsMask & ~IBV_QP_SQ_PSN), EINVAL);
  ASSERT_EQ(toRts(a), 0);
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(api().queryQp(a, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_TIMEOUT, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(qa.dest_qp_num, b->qp_num);
  EXPECT_EQ(qa.timeout, 14);
  EXPECT_EQ(qa.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(qi.qp_type, IBV_QPT_RC);
  EXPECT_EQ(toInit(a), EINVAL);  // RTS -> INIT

  // Any state -> ERR; posted work then flushes.
  ibv_qp_attr err;
  std::memset(&err, 0, sizeof(err));
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(api().modifyQp(a, &err, IBV_QP_STATE), 0);
  EXPECT_EQ(stateOf(a), IBV_QPS_ERR);
  ASSERT_EQ(postRecv(a, 77), 0);
  const auto wcs = waitWc(d.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  // ERR -> RESET -> INIT again.
  err.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(api().modifyQp(a, &err, IBV_QP_STATE), 0);
  EXPECT_EQ(toInit(a), 0);
  const uint32_t oldNum = a->qp_num;
  EXPECT_EQ(api().destroyQp(a), 0);
  ibv_qp* c = createQp(d);  // numbers are not reused at once
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->qp_num, oldNum);
  EXPECT_EQ(api().destroyQp(c), 0);
  EXPECT_EQ(api().destroyQp(b), 0);
  d.close();
}

TEST(IbverbsSoftDevice, MemoryRegionAccess) {
  Device d;
  ASSERT_TRUE(d.open());
  std::vector<uint8_t> buf(4096);
  errno = 0;
  EXPECT_EQ(api().regMr(d.pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* a = api().regMr(d.pd, buf.data(), buf.size(), kIbvAccessAll);
  ibv_mr* b = api().regMr(d.pd, buf.data(), 100, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->lkey, b->lkey);
  EXPECT_NE(a->rkey, b->rkey);
  EXPECT_EQ(a->addr, buf.data());
  EXPECT_EQ(a->length, buf.size());
  EXPECT_EQ(a->pd, d.pd);
  EXPECT_EQ(a->context, d.ctx);
  EXPECT_EQ(api().deallocPd(d.pd), EBUSY);  // regions still registered
  EXPECT_EQ(api().deregMr(a), 0);
  EXPECT_EQ(api().deregMr(b), 0);
  d.close();
}

// More completions than the CQ holds: the CQ is in error from then on.
TEST(IbverbsSoftDevice, CqOverrunIsAnError) {
  Device d;
  ASSERT_TRUE(d.open());
  ibv_cq* small = api().createCq(d.ctx, 2, nullptr, nullptr, 0);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->cqe, 2);
  ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof(ia));
  ia.send_cq = small;
  ia.recv_cq = small;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ibv_qp* qp = api().createQp(d.pd, &ia);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->send_cq, small);
  ASSERT_EQ(toInit(qp), 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(postRecv(qp, i), 0);
  ibv_qp_attr err;
  std::memset(&err, 0, sizeof(err));
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(api().modifyQp(qp, &err, IBV_QP_STATE), 0);  // two flushed receives: the CQ is full
  ibv_wc wc[4];
  ASSERT_EQ(postRecv(qp, 2), 0);  // a third: overrun
  EXPECT_EQ(api().pollCq(small, 4, wc), -1);
  EXPECT_EQ(api().destroyQp(qp), 0);
  EXPECT_EQ(api().destroyCq(small), 0);
  d.close();
}

TEST_F(IbverbsLoopback, WriteWithImm) {
  for (size_t i = 0; i < kBytes; ++i) buf_[0][i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(postRecv(qp_[1], 500), 0);
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, kBytes, info_[1], 0, 100, true, 0x12345678), 0);
  const auto wcs = waitWc(dev_.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  bool sawSend = false, sawRecv = false;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "status " << wc.status;
    if (wc.wr_id == 100) {
      sawSend = true;
      EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
      EXPECT_EQ(wc.qp_num, qp_[0]->qp_num);
    } else {
      sawRecv = true;
      EXPECT_EQ(wc.wr_id, 500u);
      EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
      EXPECT_EQ(wc.byte_len, kBytes);
      EXPECT_EQ(ntohl(wc.imm_data), 0x12345678u);
      EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(wc.qp_num, qp_[1]->qp_num);
    }
  }
  EXPECT_TRUE(sawSend && sawRecv);
  EXPECT_EQ(buf_[0], buf_[1]);
}

TEST_F(IbverbsLoopback, RdmaRead) {
  for (size_t i = 0; i < 65536; ++i) buf_[1][i] = static_cast<uint8_t>(i * 13 + 1);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 65536, mr_[0]->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = info_[1].addr;
  wr.wr.rdma.rkey = info_[1].rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(api().postSend(qp_[0], &wr, &bad), 0);
  auto wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(std::memcmp(buf_[0].data(), buf_[1].data(), 65536), 0);

  // A region without REMOTE_READ: remote access error.
  std::vector<uint8_t> wo(4096);
  ibv_mr* woMr = api().regMr(dev_.pd, wo.data(), wo.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(woMr, nullptr);
  sge.length = 1024;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(wo.data());
  wr.wr.rdma.rkey = woMr->rkey;
  ASSERT_EQ(api().postSend(qp_[0], &wr, &bad), 0);
  wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(api().deregMr(woMr), 0);
}

TEST_F(IbverbsLoopback, UnsignaledWritesAndOrder) {
  for (int i = 0; i < 8; ++i) {
    std::memset(buf_[0].data() + i * 1024, 'a' + i, 1024);
    ASSERT_EQ(postWrite(qp_[0], mr_[0], i * 1024, 1024, info_[1], i * 1024, i, false, 0, i == 7), 0);
  }
  const auto wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);  // only the signaled one
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  // RC: the last write completing means every earlier one has landed.
  EXPECT_EQ(std::memcmp(buf_[0].data(), buf_[1].data(), 8 * 1024), 0);
  EXPECT_TRUE(waitWc(dev_.cq, 1, 0.2).empty());
}

TEST_F(IbverbsLoopback, SendRecvSgesInlineAndRnr) {
  // A SEND posted before its receive waits (RNR, retried forever) in order.
  std::memcpy(buf_[0].data(), "hello ", 6);
  std::memcpy(buf_[0].data() + 100, "world", 5);
  ibv_sge sges[2] = {{reinterpret_cast<uint64_t>(buf_[0].data()), 6, mr_[0]->lkey},
                     {reinterpret_cast<uint64_t>(buf_[0].data() + 100), 5, mr_[0]->lkey}};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = 1;
  wr.sg_list = sges;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr inl = wr;
  char text[] = "inline!";
  ibv_sge inlSge{reinterpret_cast<uint64_t>(text), 7, 0};  // no lkey needed
  inl.wr_id = 2;
  inl.sg_list = &inlSge;
  inl.num_sge = 1;
  inl.opcode = IBV_WR_SEND_WITH_IMM;
  inl.imm_data = htonl(42);
  inl.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.next = &inl;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(api().postSend(qp_[0], &wr, &bad), 0);
  std::memset(text, 0, sizeof(text));            // inline data was copied at post time
  EXPECT_TRUE(waitWc(dev_.cq, 1, 0.3).empty());  // no receive yet: nothing completes

  // Two receive SGEs for the first message.
  ibv_sge rs[2] = {{reinterpret_cast<uint64_t>(buf_[1].data()), 4, mr_[1]->lkey},
                   {reinterpret_cast<uint64_t>(buf_[1].data() + 1000), 100, mr_[1]->lkey}};
  ibv_recv_wr rwr;
  std::memset(&rwr, 0, sizeof(rwr));
  rwr.wr_id = 10;
  rwr.sg_list = rs;
  rwr.num_sge = 2;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(api().postRecv(qp_[1], &rwr, &rbad), 0);
  ASSERT_EQ(postRecv(qp_[1], 11, mr_[1], 2000, 100), 0);
  const auto wcs = waitWc(dev_.cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  int recvs = 0;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "status " << wc.status;
    if (wc.opcode == IBV_WC_RECV) {
      EXPECT_EQ(wc.wr_id, recvs == 0 ? 10u : 11u);  // in order
      if (wc.wr_id == 10) {
        EXPECT_EQ(wc.byte_len, 11u);
        EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
      } else {
        EXPECT_EQ(wc.byte_len, 7u);
        EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(ntohl(wc.imm_data), 42u);
      }
      ++recvs;
    } else {
      EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    }
  }
  EXPECT_EQ(recvs, 2);
  EXPECT_EQ(std::memcmp(buf_[1].data(), "hell", 4), 0);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 1000, "o world", 7), 0);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 2000, "inline!", 7), 0);
}

TEST_F(IbverbsLoopback, SendLongerThanReceive) {
  ASSERT_EQ(postRecv(qp_[1], 10, mr_[1], 0, 16), 0);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 64, mr_[0]->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(api().postSend(qp_[0], &wr, &bad), 0);
  const auto wcs = waitWc(dev_.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) {
    if (wc.wr_id == 10) {
      EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    }
    if (wc.wr_id == 1) {
      EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    }
  }
  EXPECT_EQ(stateOf(qp_[0]), IBV_QPS_ERR);
  EXPECT_EQ(stateOf(qp_[1]), IBV_QPS_ERR);
}

TEST_F(IbverbsLoopback, LocalProtectionError) {
  ibv_mr fake = *mr_[0];
  fake.lkey ^= 0x1234;
  ASSERT_EQ(postWrite(qp_[0], &fake, 0, 64, info_[1], 0, 1, false, 0), 0);
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, 2, false, 0), 0);
  const auto wcs = waitWc(dev_.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(stateOf(qp_[0]), IBV_QPS_ERR);
  // In ERR a new send completes with a flush error at once.
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, 3, false, 0), 0);
  const auto more = waitWc(dev_.cq, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(IbverbsLoopback, RemoteAccessErrorOnReadOnlyRegion) {
  std::vector<uint8_t> ro(4096);
  ibv_mr* roMr = api().regMr(dev_.pd, ro.data(), ro.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(roMr, nullptr);
  QpInfo target = info_[1];
  target.addr = reinterpret_cast<uint64_t>(ro.data());
  target.rkey = roMr->rkey;
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, target, 0, 1, false, 0), 0);
  const auto wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(stateOf(qp_[0]), IBV_QPS_ERR);
  EXPECT_EQ(stateOf(qp_[1]), IBV_QPS_ERR);  // the responder that NAKed too
  EXPECT_EQ(api().deregMr(roMr), 0);
}

TEST_F(IbverbsLoopback, RemoteAccessErrorOutOfRange) {
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 4096, info_[1], kBytes - 100, 1, false, 0), 0);
  const auto wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(IbverbsLoopback, DeregisteredRkeyFails) {
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, 1, false, 0), 0);
  ASSERT_EQ(waitWc(dev_.cq, 1).size(), 1u);
  ASSERT_EQ(api().deregMr(mr_[1]), 0);
  mr_[1] = nullptr;
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, 2, false, 0), 0);
  const auto wcs = waitWc(dev_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(IbverbsLoopback, BadRkeyAfterKnob) {
  setenv("BRAID_SOFTVERBS_BAD_RKEY_AFTER", "3", 1);
  softverbs::resetFaultsForTesting();
  for (int i = 1; i <= 4; ++i) ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, i, false, 0), 0);
  const auto wcs = waitWc(dev_.cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[2].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[3].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(IbverbsLoopback, FailAfterKnob) {
  setenv("BRAID_SOFTVERBS_FAIL_AFTER", "2", 1);
  softverbs::resetFaultsForTesting();
  ASSERT_EQ(postRecv(qp_[1], 50), 0);
  // Two writes arrive (their ACKs too); the third finds the link down.
  for (int i = 1; i <= 2; ++i) ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, i, false, 0), 0);
  auto wcs = waitWc(dev_.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  ASSERT_EQ(postWrite(qp_[0], mr_[0], 0, 64, info_[1], 0, 3, false, 0), 0);
  const auto more = waitWc(dev_.cq, 2);
  wcs.insert(wcs.end(), more.begin(), more.end());
  ASSERT_EQ(wcs.size(), 4u);
  int ok = 0, retry = 0, flushed = 0;
  for (const ibv_wc& wc : wcs) {
    if (wc.status == IBV_WC_SUCCESS) ++ok;
    if (wc.status == IBV_WC_RETRY_EXC_ERR) {
      ++retry;
      EXPECT_EQ(wc.wr_id, 3u);
    }
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      ++flushed;
      EXPECT_EQ(wc.wr_id, 50u);  // the other QP's receive: the link is down for every QP
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(retry, 1);
  EXPECT_EQ(flushed, 1);
  EXPECT_EQ(softverbs::rdmaWritesSent(), 3u);
  EXPECT_EQ(stateOf(qp_[0]), IBV_QPS_ERR);
  EXPECT_EQ(stateOf(qp_[1]), IBV_QPS_ERR);
}

// Several QP pairs of one device driven from their own threads at once (the
// verbs calls of a multi-channel transport); each pair's immediates arrive
// in order and every byte lands.
TEST(IbverbsSoftDevice, ConcurrentPairsOnThreads) {
  Device d;
  ASSERT_TRUE(d.open());
  constexpr int kPairs = 4, kMsgs = 48;
  constexpr size_t kMsg = 16384;
  std::vector<std::thread> threads;
  std::vector<int> failures(kPairs, 0);
  for (int p = 0; p < kPairs; ++p) {
    threads.emplace_back([&, p] {
      auto fail = [&](int code) { failures[p] = code; };
      ibv_cq* cq[2];
      ibv_qp* qp[2];
      std::vector<uint8_t> buf[2];
      ibv_mr* mr[2];
      for (int i = 0; i < 2; ++i) {
        cq[i] = api().createCq(d.ctx, 256, nullptr, nullptr, 0);
        ibv_qp_init_attr ia;
        std::memset(&ia, 0, sizeof(ia));
        ia.send_cq = cq[i];
        ia.recv_cq = cq[i];
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = kMsgs;
        ia.cap.max_recv_wr = kMsgs;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        qp[i] = api().createQp(d.pd, &ia);
        buf[i].assign(kMsg * kMsgs, static_cast<uint8_t>(i == 0 ? p + 1 : 0));
        mr[i] = api().regMr(d.pd, buf[i].data(), buf[i].size(), kIbvAccessAll);
        if (cq[i] == nullptr || qp[i] == nullptr || mr[i] == nullptr || toInit(qp[i]) != 0) return fail(1);
      }
      const QpInfo info[2] = {infoOf(d, qp[0], mr[0]), infoOf(d, qp[1], mr[1])};
      for (int i = 0; i < 2; ++i) {
        if (toRtr(qp[i], info[1 - i]) != 0 || toRts(qp[i]) != 0) return fail(2);
      }
      for (int m = 0; m < kMsgs; ++m) {
        if (postRecv(qp[1], m) != 0) return fail(3);
      }
      for (int m = 0; m < kMsgs; ++m) {
        if (postWrite(qp[0], mr[0], m * kMsg, kMsg, info[1], m * kMsg, m, true, m) != 0) return fail(4);
      }
      const auto sent = waitWc(cq[0], kMsgs);
      const auto got = waitWc(cq[1], kMsgs);
      if (sent.size() != static_cast<size_t>(kMsgs) || got.size() != static_cast<size_t>(kMsgs))
        return fail(5);
      for (int m = 0; m < kMsgs; ++m) {
        if (sent[m].status != IBV_WC_SUCCESS || got[m].status != IBV_WC_SUCCESS) return fail(6);
        if (ntohl(got[m].imm_data) != static_cast<uint32_t>(m) || got[m].wr_id != static_cast<uint64_t>(m)) {
          return fail(7);
        }
      }
      if (buf[0] != buf[1]) return fail(8);
      for (int i = 0; i < 2; ++i) {
        api().destroyQp(qp[i]);
        api().deregMr(mr[i]);
        api().destroyCq(cq[i]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int p = 0; p < kPairs; ++p) EXPECT_EQ(failures[p], 0) << "pair " << p;
  d.close();
}

// Destroying QPs while their traffic is in flight: no hang, no crash, and
// the device still works afterwards.
TEST(IbverbsSoftDevice, DestroyWithTrafficInFlight) {
  Device d;
  ASSERT_TRUE(d.open());
  std::vector<uint8_t> buf(1 << 20);
  ibv_mr* mr = api().regMr(d.pd, buf.data(), buf.size(), kIbvAccessAll);
  ASSERT_NE(mr, nullptr);
  for (int round = 0; round < 3; ++round) {
    ibv_qp* a = createQp(d);
    ibv_qp* b = createQp(d);
    ASSERT_EQ(toInit(a), 0);
    ASSERT_EQ(toInit(b), 0);
    const QpInfo ai = infoOf(d, a, mr), bi = infoOf(d, b, mr);
    ASSERT_EQ(toRtr(a, bi), 0);
    ASSERT_EQ(toRts(a), 0);
    ASSERT_EQ(toRtr(b, ai), 0);
    ASSERT_EQ(toRts(b), 0);
    for (int m = 0; m < 32; ++m) ASSERT_EQ(postWrite(a, mr, 0, 1 << 18, bi, 1 << 19, m, false, 0), 0);
    EXPECT_EQ(api().destroyQp(round % 2 == 0 ? a : b), 0);
    EXPECT_EQ(api().destroyQp(round % 2 == 0 ? b : a), 0);
  }
  ibv_wc wc[64];
  while (api().pollCq(d.cq, 64, wc) > 0) {
  }
  EXPECT_EQ(api().deregMr(mr), 0);
  d.close();
}

// --- two processes ---------------------------------------------------------------
bool writeAll(int fd, const void* p, size_t n) {
  return ::write(fd, p, n) == static_cast<ssize_t>(n);
}
bool readAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One side of a cross-process pair: device, a buffer, a QP connected to the
// QP described on `fd` (each side sends its QpInfo, then reads the other's).
struct Side {
  Device dev;
  std::vector<uint8_t> buf;
  ibv_mr* mr = nullptr;
  ibv_qp* qp = nullptr;
  QpInfo peer;

  bool setUp(int fd, size_t bytes) {
    if (!dev.open()) return false;
    buf.assign(bytes, 0);
    mr = api().regMr(dev.pd, buf.data(), bytes, kIbvAccessAll);
    qp = createQp(dev);
    if (mr == nullptr || qp == nullptr || toInit(qp) != 0) return false;
    const QpInfo mine = infoOf(dev, qp, mr);
    if (!writeAll(fd, &mine, sizeof(mine)) || !readAll(fd, &peer, sizeof(peer))) return false;
    return toRtr(qp, peer) == 0 && toRts(qp) == 0;
  }
  void tearDown() {
    if (qp != nullptr) api().destroyQp(qp);
    if (mr != nullptr) api().deregMr(mr);
    dev.close();
  }
};

// Forks a child running `child(fd)` (its return value is the exit status).
// With BRAID_SOFTVERBS_TEST_CHILD_NETNS=/var/run/netns/NAME the child runs in
// that network namespace (a manual cross-namespace check; both namespaces
// then need an interface named BRAID_SOFTVERBS_IFNAME).
template <typename F>
pid_t forkChild(int* parentFd, F&& child) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(sv[0]);
    if (const char* ns = std::getenv("BRAID_SOFTVERBS_TEST_CHILD_NETNS")) {
      const int nsFd = ::open(ns, O_RDONLY | O_CLOEXEC);
      if (nsFd < 0 || setns(nsFd, CLONE_NEWNET) != 0) _exit(99);
      ::close(nsFd);
    }
    const int rc = child(sv[1]);
    _exit(rc);
  }
  ::close(sv[1]);
  *parentFd = sv[0];
  return pid;
}

int exitStatus(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

constexpr size_t kBig = 4u << 20;
constexpr int kChunks = 8;

uint8_t pattern(size_t i) {
  return static_cast<uint8_t>((i * 2654435761u) >> 13);
}

TEST(IbverbsCrossProcess, WriteWithImmAndSendRecv) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    Side s;
    if (!s.setUp(cfd, kBig)) return 10;
    for (int i = 0; i < kChunks; ++i) {
      if (postRecv(s.qp, 1000 + i) != 0) return 11;
    }
    const char go = 'g';
    if (!writeAll(cfd, &go, 1)) return 12;
    const auto wcs = waitWc(s.dev.cq, kChunks);
    if (wcs.size() != static_cast<size_t>(kChunks)) return 13;
    for (int i = 0; i < kChunks; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.wr_id != 1000u + i ||
          ntohl(wc.imm_data) != static_cast<uint32_t>(i) || wc.byte_len != kBig / kChunks) {
        return 14;
      }
    }
    for (size_t i = 0; i < kBig; ++i) {
      if (s.buf[i] != pattern(i)) return 15;
    }
    // Reply with a SEND.
    std::memcpy(s.buf.data(), "all 4 MiB arrived", 17);
    ibv_sge sge{reinterpret_cast<uint64_t>(s.buf.data()), 17, s.mr->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 7;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (api().postSend(s.qp, &wr, &bad) != 0) return 16;
    const auto sent = waitWc(s.dev.cq, 1);
    if (sent.size() != 1 || sent[0].status != IBV_WC_SUCCESS) return 17;
    char done = 0;
    if (!readAll(cfd, &done, 1)) return 18;
    s.tearDown();
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, kBig));
  for (size_t i = 0; i < kBig; ++i) s.buf[i] = pattern(i);
  ASSERT_EQ(postRecv(s.qp, 99, s.mr, 0, 64), 0);
  char go = 0;
  ASSERT_TRUE(readAll(fd, &go, 1));
  const size_t chunk = kBig / kChunks;
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(postWrite(s.qp, s.mr, i * chunk, chunk, s.peer, i * chunk, i, true, i), 0);
  }
  const auto wcs = waitWc(s.dev.cq, kChunks + 1);
  ASSERT_EQ(wcs.size(), static_cast<size_t>(kChunks + 1));
  int writes = 0;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "status " << wc.status;
    if (wc.opcode == IBV_WC_RDMA_WRITE) {
      EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(writes));  // in order
      ++writes;
    } else {
      EXPECT_EQ(wc.opcode, IBV_WC_RECV);
      EXPECT_EQ(wc.byte_len, 17u);
    }
  }
  EXPECT_EQ(writes, kChunks);
  EXPECT_EQ(std::memcmp(s.buf.data(), "all 4 MiB arrived", 17), 0);
  const char done = 'd';
  ASSERT_TRUE(writeAll(fd, &done, 1));
  EXPECT_EQ(exitStatus(pid), 0);
  s.tearDown();
  ::close(fd);
}

TEST(IbverbsCrossProcess, BadRkeyIsRemoteAccessError) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    Side s;
    if (!s.setUp(cfd, 1 << 16)) return 10;
    const char ready = 'r';
    writeAll(cfd, &ready, 1);
    char done = 0;
    readAll(cfd, &done, 1);
    s.tearDown();
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, 1 << 16));
  // The error ends both QPs: the child must be in RTS before it comes.
  char ready = 0;
  ASSERT_TRUE(readAll(fd, &ready, 1));
  QpInfo wrong = s.peer;
  wrong.rkey += 1;
  ASSERT_EQ(postWrite(s.qp, s.mr, 0, 1024, wrong, 0, 1, false, 0), 0);
  ASSERT_EQ(postWrite(s.qp, s.mr, 0, 1024, s.peer, 0, 2, false, 0), 0);
  const auto wcs = waitWc(s.dev.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(stateOf(s.qp), IBV_QPS_ERR);
  const char done = 'd';
  ASSERT_TRUE(writeAll(fd, &done, 1));
  EXPECT_EQ(exitStatus(pid), 0);
  s.tearDown();
  ::close(fd);
}

TEST(IbverbsCrossProcess, PeerKilled) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    Side s;
    if (!s.setUp(cfd, 1 << 16)) return 10;
    const char ready = 'r';
    writeAll(cfd, &ready, 1);
    pause();  // no receive posted: the parent's SEND waits (RNR) until we die
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, 1 << 16));
  char ready = 0;
  ASSERT_TRUE(readAll(fd, &ready, 1));
  ASSERT_EQ(postRecv(s.qp, 20, s.mr, 0, 64), 0);
  ibv_sge sge{reinterpret_cast<uint64_t>(s.buf.data()), 64, s.mr->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = 10;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(api().postSend(s.qp, &wr, &bad), 0);
  EXPECT_TRUE(waitWc(s.dev.cq, 1, 0.3).empty());  // held by the peer (RNR)
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(exitStatus(pid), 128 + SIGKILL);
  const auto wcs = waitWc(s.dev.cq, 2, 15);  // bound: the QP timeout, at most 10 s
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, wc.wr_id == 10 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR) << "wr " << wc.wr_id;
  }
  EXPECT_EQ(stateOf(s.qp), IBV_QPS_ERR);
  s.tearDown();
  ::close(fd);
}

// A peer that stops answering without closing anything (as behind a link
// that went down): the silence check ends the QP within its timeout
// (timeout 14, retry_cnt 7: the 2 s floor).
TEST(IbverbsCrossProcess, PeerStopsResponding) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    Side s;
    if (!s.setUp(cfd, 1 << 16)) return 10;
    const char ready = 'r';
    writeAll(cfd, &ready, 1);
    pause();
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, 1 << 16));
  char ready = 0;
  ASSERT_TRUE(readAll(fd, &ready, 1));
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  int st = 0;  // stopped for sure (every thread) before the write goes out
  ASSERT_EQ(waitpid(pid, &st, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(st));
  ASSERT_EQ(postWrite(s.qp, s.mr, 0, 1024, s.peer, 0, 5, false, 0), 0);
  const auto wcs = waitWc(s.dev.cq, 1, 20);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 5u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(stateOf(s.qp), IBV_QPS_ERR);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(exitStatus(pid), 128 + SIGKILL);
  s.tearDown();
  ::close(fd);
}

// BRAID_SOFTVERBS_FAIL_AFTER in one process (as a multi-node fault test sets
// it for one rank): its third write fails, and the other process's QP goes
// to ERR too (its receive flushes), as behind a failed link.
TEST(IbverbsCrossProcess, FailAfterReachesThePeer) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    setenv("BRAID_SOFTVERBS_FAIL_AFTER", "2", 1);
    softverbs::resetFaultsForTesting();
    Side s;
    if (!s.setUp(cfd, 1 << 16)) return 10;
    char go = 0;  // the parent is in RTS with its receive posted
    if (!readAll(cfd, &go, 1)) return 15;
    for (int i = 1; i <= 2; ++i) {
      if (postWrite(s.qp, s.mr, 0, 1024, s.peer, 0, i, false, 0) != 0) return 11;
    }
    auto wcs = waitWc(s.dev.cq, 2);
    if (wcs.size() != 2 || wcs[0].status != IBV_WC_SUCCESS || wcs[1].status != IBV_WC_SUCCESS) return 12;
    if (postWrite(s.qp, s.mr, 0, 1024, s.peer, 0, 3, false, 0) != 0) return 13;
    wcs = waitWc(s.dev.cq, 1);
    if (wcs.size() != 1 || wcs[0].wr_id != 3 || wcs[0].status != IBV_WC_RETRY_EXC_ERR) return 14;
    char done = 0;
    readAll(cfd, &done, 1);
    s.tearDown();
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, 1 << 16));
  ASSERT_EQ(postRecv(s.qp, 40, s.mr, 0, 64), 0);
  const char go = 'g';
  ASSERT_TRUE(writeAll(fd, &go, 1));
  const auto wcs = waitWc(s.dev.cq, 1, 15);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 40u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(stateOf(s.qp), IBV_QPS_ERR);
  const char done = 'd';
  ASSERT_TRUE(writeAll(fd, &done, 1));
  EXPECT_EQ(exitStatus(pid), 0);
  s.tearDown();
  ::close(fd);
}

// The way a multi-node rank gets the device: BRAID_IB_VERBS_TABLE naming the
// library, read by Braid's own verbsApi() (in a child: the choice is made once).
TEST(IbverbsCrossProcess, LoadedThroughBraidIbVerbsTable) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int) {
    setenv("BRAID_IB_VERBS_TABLE", BRAID_SOFTVERBS_LIBRARY, 1);
    setVerbsApiForTesting(nullptr);
    const VerbsApi* t = nullptr;
    if (!verbsApi(&t).ok()) return 10;
    if (t != braid_verbs_table() || std::strcmp(t->origin, "software verbs device") != 0) return 11;
    std::vector<RdmaPortInfo> ports;
    std::vector<std::string> notes;
    if (!listRdmaPorts(*t, &ports, &notes).ok() || ports.size() != 1 || ports[0].device != "softroce0")
      return 12;
    return 0;
  });
  ASSERT_GT(pid, 0);
  EXPECT_EQ(exitStatus(pid), 0);
  ::close(fd);
}

TEST(IbverbsCrossProcess, PeerDestroysQp) {
  int fd = -1;
  const pid_t pid = forkChild(&fd, [](int cfd) {
    Side s;
    if (!s.setUp(cfd, 1 << 16)) return 10;
    char go = 0;
    readAll(cfd, &go, 1);
    s.tearDown();  // a clean destroy: the parent's QP must notice
    const char done = 'd';
    writeAll(cfd, &done, 1);
    readAll(cfd, &go, 1);
    return 0;
  });
  ASSERT_GT(pid, 0);
  Side s;
  ASSERT_TRUE(s.setUp(fd, 1 << 16));
  ASSERT_EQ(postRecv(s.qp, 30, s.mr, 0, 64), 0);
  const char go = 'g';
  ASSERT_TRUE(writeAll(fd, &go, 1));
  char done = 0;
  ASSERT_TRUE(readAll(fd, &done, 1));
  const auto wcs = waitWc(s.dev.cq, 1, 15);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 30u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(stateOf(s.qp), IBV_QPS_ERR);
  ASSERT_TRUE(writeAll(fd, &go, 1));
  EXPECT_EQ(exitStatus(pid), 0);
  s.tearDown();
  ::close(fd);
}

}  // namespace
}  // namespace braid
