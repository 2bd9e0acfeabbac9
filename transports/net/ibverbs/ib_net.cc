#include "transports/net/ibverbs/ib_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "platform/socket.h"
#include "transports/net/ibverbs/gid.h"
#include "transports/net/ibverbs/ib_config.h"
#include "transports/net/ibverbs/verbs_api.h"
#include "transports/net/socket/socket_net.h"
#include "util/log.h"

namespace braid {
namespace {

constexpr uint32_t kHandleMagic = 0x42494248u;  // "BIBH"
constexpr uint32_t kHelloMagic = 0x4249484cu;   // "BIHL"
constexpr uint32_t kReplyMagic = 0x42495250u;   // "BIRP"
constexpr uint32_t kAckMagic = 0x4249414bu;     // "BIAK"
constexpr int kMaxQps = 128;                    // NCCL_IB_QPS_PER_CONNECTION's range
constexpr int kSlots = kNetMaxRequests;
constexpr int kSendDepth = 4 * kSlots + 8;  // per queue pair: parts, records, FIFO entries, the close mark
constexpr int kRecvDepth = 2 * kSlots + 8;  // receives posted ahead per queue pair (one per immediate)
constexpr uint32_t kCloseBit = 0x80000000u;
constexpr uint32_t kSeqMask = 0x7fffffffu;
constexpr size_t kMinPart = 64 * 1024;
constexpr double kHelloTimeoutSec = 5;
constexpr double kConnectTimeoutSec = 60;
constexpr size_t kMrCacheEntries = 64;
constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// wr_id: the kind in the top byte, a sequence number or queue pair below.
constexpr uint64_t kWrData = 1ull << 56, kWrFifo = 2ull << 56, kWrClose = 3ull << 56, kWrRecv = 4ull << 56;
constexpr uint64_t kWrKindMask = 0xffull << 56;

// A clear-to-send entry: written by the receiver into the sender's FIFO.
struct FifoEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t seq1;  // sequence + 1 (0: never written)
  uint64_t pad;
};
// What the sender tells the receiver about one message (its record slot).
struct Record {
  uint64_t size;  // the true size (larger than the buffer: nothing was written)
  uint32_t tag;
  uint32_t seq1;
};
// Each comm's registered control memory; the peer writes the first part.
struct alignas(64) Ctrl {
  FifoEntry fifo[kSlots];     // sender: written by the receiver
  Record records[kSlots];     // receiver: written by the sender
  uint64_t closed;            // receiver: the sender's close mark (its next sequence + 1)
  FifoEntry fifoOut[kSlots];  // receiver: sources of its FIFO writes
  Record recordOut[kSlots];   // sender: sources of its record writes
  uint64_t closeOut;          // sender: source of the close mark
};

struct QpWire {
  uint32_t qpn;
  uint32_t psn;
};
// What each side tells the other over TCP (hello, reply).
struct ConnInfo {
  uint32_t magic;
  uint32_t nqps;
  uint64_t id;
  uint64_t secret;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t port;
  uint8_t mtu;  // enum ibv_mtu (active MTU of the port)
  uint32_t pad;
  uint64_t ctrlAddr;
  uint32_t ctrlRkey;
  uint32_t pad2;
  QpWire qps[kMaxQps];
};

struct HandleData {
  uint32_t magic;
  uint32_t pad;
  uint64_t id;
  uint64_t secret;
  char address[96];
};
static_assert(sizeof(HandleData) <= kNetHandleBytes, "handle too large");

uint64_t randomU64() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32));
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

int partCount(size_t size, int n) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(n), size / kMinPart)));
}
void partRange(size_t size, int parts, int i, size_t* lo, size_t* len) {
  size_t per = (size + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  per = (per + 4095) / 4096 * 4096;
  *lo = std::min(size, per * static_cast<size_t>(i));
  *len = std::min(size, *lo + per) - *lo;
}

const char* wcStatusName(int status) {
  static const char* const kNames[] = {"SUCCESS",
                                       "LOC_LEN_ERR",
                                       "LOC_QP_OP_ERR",
                                       "LOC_EEC_OP_ERR",
                                       "LOC_PROT_ERR",
                                       "WR_FLUSH_ERR",
                                       "MW_BIND_ERR",
                                       "BAD_RESP_ERR",
                                       "LOC_ACCESS_ERR",
                                       "REM_INV_REQ_ERR",
                                       "REM_ACCESS_ERR",
                                       "REM_OP_ERR",
                                       "RETRY_EXC_ERR",
                                       "RNR_RETRY_EXC_ERR",
                                       "LOC_RDD_VIOL_ERR",
                                       "REM_INV_RD_REQ_ERR",
                                       "REM_ABORT_ERR",
                                       "INV_EECN_ERR",
                                       "INV_EEC_STATE_ERR",
                                       "FATAL_ERR",
                                       "RESP_TIMEOUT_ERR",
                                       "GENERAL_ERR",
                                       "TM_ERR",
                                       "TM_RNDV_INCOMPLETE"};
  if (status >= 0 && status < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[status];
  return "UNKNOWN";
}

// ibv_port_attr's active_speed (per lane) and active_width (lanes) in Mbps:
// SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR 100, XDR 200
// Gbps per lane; widths 1x, 4x, 8x, 12x, 2x. Unknown values count as 0.
int portSpeedMbps(int activeSpeed, int activeWidth) {
  int lane = 0;
  switch (activeSpeed) {
    case 1: lane = 2500; break;
    case 2: lane = 5000; break;
    case 4: lane = 10000; break;
    case 8: lane = 10000; break;
    case 16: lane = 14000; break;
    case 32: lane = 25000; break;
    case 64: lane = 50000; break;
    case 128: lane = 100000; break;
    case 256: lane = 200000; break;
    default: lane = 0;
  }
  int lanes = 0;
  switch (activeWidth) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: lanes = 0;
  }
  return lane * lanes;
}

struct IbDevice {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::string name;  // "mlx5_0:1"
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr attr{};
  bool infiniband = false;
  int gidIndex = 0;
  uint8_t gid[16] = {};
  std::string gidType;
  std::string netdev;
  int speedMbps = 0;
};

std::string gidAddress(const uint8_t raw[16]) {
  char text[INET6_ADDRSTRLEN] = {};
  static const uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(raw, kV4Prefix, 12) == 0) {
    inet_ntop(AF_INET, raw + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, raw, text, sizeof(text));
  }
  return text;
}

}  // namespace

// ------------------------------------------------------------ the connection
//
// net.h's NetSendComm, NetRecvComm, NetListenComm and NetRequest are opaque
// handles; the socket Net defines those classes for itself. This Net's
// objects have their own types (IbSendComm, ...), converted with
// reinterpret_cast at the Net interface only: two definitions of one class
// in two files would break the one-definition rule (the linker merged their
// destructors, and closing a verbs comm ran the socket Net's).

class IbComm;

class IbRequest {
 public:
  IbComm* comm = nullptr;
  bool used = false;
  bool isSend = false;
  bool done = false;
  uint32_t seq = 0;
  char* data = nullptr;
  size_t size = 0;  // send: the message; receive: the buffer, then the message
  uint32_t tag = 0;
  ibv_mr* mr = nullptr;
  // send
  bool posted = false;    // the writes are posted
  bool overflow = false;  // the receiver's buffer was too small: only the record went
  size_t bufferSize = 0;
  int wrsLeft = 0;
  // receive
  bool recordSeen = false;
  int partsSeen = 0;
  int partsWanted = 0;
};

namespace {

struct MrEntry {
  uintptr_t lo = 0, hi = 0;
  ibv_mr* mr = nullptr;
  int explicitRefs = 0;
  uint64_t lastUse = 0;
};

}  // namespace

class IbComm {
 public:
  IbComm(const VerbsApi* api, IbDevice* dev, bool isSend) : api_(api), dev_(dev), isSend_(isSend) {
    std::fill(std::begin(ctsSeen_), std::end(ctsSeen_), ~0u);
  }
  ~IbComm() { destroy(); }

  // Creates the CQ, the queue pairs (INIT) and the control memory.
  Status create(int nqps) {
    const int depth = nqps * (kSendDepth + kRecvDepth) + 16;
    cq_ = api_->createCq(dev_->ctx, depth, nullptr, nullptr, 0);
    if (cq_ == nullptr) return errnoError(strCat("ibv_create_cq on ", dev_->name), errno);
    void* mem = nullptr;
    if (posix_memalign(&mem, 4096, sizeof(Ctrl)) != 0)
      return systemError("out of memory for verbs control data");
    std::memset(mem, 0, sizeof(Ctrl));
    ctrl_ = static_cast<Ctrl*>(mem);
    ctrlMr_ = api_->regMr(dev_->pd, ctrl_, sizeof(Ctrl), kMrAccess);
    if (ctrlMr_ == nullptr) return errnoError(strCat("ibv_reg_mr (control data) on ", dev_->name), errno);
    for (int q = 0; q < nqps; ++q) {
      ibv_qp_init_attr init;
      std::memset(&init, 0, sizeof(init));
      init.send_cq = cq_;
      init.recv_cq = cq_;
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = kSendDepth;
      init.cap.max_recv_wr = kRecvDepth;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      ibv_qp* qp = api_->createQp(dev_->pd, &init);
      if (qp == nullptr) return errnoError(strCat("ibv_create_qp on ", dev_->name), errno);
      qps_.push_back(qp);
      psns_.push_back(static_cast<uint32_t>(randomU64() & 0xffffff));
      ibv_qp_attr a;
      std::memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_INIT;
      a.pkey_index = 0;
      a.port_num = static_cast<uint8_t>(dev_->port);
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      if (api_->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        return errnoError(strCat("ibv_modify_qp(INIT) on ", dev_->name), errno);
      }
    }
    return okStatus();
  }

  void fillInfo(ConnInfo* info) const {
    info->nqps = static_cast<uint32_t>(qps_.size());
    std::memcpy(info->gid, dev_->gid, 16);
    info->lid = dev_->attr.lid;
    info->port = static_cast<uint8_t>(dev_->port);
    info->mtu = static_cast<uint8_t>(dev_->attr.active_mtu);
    info->ctrlAddr = reinterpret_cast<uintptr_t>(ctrl_);
    info->ctrlRkey = ctrlMr_->rkey;
    for (size_t q = 0; q < qps_.size(); ++q) info->qps[q] = {qps_[q]->qp_num, psns_[q]};
  }

  // INIT -> RTR -> RTS against the peer's queue pairs.
  Status connectQps(const ConnInfo& remote, const IbSettings& s) {
    if (remote.nqps != qps_.size()) {
      return remoteError("the peer has ", remote.nqps, " queue pairs per connection where this rank has ",
                         qps_.size(), " (NCCL_IB_QPS_PER_CONNECTION differs)");
    }
    remoteCtrl_ = remote.ctrlAddr;
    remoteRkey_ = remote.ctrlRkey;
    std::memcpy(remoteGid_, remote.gid, 16);
    const int mtu = std::min<int>(dev_->attr.active_mtu, remote.mtu);
    for (size_t q = 0; q < qps_.size(); ++q) {
      ibv_qp_attr a;
      std::memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = static_cast<ibv_mtu>(mtu);
      a.dest_qp_num = remote.qps[q].qpn;
      a.rq_psn = remote.qps[q].psn;
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 12;
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
      a.ah_attr.grh.flow_label = 0;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_->gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(s.trafficClass);
      a.ah_attr.dlid = remote.lid;
      a.ah_attr.sl = static_cast<uint8_t>(s.serviceLevel);
      a.ah_attr.src_path_bits = 0;
      a.ah_attr.port_num = static_cast<uint8_t>(dev_->port);
      if (api_->modifyQp(qps_[q], &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        return errnoError(strCat("ibv_modify_qp(RTR) on ", dev_->name), errno);
      }
      std::memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_RTS;
      a.timeout = static_cast<uint8_t>(s.timeout);
      a.retry_cnt = static_cast<uint8_t>(s.retryCount);
      a.rnr_retry = 7;
      a.sq_psn = psns_[q];
      a.max_rd_atomic = 1;
      if (api_->modifyQp(qps_[q], &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        return errnoError(strCat("ibv_modify_qp(RTS) on ", dev_->name), errno);
      }
    }
    return okStatus();
  }

  // Both ends post their receives ahead (the receiver for the records and
  // parts, the sender for the clear-to-send entries), so a write with
  // immediate never finds an empty receive queue.
  Status postReceives() {
    for (size_t q = 0; q < qps_.size(); ++q) {
      for (int i = 0; i < kRecvDepth; ++i) BRAID_CHECK(postRecv(static_cast<int>(q)));
    }
    return okStatus();
  }

  void setLink(Socket sock, std::string peer) {
    sock_ = std::move(sock);
    peer_ = strCat(peer, " (GID ", gidAddress(remoteGid_), ")");
    tuneNetLinkSocket(sock_.fd());
  }
  const std::string& peer() const { return peer_; }

  // -------------------------------------------------------------- data

  Status post(bool send, char* data, size_t size, uint32_t tag, void* mhandle, IbRequest** out) {
    *out = nullptr;
    if (!error_.ok()) return error_;
    IbRequest* r = &reqs_[seq_ % kSlots];
    if (r->used) return okStatus();
    *r = IbRequest();
    r->comm = this;
    r->used = true;
    r->isSend = send;
    r->seq = seq_;
    r->data = data;
    r->size = size;
    r->tag = tag;
    if (size > 0) {
      Status st = mhandle != nullptr ? checkMr(static_cast<MrEntry*>(mhandle), data, size, &r->mr)
                                     : cachedMr(data, size, &r->mr);
      if (!st.ok()) {
        r->used = false;
        return st;
      }
    }
    ++seq_;
    *out = r;
    if (send) {
      progressSends();
      return error_;
    }
    if (closed_ && static_cast<int32_t>(r->seq - closedAt_) >= 0) {
      r->done = true;
      r->size = 0;
      r->tag = kNetClosedTag;
      return okStatus();
    }
    // Clear to send: where the sender writes this message.
    const int slot = static_cast<int>(r->seq % kSlots);
    FifoEntry& e = ctrl_->fifoOut[slot];
    e.addr = reinterpret_cast<uintptr_t>(data);
    e.size = size;
    e.rkey = r->mr != nullptr ? r->mr->rkey : 0;
    e.seq1 = r->seq + 1;
    e.pad = 0;
    Status st =
        write(0, &e, sizeof(e), ctrlMr_->lkey, remoteCtrl_ + offsetof(Ctrl, fifo) + slot * sizeof(FifoEntry),
              remoteRkey_, true, r->seq & kSeqMask, kWrFifo | r->seq);
    if (!st.ok()) fail(std::move(st));
    return error_;
  }

  // A request that completed is reported done even if the comm failed
  // after it (its bytes moved); any other request of a failed comm fails.
  Status test(IbRequest* r, bool* done, size_t* size, uint32_t* tag) {
    if (error_.ok()) poll();
    if (error_.ok() && isSend_) progressSends();
    if (error_.ok() && !r->done) checkLink();
    if (error_.ok() && !r->done && receiverGone_) {
      fail(remoteError("the receiver's queue pairs went away (it died or closed the connection)"));
    }
    *done = r->done;
    if (r->done) {
      if (size != nullptr) *size = r->size;
      if (tag != nullptr) *tag = r->tag;
      r->used = false;
      return okStatus();
    }
    return error_;
  }

  // An orderly close: the close mark, so the receiver tells a closed comm
  // from a dead process. Best effort, bounded.
  void sayGoodbye() {
    if (!error_.ok() || qps_.empty() || remoteRkey_ == 0) return;
    for (const IbRequest& r : reqs_) {
      if (r.used && !r.done) return;
    }
    ctrl_->closeOut = static_cast<uint64_t>(seq_) + 1;
    Status st =
        write(0, &ctrl_->closeOut, sizeof(uint64_t), ctrlMr_->lkey, remoteCtrl_ + offsetof(Ctrl, closed),
              remoteRkey_, true, kCloseBit | (seq_ & kSeqMask), kWrClose);
    if (!st.ok()) return;
    const Deadline deadline = deadlineIn(0.5);
    while (error_.ok() && !closeDone_ && Clock::now() < deadline) poll();
  }

  // MRs the caller registers (refcounted per range).
  Status regMr(void* data, size_t size, void** mhandle) {
    if (data == nullptr && size > 0) return invalidArgument("registering a null buffer");
    ibv_mr* mr = nullptr;
    MrEntry* e = nullptr;
    BRAID_CHECK(lookup(data, std::max<size_t>(size, 1), &mr, &e));
    ++e->explicitRefs;
    *mhandle = e;
    return okStatus();
  }
  Status deregMr(void* mhandle) {
    auto* e = static_cast<MrEntry*>(mhandle);
    for (size_t i = 0; i < mrs_.size(); ++i) {
      if (mrs_[i].get() != e) continue;
      if (--e->explicitRefs <= 0) {
        api_->deregMr(e->mr);
        mrs_.erase(mrs_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return okStatus();
    }
    return invalidArgument("deregistering an unknown verbs memory handle");
  }

 private:
  Status postRecv(int q) {
    ibv_recv_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = kWrRecv | static_cast<uint64_t>(q);
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    const int rc = api_->postRecv(qps_[static_cast<size_t>(q)], &wr, &bad);
    if (rc != 0) return errnoError(strCat("ibv_post_recv on ", dev_->name), rc);
    return okStatus();
  }

  Status write(int q, const void* src, size_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, bool withImm,
               uint32_t imm, uint64_t wrId) {
    ibv_sge sge;
    sge.addr = reinterpret_cast<uintptr_t>(src);
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = lkey;
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = wrId;
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    const int rc = api_->postSend(qps_[static_cast<size_t>(q)], &wr, &bad);
    if (rc != 0) return errnoError(strCat("ibv_post_send on ", dev_->name), rc);
    return okStatus();
  }

  // Sends whose clear-to-send entry arrived are written now.
  void progressSends() {
    for (uint32_t k = 0; k < static_cast<uint32_t>(kSlots) && error_.ok(); ++k) {
      IbRequest* r = &reqs_[(sendNext_ + k) % kSlots];
      if (!r->used || r->posted || r->seq != sendNext_ + k) break;  // in order
      // The entry's write-with-immediate completed: the entry is in memory.
      if (ctsSeen_[r->seq % kSlots] != (r->seq & kSeqMask)) break;
      const FifoEntry& fe = ctrl_->fifo[r->seq % kSlots];
      if (fe.seq1 != r->seq + 1) {
        fail(remoteError("a garbled clear-to-send entry arrived (sequence ", fe.seq1, ", expected ",
                         r->seq + 1, ")"));
        return;
      }
      const uint64_t addr = fe.addr, bufSize = fe.size;
      const uint32_t rkey = fe.rkey;
      r->posted = true;
      r->bufferSize = bufSize;
      const int slot = static_cast<int>(r->seq % kSlots);
      const uint64_t wrId = kWrData | r->seq;
      Status st;
      if (r->size > bufSize) {
        r->overflow = true;  // nothing is written past the buffer: only the record goes
      } else {
        const int nq = static_cast<int>(qps_.size());
        const int parts = partCount(r->size, nq);
        for (int i = parts - 1; i >= 0 && st.ok(); --i) {
          size_t lo, len;
          partRange(r->size, parts, i, &lo, &len);
          if (len == 0) continue;
          st = write(i, r->data + lo, len, r->mr->lkey, addr + lo, rkey, i > 0, r->seq & kSeqMask, wrId);
          if (st.ok()) ++r->wrsLeft;
        }
      }
      if (st.ok()) {
        Record& rec = ctrl_->recordOut[slot];
        rec.size = r->size;
        rec.tag = r->tag;
        rec.seq1 = r->seq + 1;
        st = write(0, &rec, sizeof(rec), ctrlMr_->lkey,
                   remoteCtrl_ + offsetof(Ctrl, records) + slot * sizeof(Record), remoteRkey_, true,
                   r->seq & kSeqMask, wrId);
        if (st.ok()) ++r->wrsLeft;
      }
      if (!st.ok()) fail(std::move(st));
    }
    while (reqs_[sendNext_ % kSlots].used && reqs_[sendNext_ % kSlots].seq == sendNext_ &&
           reqs_[sendNext_ % kSlots].posted) {
      ++sendNext_;
    }
  }

  void poll() {
    ibv_wc wc[16];
    while (error_.ok()) {
      const int n = api_->pollCq(cq_, 16, wc);
      if (n < 0) {
        fail(systemError("ibv_poll_cq on ", dev_->name, " failed"));
        return;
      }
      if (n == 0) return;
      for (int i = 0; i < n && error_.ok(); ++i) complete(wc[i]);
    }
  }

  void complete(const ibv_wc& wc) {
    const uint64_t kind = wc.wr_id & kWrKindMask;
    // After the sender's close mark its queue pairs go away: the receives
    // still posted may be flushed; nothing more arrives.
    if (closed_ && wc.status != IBV_WC_SUCCESS) return;
    // The sender's receives (for clear-to-send entries) are flushed when the
    // receiver's queue pairs go away, as when it closes after its last
    // message: an error only for a send still waiting (test()).
    if (isSend_ && kind == kWrRecv && wc.status == IBV_WC_WR_FLUSH_ERR) {
      receiverGone_ = true;
      return;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      const char* what = kind == kWrRecv    ? "a receive"
                         : kind == kWrFifo  ? "a clear-to-send write"
                         : kind == kWrClose ? "the close mark"
                                            : "an RDMA write";
      fail(remoteError("work completion error ", wcStatusName(wc.status), " (status ", wc.status,
                       ", vendor error 0x", std::hex, wc.vendor_err, std::dec, ") on ", what,
                       " of queue pair ", wc.qp_num, " on ", dev_->name));
      return;
    }
    if (kind == kWrClose) {
      closeDone_ = true;
      return;
    }
    if (kind == kWrFifo) return;
    if (kind == kWrData) {
      IbRequest* r = &reqs_[(wc.wr_id & 0xffffffffu) % kSlots];
      if (!r->used || r->seq != static_cast<uint32_t>(wc.wr_id & 0xffffffffu)) return;
      if (--r->wrsLeft == 0) {
        if (r->overflow) {
          fail(remoteError(
              "a message of ", r->size, " bytes does not fit the peer's ", r->bufferSize,
              "-byte receive buffer (the ranks disagree on the connector layout); nothing was written"));
          return;
        }
        r->done = true;
      }
      return;
    }
    if (kind != kWrRecv) return;
    const int q = static_cast<int>(wc.wr_id & 0xffff);
    Status st = postRecv(q);
    if (!st.ok()) {
      fail(std::move(st));
      return;
    }
    const uint32_t imm = ntohl(wc.imm_data);
    if (isSend_) {  // a clear-to-send entry landed in the FIFO
      ctsSeen_[imm % kSlots] = imm & kSeqMask;
      return;
    }
    if ((imm & kCloseBit) != 0) {
      const volatile uint64_t* closed = &ctrl_->closed;
      std::atomic_thread_fence(std::memory_order_acquire);
      closedAt_ = static_cast<uint32_t>(*closed - 1);
      closed_ = true;
      BRAID_INFO(kLogNet, "NET/IB: %s closed the connection", peer_.c_str());
      for (IbRequest& r : reqs_) {
        if (r.used && !r.isSend && !r.done && static_cast<int32_t>(r.seq - closedAt_) >= 0) {
          r.done = true;
          r.size = 0;
          r.tag = kNetClosedTag;
        }
      }
      return;
    }
    IbRequest* r = &reqs_[imm % kSlots];
    if (!r->used || r->isSend || r->done || (r->seq & kSeqMask) != imm) {
      fail(remoteError("an RDMA write with immediate ", imm, " matches no posted receive"));
      return;
    }
    if (q == 0) {
      std::atomic_thread_fence(std::memory_order_acquire);
      const volatile Record* vr = &ctrl_->records[imm % kSlots];
      const uint64_t size = vr->size;
      const uint32_t tag = vr->tag, seq1 = vr->seq1;
      if (seq1 != r->seq + 1) {
        fail(remoteError("a garbled record arrived (sequence ", seq1, ", expected ", r->seq + 1, ")"));
        return;
      }
      if (size > r->size) {
        fail(remoteError("a message of ", size, " bytes arrived where ", r->size,
                         " were posted (the ranks disagree on the connector layout); nothing was written"));
        return;
      }
      r->recordSeen = true;
      r->size = size;
      r->tag = tag;
      r->partsWanted = partCount(size, static_cast<int>(qps_.size())) - 1;
    } else {
      ++r->partsSeen;
    }
    if (r->recordSeen && r->partsSeen >= r->partsWanted) r->done = true;
  }

  // The TCP stream is the liveness channel: EOF or a reset means the peer's
  // process is gone (or its link: keepalive and TCP_USER_TIMEOUT).
  void checkLink() {
    const Clock::time_point now = Clock::now();
    if (now - lastLinkCheck_ < std::chrono::milliseconds(5)) return;
    lastLinkCheck_ = now;
    char c;
    const ssize_t n = ::recv(sock_.fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return;
    const int err = errno;
    // Completions the peer caused before it went (a close mark, the last
    // message) may still be on their way into the CQ: keep polling a moment.
    if (linkLostAt_ == Clock::time_point{}) linkLostAt_ = now;
    poll();
    if (!error_.ok() || closed_ || now - linkLostAt_ < std::chrono::milliseconds(100)) return;
    if (n == 0) {
      fail(remoteError("the peer closed the connection (its process died or closed the communicator)"));
    } else if (err == ETIMEDOUT) {
      fail(remoteError("the link timed out (no answer within NET_LINK_TIMEOUT)"));
    } else {
      fail(remoteError("the peer's connection failed: ", std::strerror(err)));
    }
  }

  void fail(Status s) {
    if (!error_.ok()) return;
    error_ = s.withContext(strCat(isSend_ ? "sending to " : "receiving from ", peer_));
    BRAID_INFO(kLogNet, "NET/IB: %s", error_.message().c_str());
  }

  Status checkMr(MrEntry* e, const char* data, size_t size, ibv_mr** out) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(data);
    if (a < e->lo || a + size > e->hi) {
      return invalidArgument("a verbs buffer outside its memory handle's registered range");
    }
    *out = e->mr;
    return okStatus();
  }

  Status cachedMr(const char* data, size_t size, ibv_mr** out) {
    MrEntry* e = nullptr;
    return lookup(data, size, out, &e);
  }

  // The registration cache: a hit reuses the entry; a miss registers the
  // page-aligned range, evicting the least recently used unreferenced entry
  // beyond kMrCacheEntries.
  Status lookup(const void* data, size_t size, ibv_mr** out, MrEntry** entry) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(data);
    ++useClock_;
    for (auto& e : mrs_) {
      if (a >= e->lo && a + size <= e->hi) {
        e->lastUse = useClock_;
        *out = e->mr;
        *entry = e.get();
        return okStatus();
      }
    }
    const uintptr_t page = 4096;
    const uintptr_t lo = a / page * page, hi = (a + size + page - 1) / page * page;
    if (mrs_.size() >= kMrCacheEntries) {
      size_t victim = mrs_.size();
      for (size_t i = 0; i < mrs_.size(); ++i) {
        if (mrs_[i]->explicitRefs > 0 || inFlight(mrs_[i]->mr)) continue;
        if (victim == mrs_.size() || mrs_[i]->lastUse < mrs_[victim]->lastUse) victim = i;
      }
      if (victim < mrs_.size()) {
        api_->deregMr(mrs_[victim]->mr);
        mrs_.erase(mrs_.begin() + static_cast<std::ptrdiff_t>(victim));
      }
    }
    ibv_mr* mr = api_->regMr(dev_->pd, reinterpret_cast<void*>(lo), hi - lo, kMrAccess);
    if (mr == nullptr) {
      return errnoError(
          strCat("ibv_reg_mr of ", hi - lo, " bytes at 0x", std::hex, lo, std::dec, " on ", dev_->name),
          errno);
    }
    auto e = std::make_unique<MrEntry>();
    e->lo = lo;
    e->hi = hi;
    e->mr = mr;
    e->lastUse = useClock_;
    *out = mr;
    *entry = e.get();
    mrs_.push_back(std::move(e));
    return okStatus();
  }
  bool inFlight(const ibv_mr* mr) const {
    for (const IbRequest& r : reqs_) {
      if (r.used && r.mr == mr) return true;
    }
    return false;
  }

  void destroy() {
    for (ibv_qp* qp : qps_) api_->destroyQp(qp);
    qps_.clear();
    if (cq_ != nullptr) api_->destroyCq(cq_);
    cq_ = nullptr;
    for (auto& e : mrs_) api_->deregMr(e->mr);
    mrs_.clear();
    if (ctrlMr_ != nullptr) api_->deregMr(ctrlMr_);
    ctrlMr_ = nullptr;
    std::free(ctrl_);
    ctrl_ = nullptr;
  }

  const VerbsApi* api_;
  IbDevice* dev_;
  const bool isSend_;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psns_;
  Ctrl* ctrl_ = nullptr;
  ibv_mr* ctrlMr_ = nullptr;
  uint64_t remoteCtrl_ = 0;
  uint32_t remoteRkey_ = 0;
  uint8_t remoteGid_[16] = {};
  Socket sock_;
  std::string peer_ = "a peer";
  Clock::time_point lastLinkCheck_{};
  Clock::time_point linkLostAt_{};  // when the liveness stream first reported the peer gone
  IbRequest reqs_[kSlots];
  uint32_t seq_ = 0;       // the next request's sequence
  uint32_t sendNext_ = 0;  // sender: the first sequence not yet written
  // sender: per FIFO slot, the sequence (31 bits) of the last entry whose
  // write-with-immediate completed here (~0: none yet)
  uint32_t ctsSeen_[kSlots];
  Status error_;
  bool closed_ = false;  // receiver: the sender's close mark arrived
  uint32_t closedAt_ = 0;
  bool closeDone_ = false;
  bool receiverGone_ = false;  // sender: its clear-to-send receives were flushed
  std::vector<std::unique_ptr<MrEntry>> mrs_;
  uint64_t useClock_ = 0;
};

class IbSendComm : public IbComm {
  using IbComm::IbComm;
};
class IbRecvComm : public IbComm {
  using IbComm::IbComm;
};

class IbListenComm {
 public:
  int dev = 0;
  uint64_t id = 0;
  uint64_t secret = 0;
};

// ------------------------------------------------------------ the Net

namespace {

class IbNet final : public Net {
 public:
  ~IbNet() override {
    ibv_context* last = nullptr;
    for (auto& d : devs_) {
      if (d->ctx == last) continue;
      last = d->ctx;
      if (d->pd != nullptr) api_->deallocPd(d->pd);
      api_->closeDevice(d->ctx);
    }
  }

  Status init() {
    BRAID_CHECK(verbsApi(&api_));
    BRAID_CHECK(ibSettings(&settings_));
    if (settings_.qpsPerConnection < 1 || settings_.qpsPerConnection > kMaxQps) {
      return invalidUsage("NCCL_IB_QPS_PER_CONNECTION=", settings_.qpsPerConnection, " is outside 1..",
                          kMaxQps);
    }
    std::vector<NetInterface> ifaces;
    BRAID_CHECK(findInterfaces(&ifaces).withContext("choosing the verbs transport's setup interface"));
    tcpAddress_ = ifaces[0].address;
    int n = 0;
    ibv_device** list = api_->getDeviceList(&n);
    if (list == nullptr || n == 0) {
      if (list != nullptr) api_->freeDeviceList(list);
      return systemError("no RDMA device: ", api_->origin, " lists none");
    }
    std::vector<std::string> notes;
    for (int i = 0; i < n; ++i) {
      const char* dn = api_->getDeviceName(list[i]);
      const std::string device = dn != nullptr ? dn : strCat("device", i);
      ibv_context* ctx = api_->openDevice(list[i]);
      if (ctx == nullptr) {
        notes.push_back(strCat(device, ": ibv_open_device failed (", std::strerror(errno), ")"));
        continue;
      }
      ibv_device_attr dattr;
      std::memset(&dattr, 0, sizeof(dattr));
      ibv_pd* pd = nullptr;
      bool used = false;
      if (api_->queryDevice(ctx, &dattr) != 0) {
        notes.push_back(strCat(device, ": ibv_query_device failed"));
      } else {
        for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
          if (!settings_.hca.matches(device, p)) continue;
          auto d = std::make_unique<IbDevice>();
          d->device = device;
          d->port = p;
          d->name = strCat(device, ":", p);
          d->ctx = ctx;
          Status st = openPort(d.get(), &notes);
          if (!st.ok()) {
            notes.push_back(st.message());
            continue;
          }
          if (pd == nullptr) pd = api_->allocPd(ctx);
          if (pd == nullptr) {
            notes.push_back(strCat(d->name, ": ibv_alloc_pd failed"));
            break;
          }
          d->pd = pd;
          used = true;
          BRAID_INFO(kLogNet, "NET/IB : Using [%zu]%s/%s (GID index %d, %s, %s; %d Mbps)", devs_.size(),
                     d->name.c_str(), d->infiniband ? "IB" : "RoCE", d->gidIndex, d->gidType.c_str(),
                     gidReason_.c_str(), d->speedMbps);
          devs_.push_back(std::move(d));
        }
      }
      if (!used) {
        if (pd != nullptr) api_->deallocPd(pd);
        api_->closeDevice(ctx);
      }
    }
    api_->freeDeviceList(list);
    if (devs_.empty()) {
      std::string text;
      for (const std::string& s : notes) text += (text.empty() ? "" : "; ") + s;
      return systemError("no usable RDMA port", settings_.hca.spec().empty() ? "" : " after NCCL_IB_HCA='",
                         settings_.hca.spec(), settings_.hca.spec().empty() ? "" : "'",
                         text.empty() ? "" : ": ", text);
    }
    return okStatus();
  }

  const char* name() const override { return "IB"; }
  int devices() const override { return static_cast<int>(devs_.size()); }

  Status properties(int dev, NetProperties* out) const override {
    BRAID_CHECK(checkDev(dev));
    const IbDevice& d = *devs_[static_cast<size_t>(dev)];
    out->name = d.name;
    describePciDevice(strCat("/sys/class/infiniband/", d.device, "/device"), out);
    out->speedMbps = d.speedMbps;
    std::lock_guard<std::mutex> lock(mu_);
    out->port = listener_.isOpen() ? listenAddress_.port() : 0;
    out->maxComms = 65536;
    out->address = gidAddress(d.gid);
    return okStatus();
  }

  Status listen(int dev, NetHandle* handle, NetListenComm** listenComm) override {
    BRAID_CHECK(checkDev(dev));
    std::lock_guard<std::mutex> lock(mu_);
    if (!listener_.isOpen()) {
      BRAID_CHECK(Socket::listen(tcpAddress_, &listener_).withContext("listening for verbs connections"));
      BRAID_CHECK(listener_.localAddress(&listenAddress_));
      BRAID_INFO(kLogNet, "NET/IB: connection setup listens on %s", listenAddress_.toString().c_str());
    }
    auto lc = std::make_unique<IbListenComm>();
    lc->dev = dev;
    lc->id = randomU64();
    lc->secret = randomU64();
    HandleData h{};
    h.magic = kHandleMagic;
    h.id = lc->id;
    h.secret = lc->secret;
    std::strncpy(h.address, listenAddress_.toString().c_str(), sizeof(h.address) - 1);
    std::memset(handle, 0, sizeof(*handle));
    std::memcpy(handle->bytes, &h, sizeof(h));
    Pending& p = pending_[lc->id];
    p.secret = lc->secret;
    p.dev = dev;
    *listenComm = reinterpret_cast<NetListenComm*>(lc.release());
    return okStatus();
  }

  Status connect(int dev, const NetHandle& handle, NetSendComm** sendComm) override {
    *sendComm = nullptr;
    BRAID_CHECK(checkDev(dev));
    HandleData h;
    std::memcpy(&h, handle.bytes, sizeof(h));
    h.address[sizeof(h.address) - 1] = '\0';
    if (h.magic != kHandleMagic) return internalError("a verbs-transport handle with a bad magic");
    std::lock_guard<std::mutex> lock(mu_);
    drain();  // this process's own listeners answer while it connects (ranks connect to each other at once)
    auto it = connecting_.find(h.id);
    if (it == connecting_.end()) {
      auto c = std::make_unique<Connecting>();
      BRAID_CHECK(SocketAddress::parse(h.address, &c->address));
      c->addressText = h.address;
      c->deadline = deadlineIn(kConnectTimeoutSec);
      c->comm = std::make_unique<IbSendComm>(api_, devs_[static_cast<size_t>(dev)].get(), true);
      BRAID_CHECK(
          c->comm->create(settings_.qpsPerConnection).withContext(strCat("connecting to ", h.address)));
      c->hello.magic = kHelloMagic;
      c->hello.id = h.id;
      c->hello.secret = h.secret;
      c->comm->fillInfo(&c->hello);
      it = connecting_.emplace(h.id, std::move(c)).first;
    }
    Connecting& c = *it->second;
    Status st = stepConnect(&c);
    if (!st.ok() || c.done) {
      if (c.done) *sendComm = reinterpret_cast<NetSendComm*>(c.comm.release());
      connecting_.erase(it);
      return st.withContext(strCat("connecting to ", h.address));
    }
    return okStatus();
  }

  Status accept(NetListenComm* listenComm, NetRecvComm** recvComm) override {
    *recvComm = nullptr;
    IbListenComm* lc = reinterpret_cast<IbListenComm*>(listenComm);
    std::lock_guard<std::mutex> lock(mu_);
    drain();
    auto it = pending_.find(lc->id);
    if (it == pending_.end()) return internalError("accept on an unknown verbs-transport listen");
    if (!it->second.ready) return okStatus();
    *recvComm = reinterpret_cast<NetRecvComm*>(it->second.ready.release());
    pending_.erase(it);
    return okStatus();
  }

  Status regMr(void* comm, void* data, size_t size, void** mhandle) override {
    return static_cast<IbComm*>(comm)->regMr(data, size, mhandle);
  }
  Status deregMr(void* comm, void* mhandle) override { return static_cast<IbComm*>(comm)->deregMr(mhandle); }

  Status isend(NetSendComm* comm, const void* data, size_t size, uint32_t tag, void* mhandle,
               NetRequest** request) override {
    IbRequest* r = nullptr;
    Status s = reinterpret_cast<IbSendComm*>(comm)->post(true, static_cast<char*>(const_cast<void*>(data)),
                                                         size, tag, mhandle, &r);
    *request = reinterpret_cast<NetRequest*>(r);
    return s;
  }
  Status irecv(NetRecvComm* comm, void* data, size_t size, void* mhandle, NetRequest** request) override {
    IbRequest* r = nullptr;
    Status s =
        reinterpret_cast<IbRecvComm*>(comm)->post(false, static_cast<char*>(data), size, 0, mhandle, &r);
    *request = reinterpret_cast<NetRequest*>(r);
    return s;
  }
  Status test(NetRequest* request, bool* done, size_t* size, uint32_t* tag) override {
    IbRequest* r = reinterpret_cast<IbRequest*>(request);
    return r->comm->test(r, done, size, tag);
  }

  void closeSend(NetSendComm* comm) override {
    if (comm == nullptr) return;
    IbSendComm* c = reinterpret_cast<IbSendComm*>(comm);
    c->sayGoodbye();
    delete c;
  }
  void closeRecv(NetRecvComm* comm) override { delete reinterpret_cast<IbRecvComm*>(comm); }
  void closeListen(NetListenComm* listenComm) override {
    IbListenComm* lc = reinterpret_cast<IbListenComm*>(listenComm);
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(lc->id);
    for (auto i = incoming_.begin(); i != incoming_.end();) {
      if (i->comm != nullptr && i->hello.id == lc->id) {
        i = incoming_.erase(i);
      } else {
        ++i;
      }
    }
    delete lc;
  }

 private:
  struct Connecting {
    SocketAddress address;
    std::string addressText;
    Deadline deadline;
    Socket sock;
    bool tcpUp = false;
    bool helloSent = false;
    ConnInfo hello{};
    ConnInfo reply{};
    size_t got = 0;
    bool done = false;
    std::unique_ptr<IbSendComm> comm;
    Clock::time_point retryAt{};
  };
  struct Pending {
    uint64_t secret = 0;
    int dev = 0;
    std::unique_ptr<IbRecvComm> ready;
  };
  struct Incoming {
    Socket socket;
    SocketAddress from;
    ConnInfo hello{};
    size_t got = 0;
    Deadline deadline;
    std::unique_ptr<IbRecvComm> comm;  // set once answered: waits for the ack
    uint32_t ack = 0;
    size_t ackGot = 0;
  };

  Status checkDev(int dev) const {
    if (dev < 0 || dev >= devices())
      return invalidArgument("verbs-transport device ", dev, " does not exist");
    return okStatus();
  }

  // The port's attributes and GID (the table from verbs when it can tell the
  // types, else sysfs).
  Status openPort(IbDevice* d, std::vector<std::string>* notes) {
    std::memset(&d->attr, 0, sizeof(d->attr));
    if (api_->queryPort(d->ctx, static_cast<uint8_t>(d->port), &d->attr) != 0) {
      return systemError(d->name, ": ibv_query_port failed");
    }
    if (d->attr.state != IBV_PORT_ACTIVE) {
      return systemError(d->name, ": port not ACTIVE (state ", static_cast<int>(d->attr.state), ")");
    }
    d->infiniband = d->attr.link_layer == IBV_LINK_LAYER_INFINIBAND;
    d->speedMbps = portSpeedMbps(d->attr.active_speed, d->attr.active_width);
    PortGids pg;
    pg.device = d->device;
    pg.port = d->port;
    pg.infiniband = d->infiniband;
    if (api_->queryGidEx != nullptr) {
      for (int i = 0; i < d->attr.gid_tbl_len; ++i) {
        ibv_gid_entry e;
        std::memset(&e, 0, sizeof(e));
        if (api_->queryGidEx(d->ctx, static_cast<uint32_t>(d->port), static_cast<uint32_t>(i), &e, 0) != 0)
          continue;
        GidEntry g;
        g.index = i;
        std::memcpy(g.raw, e.gid.raw, 16);
        g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
        char ifname[IF_NAMESIZE] = {};
        if (e.ndev_ifindex != 0 && if_indextoname(e.ndev_ifindex, ifname) != nullptr) g.netdev = ifname;
        pg.table.push_back(g);
      }
    } else {
      BRAID_CHECK(readGidTable("", d->device, d->port, &pg.table).withContext(d->name));
    }
    for (const GidEntry& g : pg.table) {
      if (!g.netdev.empty()) {
        d->netdev = g.netdev;
        break;
      }
    }
    std::vector<InterfaceAddress> addrs;
    if (!d->netdev.empty()) interfaceAddresses(d->netdev, &addrs).ignore();
    GidChoice choice;
    BRAID_CHECK(selectGid(pg, addrs, settings_.gidIndex.indexFor(d->device, d->port), &choice));
    d->gidIndex = choice.index;
    gidReason_ = choice.reason;
    for (const GidEntry& g : pg.table) {
      if (g.index == choice.index) {
        std::memcpy(d->gid, g.raw, 16);
        d->gidType = g.type;
      }
    }
    (void)notes;
    return okStatus();
  }

  // One step of the sender's handshake; never blocks long.
  Status stepConnect(Connecting* c) {
    if (Clock::now() > c->deadline) return remoteError("the verbs connection setup timed out");
    if (!c->sock.isOpen()) {
      if (Clock::now() < c->retryAt) return okStatus();
      const int fd = ::socket(c->address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return errnoError("socket", errno);
      c->sock = Socket(fd);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&c->address.storage), c->address.length) != 0 &&
          errno != EINPROGRESS) {
        const int err = errno;
        c->sock.close();
        if (err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == EAGAIN) {
          c->retryAt = deadlineIn(0.01);
          return okStatus();
        }
        return errnoError(strCat("connect ", c->addressText), err);
      }
    }
    if (!c->tcpUp) {
      pollfd p{c->sock.fd(), POLLOUT, 0};
      if (::poll(&p, 1, 0) <= 0) return okStatus();
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c->sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        c->sock.close();
        if (err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT) {
          c->retryAt = deadlineIn(0.01);
          return okStatus();
        }
        return errnoError(strCat("connect ", c->addressText), err);
      }
      c->tcpUp = true;
    }
    if (!c->helloSent) {
      BRAID_CHECK(c->sock.sendAll(&c->hello, sizeof(c->hello), deadlineIn(2), nullptr));
      c->helloSent = true;
    }
    size_t got = 0;
    BRAID_CHECK(
        c->sock.recvSome(reinterpret_cast<char*>(&c->reply) + c->got, sizeof(ConnInfo) - c->got, &got));
    c->got += got;
    if (c->got < sizeof(ConnInfo)) return okStatus();
    if (c->reply.magic != kReplyMagic || c->reply.id != c->hello.id || c->reply.secret != c->hello.secret) {
      return remoteError("the verbs connection setup got a garbled reply");
    }
    BRAID_CHECK(c->comm->connectQps(c->reply, settings_));
    BRAID_CHECK(
        c->comm->postReceives());  // for the clear-to-send entries, before the receiver may write them
    const uint32_t ack = kAckMagic;
    BRAID_CHECK(c->sock.sendAll(&ack, sizeof(ack), deadlineIn(2), nullptr));
    c->comm->setLink(std::move(c->sock), c->addressText);
    c->done = true;
    return okStatus();
  }

  // Accepts waiting setup connections, answers valid hellos and collects
  // acks, without blocking; strays are dropped with a warning. mu_ held.
  void drain() {
    if (!listener_.isOpen()) return;
    while (true) {
      Incoming in;
      Status st = listener_.tryAccept(&in.socket, &in.from);
      if (!st.ok() || !in.socket.isOpen()) break;
      in.deadline = deadlineIn(kHelloTimeoutSec);
      incoming_.push_back(std::move(in));
    }
    for (auto i = incoming_.begin(); i != incoming_.end();) {
      std::string why = stepIncoming(&*i);
      if (why == "done" || !why.empty()) {
        if (why != "done") {
          BRAID_WARN("NET/IB: dropped a connection from %s: %s", i->from.toString().c_str(), why.c_str());
        }
        i = incoming_.erase(i);
        continue;
      }
      ++i;
    }
  }

  // "" while waiting, "done" when handed over, else why it was dropped.
  std::string stepIncoming(Incoming* in) {
    size_t got = 0;
    if (in->comm == nullptr) {
      Status st = in->socket.recvSome(reinterpret_cast<char*>(&in->hello) + in->got,
                                      sizeof(ConnInfo) - in->got, &got);
      in->got += got;
      if (!st.ok()) return "it closed before introducing itself";
      if (in->got < sizeof(ConnInfo)) return Clock::now() > in->deadline ? "it sent no hello within 5 s" : "";
      auto it = pending_.find(in->hello.id);
      if (in->hello.magic != kHelloMagic) return "its hello has a bad magic";
      if (it == pending_.end() || it->second.secret != in->hello.secret || it->second.ready) {
        return "its hello names no connection this process waits for";
      }
      if (in->hello.nqps == 0 || in->hello.nqps > static_cast<uint32_t>(kMaxQps)) {
        return "its hello has an impossible queue pair count";
      }
      auto comm = std::make_unique<IbRecvComm>(api_, devs_[static_cast<size_t>(it->second.dev)].get(), false);
      Status cs = comm->create(static_cast<int>(in->hello.nqps));
      if (cs.ok()) cs = comm->connectQps(in->hello, settings_);
      if (cs.ok()) cs = comm->postReceives();
      ConnInfo reply{};
      if (cs.ok()) {
        reply.magic = kReplyMagic;
        reply.id = in->hello.id;
        reply.secret = in->hello.secret;
        comm->fillInfo(&reply);
        cs = in->socket.sendAll(&reply, sizeof(reply), deadlineIn(2), nullptr);
      }
      if (!cs.ok()) return strCat("setting up its queue pairs failed: ", cs.message());
      in->comm = std::move(comm);
      in->deadline = deadlineIn(kHelloTimeoutSec);
    }
    Status st = in->socket.recvSome(reinterpret_cast<char*>(&in->ack) + in->ackGot,
                                    sizeof(in->ack) - in->ackGot, &got);
    in->ackGot += got;
    if (!st.ok()) return "it closed before acknowledging";
    if (in->ackGot < sizeof(in->ack))
      return Clock::now() > in->deadline ? "it sent no acknowledgement within 5 s" : "";
    if (in->ack != kAckMagic) return "its acknowledgement has a bad magic";
    auto it = pending_.find(in->hello.id);
    if (it == pending_.end()) return "its listen was closed";
    in->comm->setLink(std::move(in->socket), in->from.toString());
    it->second.ready = std::move(in->comm);
    return "done";
  }

  const VerbsApi* api_ = nullptr;
  IbSettings settings_;
  std::vector<std::unique_ptr<IbDevice>> devs_;
  std::string gidReason_;
  SocketAddress tcpAddress_;
  mutable std::mutex mu_;
  Socket listener_;
  SocketAddress listenAddress_;
  std::map<uint64_t, Pending> pending_;
  std::vector<Incoming> incoming_;
  std::map<uint64_t, std::unique_ptr<Connecting>> connecting_;
};

}  // namespace

Status newIbNet(std::unique_ptr<Net>* out) {
  auto n = std::make_unique<IbNet>();
  BRAID_CHECK(n->init());
  *out = std::move(n);
  return okStatus();
}

Status ibNet(Net** out) {
  static std::mutex mu;
  static IbNet* net = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (net == nullptr) {
    auto n = std::make_unique<IbNet>();
    BRAID_CHECK(n->init());
    net = n.release();
  }
  *out = net;
  return okStatus();
}

}  // namespace braid
