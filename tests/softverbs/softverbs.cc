// The software verbs device (see softverbs.h): verbs objects in memory, one
// progress thread per open context moving RC traffic over TCP.
//
// Locking: each context has one mutex (ctx->mu) guarding its QPs, their
// queues and connections; every socket is read, written and closed by the
// context's progress thread only, so the thread polls without the lock. A CQ
// has its own mutex (taken after ctx->mu). Memory regions live in one
// process-wide table (gMrMu), held while data is copied to or from them so
// that deregMr waits for a copy in progress.
#include "tests/softverbs/softverbs.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace braid {
namespace softverbs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kDeviceName[] = "softroce0";
constexpr uint32_t kHelloMagic = 0x53564831u;  // "SVH1"
constexpr uint32_t kMaxMsg = 1u << 30;         // max_msg_sz
constexpr int kMaxQpWr = 4096;
constexpr int kMaxSge = 16;
constexpr int kMaxInline = 256;
constexpr int kMaxCqe = 1 << 20;
constexpr size_t kOutHighWater = 4u << 20;  // bytes queued on a connection before sends wait
constexpr auto kNopInterval = std::chrono::milliseconds(200);

enum FrameType : uint32_t { kHello = 1, kRequest = 2, kAck = 3, kNop = 4 };
enum Syndrome : uint32_t { kAckOk = 0, kNakAccess = 1, kNakInvalid = 2, kNakOperation = 3 };

// A byte buffer whose resize leaves the bytes uninitialized: frames are
// written over at once, and zeroing megabytes per message costs.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

struct FrameHeader {
  uint32_t type;
  uint32_t len;  // payload bytes after this header
};
struct HelloFrame {
  uint32_t magic, srcQpn, dstQpn;
};
struct RequestFrame {
  uint32_t psn, opcode, hasImm, imm;
  uint64_t remoteAddr;
  uint32_t rkey, len;
};
struct AckFrame {
  uint32_t psn, syndrome;
};

bool debugOn() {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_SOFTVERBS_DEBUG");
    return v != nullptr && std::atoi(v) != 0;
  }();
  return on;
}

void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void logf(const char* fmt, ...) {
  if (!debugOn()) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "softverbs: [%d] %s\n", static_cast<int>(getpid()), buf);
}

long envLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtol(v, nullptr, 10);
}

// --- fault knobs (process-wide) ---------------------------------------------
std::atomic<uint64_t> gWritesSent{0};
std::atomic<long> gFailAfter{-1};
std::atomic<long> gBadRkeyAfter{-1};
std::atomic<bool> gLinkFailed{false};
std::once_flag gKnobsOnce;

void readKnobs() {
  gFailAfter = envLong("BRAID_SOFTVERBS_FAIL_AFTER", -1);
  gBadRkeyAfter = envLong("BRAID_SOFTVERBS_BAD_RKEY_AFTER", -1);
}

// --- the network interface ----------------------------------------------------
struct Netif {
  std::string name;
  uint32_t ipv4 = 0;  // network order
  int ifindex = 0;
  uint8_t mac[6] = {};
};

bool findNetif(Netif* out) {
  const char* forced = std::getenv("BRAID_SOFTVERBS_IFNAME");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      const std::string name = a->ifa_name;
      if (forced != nullptr && *forced != '\0') {
        if (name != forced) continue;
      } else if (pass == 0) {
        if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      } else if (name != "lo") {
        continue;
      }
      out->name = name;
      out->ipv4 = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      found = true;
      break;
    }
    if (forced != nullptr && *forced != '\0') break;
  }
  freeifaddrs(list);
  if (!found) return false;
  out->ifindex = static_cast<int>(if_nametoindex(out->name.c_str()));
  std::ifstream macFile("/sys/class/net/" + out->name + "/address");
  std::string mac;
  if (macFile >> mac) {
    unsigned m[6] = {};
    if (std::sscanf(mac.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6) {
      for (int i = 0; i < 6; ++i) out->mac[i] = static_cast<uint8_t>(m[i]);
    }
  }
  return true;
}

bool netifUp(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return true;
  bool up = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (name == a->ifa_name && (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0) up = true;
  }
  freeifaddrs(list);
  return up;
}

// --- objects --------------------------------------------------------------------
struct Context;
struct Qp;

struct Pd {
  ibv_pd base;  // first: the user's ibv_pd* is a Pd*
  Context* ctx;
};

struct Mr {
  ibv_mr base;
  int access;
};

struct Cq {
  ibv_cq base;
  std::mutex mu;
  std::deque<ibv_wc> entries;
  bool overrun = false;
  // entries.size(), or -1 once overrun: lets pollCq on an empty CQ return
  // without the lock (a consumer spinning on it would starve the producer).
  std::atomic<int> ready{0};
};

// Never destroyed: a progress thread of a context the program never closed
// (NCCL keeps its contexts to the end) may still use them during exit.
std::mutex& gMrMu = *new std::mutex;
std::unordered_map<uint32_t, Mr*>& gMrs = *new std::unordered_map<uint32_t, Mr*>;  // key (lkey == rkey)
std::mt19937& gRng =
    *new std::mt19937(static_cast<uint32_t>(std::random_device{}()) ^ static_cast<uint32_t>(getpid()));

// A TCP connection between two devices, owned by the progress thread.
struct Conn {
  int fd = -1;
  bool connecting = false;
  bool dead = false;
  std::deque<Bytes> out;
  size_t outOff = 0;
  size_t outBytes = 0;
  FrameHeader hdr{};
  size_t hdrGot = 0;
  Bytes payload;
  size_t payloadGot = 0;
  Clock::time_point lastRecv = Clock::now();
  Clock::time_point lastSend = Clock::now();
  Clock::time_point born = Clock::now();
  uint32_t peerQpn = 0;  // an accepted connection: the QP that said hello
  uint32_t peerIp = 0;   // and its address (network order)

  void queue(FrameType type, const void* body, size_t len) {
    Bytes f(sizeof(FrameHeader) + len);
    const FrameHeader h{type, static_cast<uint32_t>(len)};
    std::memcpy(f.data(), &h, sizeof(h));
    if (len > 0) std::memcpy(f.data() + sizeof(h), body, len);
    outBytes += f.size();
    out.push_back(std::move(f));
  }
};

struct SendWqe {
  uint64_t wrId = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  uint32_t imm = 0;
  uint64_t remoteAddr = 0;
  uint32_t rkey = 0;
  std::vector<ibv_sge> sges;
  bool isInline = false;
  std::vector<uint8_t> inlineData;
  uint32_t psn = 0;
  uint32_t length = 0;
};

struct RecvWqe {
  uint64_t wrId = 0;
  std::vector<ibv_sge> sges;
};

struct Request {
  RequestFrame hdr;
  Bytes frame;  // the whole payload (header + data)
  const uint8_t* data() const { return frame.data() + sizeof(RequestFrame); }
};

struct Qp {
  ibv_qp base;
  Context* ctx;
  int index;  // n of (P << 8) | n
  ibv_qp_attr attr{};
  ibv_qp_cap cap{};
  bool sqSigAll = false;
  ibv_qp_state state = IBV_QPS_RESET;
  bool destroyed = false;
  bool reaped = false;           // the progress thread let go of it (destroyQp may free)
  std::deque<SendWqe> sq;        // posted, not yet transmitted
  std::deque<SendWqe> inflight;  // transmitted, waiting for the ACK
  std::deque<RecvWqe> rq;
  std::deque<Request> inQ;  // received requests not yet executed (RNR: waiting for a receive)
  uint32_t nextPsn = 0;
  std::unique_ptr<Conn> outConn;  // we connected: our requests, their ACKs
  std::unique_ptr<Conn> inConn;   // they connected: their requests, our ACKs
  uint32_t peerIp = 0;
  uint16_t peerPort = 0;

  Clock::duration timeout() const {
    const int t = attr.timeout > 0 ? attr.timeout : 14;
    const int r = attr.retry_cnt;
    double s = 4.096e-6 * static_cast<double>(1ull << std::min(t, 31)) * (r + 1);
    if (s < 2.0) s = 2.0;
    if (s > 10.0) s = 10.0;
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
};

struct Context {
  ibv_context base;
  Netif netif;
  int listenFd = -1;
  uint16_t port = 0;
  int wake[2] = {-1, -1};
  std::mutex mu;
  std::condition_variable reapedCv;
  std::map<int, Qp*> qps;                        // index -> QP
  std::vector<std::unique_ptr<Conn>> pending;    // accepted, waiting for the hello
  std::vector<std::unique_ptr<Conn>> graveyard;  // dropped by a user thread, closed by the progress thread
  bool stop = false;
  std::thread thread;

  bool polling = false;  // the progress thread is in poll() (or about to be)
  int lastIndex = 0;     // the n of the QP created last

  // Wakes the progress thread; the caller holds mu. Not needed while the
  // thread is awake: it looks at every QP before it polls again.
  void kick() {
    if (polling) wakeAlways();
  }
  void wakeAlways() {
    const char c = 1;
    ssize_t r = ::write(wake[1], &c, 1);
    (void)r;
  }
  void run();
  void housekeeping(Clock::time_point now);
  void pump(Qp* qp);
  void onFrame(Qp* qp, Conn* c, bool fromOut);
  void onHello(std::unique_ptr<Conn>& c);
};

ibv_device gDevice;
std::once_flag gDeviceOnce;

void initDevice() {
  std::memset(&gDevice, 0, sizeof(gDevice));
  gDevice.node_type = IBV_NODE_CA;
  gDevice.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(gDevice.name, sizeof(gDevice.name), "%s", kDeviceName);
  std::snprintf(gDevice.dev_name, sizeof(gDevice.dev_name), "uverbs_soft0");
  std::snprintf(gDevice.dev_path, sizeof(gDevice.dev_path), "/sys/class/infiniband_verbs/uverbs_soft0");
  std::snprintf(gDevice.ibdev_path, sizeof(gDevice.ibdev_path), "/sys/class/infiniband/%s", kDeviceName);
}

Context* ctxOf(ibv_context* c) {
  return reinterpret_cast<Context*>(c);
}
Qp* qpOf(ibv_qp* q) {
  return reinterpret_cast<Qp*>(q);
}
Cq* cqOf(ibv_cq* c) {
  return reinterpret_cast<Cq*>(c);
}

// --- completions -----------------------------------------------------------------
void pushCqe(ibv_cq* cq, const ibv_wc& wc) {
  Cq* c = cqOf(cq);
  std::lock_guard<std::mutex> lk(c->mu);
  if (c->overrun) return;
  if (static_cast<int>(c->entries.size()) >= c->base.cqe) {
    c->overrun = true;
    c->ready.store(-1, std::memory_order_release);
    logf("CQ %p overrun (%d entries): the CQ is in error", static_cast<void*>(cq), c->base.cqe);
    return;
  }
  c->entries.push_back(wc);
  c->ready.store(static_cast<int>(c->entries.size()), std::memory_order_release);
}

ibv_wc_opcode sendWcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_SEND;
  }
}

void completeSend(Qp* qp, const SendWqe& w, ibv_wc_status status) {
  if (status == IBV_WC_SUCCESS && !w.signaled) return;
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.wr_id = w.wrId;
  wc.status = status;
  wc.opcode = sendWcOpcode(w.opcode);
  wc.byte_len = w.length;
  wc.qp_num = qp->base.qp_num;
  pushCqe(qp->base.send_cq, wc);
}

void completeRecv(Qp* qp, const RecvWqe& r, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t len,
                  bool hasImm, uint32_t imm) {
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.wr_id = r.wrId;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = len;
  wc.qp_num = qp->base.qp_num;
  wc.src_qp = qp->attr.dest_qp_num;
  if (hasImm) {
    wc.imm_data = imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  pushCqe(qp->base.recv_cq, wc);
}

void setState(Qp* qp, ibv_qp_state s) {
  qp->state = s;
  qp->base.state = s;
  qp->attr.qp_state = s;
}

// Moves `qp` to ERR: transmitted sends complete `inflightStatus` (the first
// one `headStatus`), the rest and the receives flush; its connections close.
void errorQp(Qp* qp, ibv_wc_status headStatus, ibv_wc_status inflightStatus, const char* why) {
  if (qp->state == IBV_QPS_ERR) return;
  logf("QP 0x%x -> ERR: %s", qp->base.qp_num, why);
  setState(qp, IBV_QPS_ERR);
  bool head = true;
  for (const SendWqe& w : qp->inflight) {
    completeSend(qp, w, head ? headStatus : inflightStatus);
    head = false;
  }
  qp->inflight.clear();
  for (const SendWqe& w : qp->sq) completeSend(qp, w, IBV_WC_WR_FLUSH_ERR);
  qp->sq.clear();
  for (const RecvWqe& r : qp->rq) completeRecv(qp, r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, false, 0);
  qp->rq.clear();
  qp->inQ.clear();
  if (qp->outConn) qp->outConn->dead = true;
  if (qp->inConn) qp->inConn->dead = true;
}

void peerLost(Qp* qp, const char* why) {
  errorQp(qp, IBV_WC_RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR, why);
}

// --- memory checks (gMrMu held) ----------------------------------------------------
Mr* findMr(uint32_t key, ibv_pd* pd) {
  auto it = gMrs.find(key);
  if (it == gMrs.end() || it->second->base.pd != pd) return nullptr;
  return it->second;
}

bool inRange(const Mr* mr, uint64_t addr, uint64_t len) {
  const uint64_t base = reinterpret_cast<uint64_t>(mr->base.addr);
  return addr >= base && len <= mr->base.length && addr - base <= mr->base.length - len;
}

// --- requester ------------------------------------------------------------------
void Context::pump(Qp* qp) {
  Conn* c = qp->outConn.get();
  while (qp->state == IBV_QPS_RTS && c != nullptr && !c->connecting && !c->dead && !qp->sq.empty() &&
         c->outBytes < kOutHighWater) {
    SendWqe w = std::move(qp->sq.front());
    qp->sq.pop_front();
    const bool isWrite = w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    RequestFrame rf{};
    rf.psn = w.psn = qp->nextPsn++;
    rf.opcode = w.opcode;
    rf.hasImm = (w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || w.opcode == IBV_WR_SEND_WITH_IMM) ? 1 : 0;
    rf.imm = w.imm;
    rf.remoteAddr = w.remoteAddr;
    rf.rkey = w.rkey;
    rf.len = w.length;
    if (isWrite) {
      const uint64_t n = ++gWritesSent;
      const long failAfter = gFailAfter.load();
      if (failAfter >= 0 && n > static_cast<uint64_t>(failAfter)) {
        if (!gLinkFailed.exchange(true)) logf("FAIL_AFTER=%ld reached: the link fails", failAfter);
        qp->inflight.push_back(std::move(w));
        peerLost(qp, "link failed (BRAID_SOFTVERBS_FAIL_AFTER)");
        return;
      }
      if (gBadRkeyAfter.load() > 0 && n == static_cast<uint64_t>(gBadRkeyAfter.load())) {
        rf.rkey ^= 0x5a5a0f0fu;
        logf("write %llu carries a corrupted rkey (BRAID_SOFTVERBS_BAD_RKEY_AFTER)",
             static_cast<unsigned long long>(n));
      }
    }
    const bool isRead = w.opcode == IBV_WR_RDMA_READ;  // the data comes back with the ACK
    const uint32_t dataLen = isRead ? 0 : w.length;
    Bytes f(sizeof(FrameHeader) + sizeof(RequestFrame) + dataLen);
    const FrameHeader h{kRequest, static_cast<uint32_t>(sizeof(RequestFrame) + dataLen)};
    std::memcpy(f.data(), &h, sizeof(h));
    std::memcpy(f.data() + sizeof(h), &rf, sizeof(rf));
    uint8_t* dst = f.data() + sizeof(h) + sizeof(rf);
    if (isRead) {
      // local SGEs are checked when the response arrives
    } else if (w.isInline) {
      if (w.length > 0) std::memcpy(dst, w.inlineData.data(), w.length);
    } else {
      std::lock_guard<std::mutex> lk(gMrMu);
      bool ok = true;
      for (const ibv_sge& s : w.sges) {
        Mr* mr = findMr(s.lkey, qp->base.pd);
        if (s.length > 0 && (mr == nullptr || !inRange(mr, s.addr, s.length))) {
          ok = false;
          break;
        }
        if (s.length > 0) std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
        dst += s.length;
      }
      if (!ok) {
        qp->inflight.push_back(std::move(w));
        errorQp(qp, IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, "local protection error (lkey/range)");
        return;
      }
    }
    c->outBytes += f.size();
    c->out.push_back(std::move(f));
    qp->inflight.push_back(std::move(w));
  }
}

// --- responder ------------------------------------------------------------------
// Executes the requests in qp->inQ in order; stops at one that needs a
// receive while none is posted (RNR, retried until one is).
void execute(Qp* qp) {
  while (!qp->inQ.empty() && qp->state != IBV_QPS_ERR && qp->inConn && !qp->inConn->dead) {
    Request& rq = qp->inQ.front();
    const RequestFrame& h = rq.hdr;
    const bool needsRecv =
        h.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || h.opcode == IBV_WR_SEND || h.opcode == IBV_WR_SEND_WITH_IMM;
    if (needsRecv && qp->rq.empty()) return;  // RNR: wait for postRecv
    uint32_t syndrome = kAckOk;
    ibv_wc_status recvStatus = IBV_WC_SUCCESS;
    ibv_wc_opcode recvOp = IBV_WC_RECV;
    Bytes readResponse;  // RDMA READ: the ACK frame with the data
    {
      std::lock_guard<std::mutex> lk(gMrMu);
      if (h.opcode == IBV_WR_RDMA_READ) {
        Mr* mr = h.len > 0 ? findMr(h.rkey, qp->base.pd) : nullptr;
        if (h.len > 0 &&
            (mr == nullptr || (mr->access & IBV_ACCESS_REMOTE_READ) == 0 ||
             (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0 || !inRange(mr, h.remoteAddr, h.len))) {
          syndrome = kNakAccess;
        } else {
          readResponse.resize(sizeof(FrameHeader) + sizeof(AckFrame) + h.len);
          const FrameHeader fh{kAck, static_cast<uint32_t>(sizeof(AckFrame) + h.len)};
          const AckFrame ok{h.psn, kAckOk};
          std::memcpy(readResponse.data(), &fh, sizeof(fh));
          std::memcpy(readResponse.data() + sizeof(fh), &ok, sizeof(ok));
          if (h.len > 0) {
            std::memcpy(readResponse.data() + sizeof(fh) + sizeof(ok),
                        reinterpret_cast<const void*>(h.remoteAddr), h.len);
          }
        }
      } else if (h.opcode == IBV_WR_RDMA_WRITE || h.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        recvOp = IBV_WC_RECV_RDMA_WITH_IMM;
        if (h.len > 0) {
          Mr* mr = findMr(h.rkey, qp->base.pd);
          if (mr == nullptr || (mr->access & IBV_ACCESS_REMOTE_WRITE) == 0 ||
              (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0 ||
              !inRange(mr, h.remoteAddr, h.len)) {
            syndrome = kNakAccess;
          } else {
            std::memcpy(reinterpret_cast<void*>(h.remoteAddr), rq.data(), h.len);
          }
        }
      } else if (h.opcode == IBV_WR_SEND || h.opcode == IBV_WR_SEND_WITH_IMM) {
        const RecvWqe& r = qp->rq.front();
        uint64_t room = 0;
        for (const ibv_sge& s : r.sges) room += s.length;
        if (room < h.len) {
          syndrome = kNakInvalid;
          recvStatus = IBV_WC_LOC_LEN_ERR;
        } else {
          const uint8_t* src = rq.data();
          uint32_t left = h.len;
          for (const ibv_sge& s : r.sges) {
            if (left == 0) break;
            const uint32_t n = std::min(left, s.length);
            Mr* mr = findMr(s.lkey, qp->base.pd);
            if (mr == nullptr || (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0 || !inRange(mr, s.addr, n)) {
              syndrome = kNakOperation;
              recvStatus = IBV_WC_LOC_PROT_ERR;
              break;
            }
            std::memcpy(reinterpret_cast<void*>(s.addr), src, n);
            src += n;
            left -= n;
          }
        }
      } else {
        syndrome = kNakInvalid;
      }
    }
    if (!readResponse.empty()) {
      qp->inConn->outBytes += readResponse.size();
      qp->inConn->out.push_back(std::move(readResponse));
    } else {
      const AckFrame ack{h.psn, syndrome};
      qp->inConn->queue(kAck, &ack, sizeof(ack));
    }
    if (needsRecv && syndrome != kNakAccess) {
      RecvWqe r = std::move(qp->rq.front());
      qp->rq.pop_front();
      completeRecv(qp, r, recvStatus, recvOp, h.len, h.hasImm != 0, h.imm);
    }
    qp->inQ.pop_front();
    if (syndrome != kAckOk) {
      // A responder that NAKs goes to the error state, as an RC responder
      // does: requests the requester pipelined behind the bad one are never
      // executed (their data does not land). The NAK must still leave: the
      // connection stays until the peer closes it.
      setState(qp, IBV_QPS_ERR);
      for (const RecvWqe& r : qp->rq) completeRecv(qp, r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, false, 0);
      qp->rq.clear();
      qp->inQ.clear();
      for (const SendWqe& w : qp->inflight) completeSend(qp, w, IBV_WC_WR_FLUSH_ERR);
      for (const SendWqe& w : qp->sq) completeSend(qp, w, IBV_WC_WR_FLUSH_ERR);
      qp->inflight.clear();
      qp->sq.clear();
      if (qp->outConn) qp->outConn->dead = true;
      return;
    }
  }
}

void Context::onFrame(Qp* qp, Conn* c, bool fromOut) {
  const FrameHeader h = c->hdr;
  if (h.type == kNop) return;
  if (fromOut && h.type == kAck && c->payload.size() >= sizeof(AckFrame)) {
    AckFrame a;
    std::memcpy(&a, c->payload.data(), sizeof(a));
    const size_t dataLen = c->payload.size() - sizeof(AckFrame);
    if (qp->inflight.empty() || qp->inflight.front().psn != a.psn) {
      peerLost(qp, "unexpected ACK");
      return;
    }
    SendWqe& w = qp->inflight.front();
    const bool isRead = w.opcode == IBV_WR_RDMA_READ;
    if (a.syndrome == kAckOk && (isRead ? dataLen != w.length : dataLen != 0)) {
      peerLost(qp, "malformed ACK");
      return;
    }
    if (a.syndrome == kAckOk && isRead) {  // scatter the data into the local SGEs
      std::lock_guard<std::mutex> lk(gMrMu);
      const uint8_t* src = c->payload.data() + sizeof(AckFrame);
      for (const ibv_sge& s : w.sges) {
        if (s.length == 0) continue;
        Mr* mr = findMr(s.lkey, qp->base.pd);
        if (mr == nullptr || (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0 || !inRange(mr, s.addr, s.length)) {
          errorQp(qp, IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, "local protection error (RDMA READ target)");
          return;
        }
        std::memcpy(reinterpret_cast<void*>(s.addr), src, s.length);
        src += s.length;
      }
    }
    if (a.syndrome == kAckOk) {
      completeSend(qp, qp->inflight.front(), IBV_WC_SUCCESS);
      qp->inflight.pop_front();
      return;
    }
    const ibv_wc_status st = a.syndrome == kNakAccess      ? IBV_WC_REM_ACCESS_ERR
                             : a.syndrome == kNakOperation ? IBV_WC_REM_OP_ERR
                                                           : IBV_WC_REM_INV_REQ_ERR;
    errorQp(qp, st, IBV_WC_WR_FLUSH_ERR, "NAK from the responder");
    return;
  }
  if (!fromOut && h.type == kRequest && c->payload.size() >= sizeof(RequestFrame)) {
    Request r;
    std::memcpy(&r.hdr, c->payload.data(), sizeof(r.hdr));
    const size_t dataLen = r.hdr.opcode == IBV_WR_RDMA_READ ? 0 : r.hdr.len;
    if (r.hdr.len > kMaxMsg || c->payload.size() != sizeof(RequestFrame) + dataLen) {
      peerLost(qp, "malformed request frame");
      return;
    }
    r.frame = std::move(c->payload);
    qp->inQ.push_back(std::move(r));
    execute(qp);
    return;
  }
  peerLost(qp, "unexpected frame");
}

// Reads what is there; calls `frame` for each complete frame. False: EOF or error.
template <typename F>
bool readFrames(Conn* c, size_t maxLen, F&& frame) {
  for (int rounds = 0; rounds < 64; ++rounds) {
    ssize_t n;
    if (c->hdrGot < sizeof(FrameHeader)) {
      n = ::recv(c->fd, reinterpret_cast<uint8_t*>(&c->hdr) + c->hdrGot, sizeof(FrameHeader) - c->hdrGot, 0);
    } else {
      n = ::recv(c->fd, c->payload.data() + c->payloadGot, c->payload.size() - c->payloadGot, 0);
    }
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c->lastRecv = Clock::now();
    if (c->hdrGot < sizeof(FrameHeader)) {
      c->hdrGot += static_cast<size_t>(n);
      if (c->hdrGot < sizeof(FrameHeader)) continue;
      if (c->hdr.len > maxLen) return false;  // length check
      c->payload.clear();
      c->payload.resize(c->hdr.len);
      c->payloadGot = 0;
    } else {
      c->payloadGot += static_cast<size_t>(n);
    }
    if (c->payloadGot == c->payload.size()) {
      c->hdrGot = 0;
      if (!frame()) return true;
      c->payload.clear();
    }
  }
  return true;
}

bool writeOut(Conn* c) {
  while (!c->out.empty()) {
    Bytes& f = c->out.front();
    const ssize_t n = ::send(c->fd, f.data() + c->outOff, f.size() - c->outOff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c->outOff += static_cast<size_t>(n);
    c->lastSend = Clock::now();
    if (c->outOff == f.size()) {
      c->outBytes -= f.size();
      c->out.pop_front();
      c->outOff = 0;
    }
  }
  return true;
}

void closeConn(std::unique_ptr<Conn>& c) {
  if (!c) return;
  if (c->fd >= 0) ::close(c->fd);
  c.reset();
}

// The kernel's own guard (unacknowledged data, keepalive) backs up the
// progress thread's silence check; it is never shorter than 10 s so that a
// peer QP slow to reach RTR (its socket not read yet) is not cut off.
void tuneSocket(int fd, Clock::duration timeout) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const unsigned ms = static_cast<unsigned>(
      std::max<int64_t>(10000, std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int idle = 1, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void Context::onHello(std::unique_ptr<Conn>& c) {
  HelloFrame hello{};
  if (c->hdr.type != kHello || c->payload.size() != sizeof(hello)) {
    closeConn(c);
    return;
  }
  std::memcpy(&hello, c->payload.data(), sizeof(hello));
  c->payload.clear();
  const int index = static_cast<int>(hello.dstQpn & 0xff);
  auto it = qps.find(index);
  if (hello.magic != kHelloMagic || (hello.dstQpn >> 8) != port || it == qps.end() || it->second->destroyed ||
      it->second->state == IBV_QPS_ERR ||
      (it->second->state >= IBV_QPS_RTR &&
       (it->second->attr.dest_qp_num != hello.srcQpn || it->second->peerIp != c->peerIp))) {
    logf("hello for QP 0x%x from 0x%x rejected", hello.dstQpn, hello.srcQpn);
    closeConn(c);
    return;
  }
  Qp* qp = it->second;
  if (qp->inConn) qp->inConn->dead = true;  // a reconnect after RESET replaces the old one
  std::unique_ptr<Conn> old = std::move(qp->inConn);
  closeConn(old);
  c->lastRecv = Clock::now();
  c->peerQpn = hello.srcQpn;
  qp->inConn = std::move(c);
  logf("QP 0x%x accepted a connection from QP 0x%x", qp->base.qp_num, hello.srcQpn);
}

void Context::housekeeping(Clock::time_point now) {
  for (auto& c : graveyard) closeConn(c);
  graveyard.clear();
  for (auto it = qps.begin(); it != qps.end();) {
    Qp* qp = it->second;
    if (qp->destroyed) {
      closeConn(qp->outConn);
      closeConn(qp->inConn);
      qp->reaped = true;
      it = qps.erase(it);
      reapedCv.notify_all();
      continue;
    }
    ++it;
    if (gLinkFailed.load() && (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS)) {
      peerLost(qp, "link failed (BRAID_SOFTVERBS_FAIL_AFTER)");
    }
    const Clock::duration limit = qp->timeout();
    if (qp->outConn && !qp->outConn->dead) {
      Conn* c = qp->outConn.get();
      if (c->connecting ? now - c->born > limit : now - c->lastRecv > limit) {
        peerLost(qp, c->connecting ? "connect timed out" : "peer silent past the QP's timeout");
      }
    }
    if (qp->inConn && !qp->inConn->dead && qp->state >= IBV_QPS_RTR && qp->state != IBV_QPS_ERR &&
        now - qp->inConn->lastRecv > limit) {
      peerLost(qp, "peer silent past the QP's timeout");
    }
    for (Conn* c : {qp->outConn.get(), qp->inConn.get()}) {
      if (c != nullptr && !c->dead && !c->connecting && c->out.empty() && now - c->lastSend > kNopInterval) {
        c->queue(kNop, nullptr, 0);
      }
    }
    if (qp->outConn && qp->outConn->dead) closeConn(qp->outConn);
    if (qp->inConn && qp->inConn->dead) closeConn(qp->inConn);
    pump(qp);
  }
  for (auto it = pending.begin(); it != pending.end();) {
    if (!*it || now - (*it)->born > std::chrono::seconds(10)) {
      closeConn(*it);
      it = pending.erase(it);
    } else {
      ++it;
    }
  }
}

void Context::run() {
  std::unique_lock<std::mutex> lk(mu);
  std::vector<pollfd> fds;
  struct Slot {
    Qp* qp;
    Conn* conn;
    int kind;  // 0 out, 1 in, 2 pending
    size_t pendingIndex;
  };
  std::vector<Slot> slots;
  while (!stop) {
    housekeeping(Clock::now());
    fds.clear();
    slots.clear();
    fds.push_back({wake[0], POLLIN, 0});
    fds.push_back({listenFd, POLLIN, 0});
    for (auto& [index, qp] : qps) {
      (void)index;
      if (Conn* c = qp->outConn.get()) {
        fds.push_back(
            {c->fd, static_cast<short>(c->connecting ? POLLOUT : (POLLIN | (c->out.empty() ? 0 : POLLOUT))),
             0});
        slots.push_back({qp, c, 0, 0});
      }
      if (Conn* c = qp->inConn.get()) {
        const bool reading = qp->state >= IBV_QPS_RTR;
        fds.push_back(
            {c->fd, static_cast<short>((reading ? POLLIN : 0) | (c->out.empty() ? 0 : POLLOUT)), 0});
        slots.push_back({qp, c, 1, 0});
      }
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      fds.push_back({pending[i]->fd, POLLIN, 0});
      slots.push_back({nullptr, pending[i].get(), 2, i});
    }
    polling = true;
    lk.unlock();
    ::poll(fds.data(), fds.size(), 50);
    lk.lock();
    polling = false;
    if (stop) break;
    if (fds[0].revents != 0) {
      char buf[64];
      while (::read(wake[0], buf, sizeof(buf)) > 0) {
      }
    }
    if ((fds[1].revents & POLLIN) != 0) {
      for (;;) {
        sockaddr_in from{};
        socklen_t fromLen = sizeof(from);
        const int fd =
            ::accept4(listenFd, reinterpret_cast<sockaddr*>(&from), &fromLen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->peerIp = from.sin_addr.s_addr;
        tuneSocket(fd, std::chrono::seconds(10));
        pending.push_back(std::move(c));
      }
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      Slot& s = slots[i];
      if (s.kind == 2) {
        std::unique_ptr<Conn>& pc = pending[s.pendingIndex];
        bool hello = false;
        if (!readFrames(pc.get(), sizeof(HelloFrame), [&] {
              hello = true;
              return false;
            })) {
          closeConn(pc);
        } else if (hello) {
          onHello(pc);
        }
        continue;
      }
      Qp* qp = s.qp;
      // The QP may have dropped this connection (ERR, destroy) during this round.
      Conn* c = s.kind == 0 ? qp->outConn.get() : qp->inConn.get();
      if (c != s.conn || qp->destroyed) continue;
      if (c->connecting) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          peerLost(qp, "connect failed");
          continue;
        }
        c->connecting = false;
        c->lastRecv = Clock::now();
        logf("QP 0x%x connected to its peer", qp->base.qp_num);
      }
      if ((ev & POLLOUT) != 0 || !c->out.empty()) {
        if (!writeOut(c)) {
          peerLost(qp, "connection to the peer failed (write)");
          continue;
        }
      }
      if ((ev & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const bool fromOut = s.kind == 0;
        const size_t maxLen = fromOut ? sizeof(AckFrame) + kMaxMsg : sizeof(RequestFrame) + kMaxMsg;
        const bool ok = readFrames(c, maxLen, [&] {
          onFrame(qp, c, fromOut);
          return qp->state != IBV_QPS_ERR;
        });
        if (!ok && qp->state != IBV_QPS_ERR) peerLost(qp, "peer closed the connection");
        if (!ok) c->dead = true;
      }
      if (!c->dead && !c->out.empty() && !writeOut(c)) peerLost(qp, "connection to the peer failed (write)");
    }
  }
}

// --- the table's entries ---------------------------------------------------------
ibv_device** svGetDeviceList(int* n) {
  std::call_once(gDeviceOnce, initDevice);
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = &gDevice;
  if (n != nullptr) *n = 1;
  return list;
}

void svFreeDeviceList(ibv_device** list) {
  std::free(list);
}

const char* svGetDeviceName(ibv_device* d) {
  return d != nullptr ? d->name : nullptr;
}

int svPollCq(ibv_cq* cq, int n, ibv_wc* wc);
int svPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int svPostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);

ibv_context* svOpenDevice(ibv_device* d) {
  if (d != &gDevice) {
    errno = ENODEV;
    return nullptr;
  }
  std::call_once(gKnobsOnce, readKnobs);
  Netif netif;
  if (!findNetif(&netif)) {
    logf("no usable interface (BRAID_SOFTVERBS_IFNAME=%s)", std::getenv("BRAID_SOFTVERBS_IFNAME"));
    errno = ENODEV;
    return nullptr;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = netif.ipv4;
  sa.sin_port = 0;
  socklen_t len = sizeof(sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return nullptr;
  }
  auto* ctx = new Context();
  std::memset(&ctx->base, 0, sizeof(ctx->base));
  ctx->base.device = d;
  ctx->base.cmd_fd = -1;
  ctx->base.async_fd = -1;
  ctx->base.num_comp_vectors = 1;
  ctx->base.ops.poll_cq = svPollCq;
  ctx->base.ops.post_send = svPostSend;
  ctx->base.ops.post_recv = svPostRecv;
  ctx->netif = netif;
  ctx->listenFd = fd;
  ctx->port = ntohs(sa.sin_port);
  if (::pipe2(ctx->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(fd);
    delete ctx;
    return nullptr;
  }
  ctx->thread = std::thread([ctx] { ctx->run(); });
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &netif.ipv4, ip, sizeof(ip));
  logf("opened %s on %s (%s) port %u", kDeviceName, netif.name.c_str(), ip, ctx->port);
  return &ctx->base;
}

int svCloseDevice(ibv_context* c) {
  Context* ctx = ctxOf(c);
  {
    std::lock_guard<std::mutex> lk(ctx->mu);
    ctx->stop = true;
  }
  ctx->wakeAlways();
  ctx->thread.join();
  for (auto& [index, qp] : ctx->qps) {
    (void)index;
    closeConn(qp->outConn);
    closeConn(qp->inConn);
    qp->reaped = true;
  }
  for (auto& p : ctx->pending) closeConn(p);
  for (auto& p : ctx->graveyard) closeConn(p);
  ::close(ctx->listenFd);
  ::close(ctx->wake[0]);
  ::close(ctx->wake[1]);
  delete ctx;
  return 0;
}

int svQueryDevice(ibv_context* c, ibv_device_attr* a) {
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "softverbs 1.0");
  Context* ctx = ctxOf(c);
  uint64_t guid = 0;
  for (int i = 0; i < 6; ++i) guid = (guid << 8) | ctx->netif.mac[i];
  a->node_guid = htobe64(guid);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = ~0ull;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0xffffff;
  a->vendor_part_id = 0x5356;
  a->hw_ver = 1;
  a->max_qp = 255;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = 16384;
  a->max_cqe = kMaxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = 255 * 16;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

int svQueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  if (port != 1) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  const bool up = netifUp(ctxOf(c)->netif.name);
  a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->phys_state = up ? 5 : 3;  // LinkUp : Disabled
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 4;
  a->port_cap_flags = IBV_PORT_CM_SUP;
  a->max_msg_sz = kMaxMsg;
  a->pkey_tbl_len = 1;
  a->active_width = 2;   // 4x
  a->active_speed = 32;  // EDR (25 Gb/s per lane): 100 Gb/s
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

bool gidAt(Context* ctx, int index, ibv_gid* gid, ibv_gid_type* type) {
  if (index < 0 || index > 3) return false;
  std::memset(gid, 0, sizeof(*gid));
  if (index < 2) {
    const uint8_t* m = ctx->netif.mac;
    const uint8_t raw[16] = {0xfe, 0x80, 0,    0,    0,    0,    0,   0, static_cast<uint8_t>(m[0] ^ 2),
                             m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
    std::memcpy(gid->raw, raw, 16);
  } else {
    gid->raw[10] = 0xff;
    gid->raw[11] = 0xff;
    std::memcpy(gid->raw + 12, &ctx->netif.ipv4, 4);
  }
  *type = (index % 2 == 0) ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  return true;
}

int svQueryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  ibv_gid_type type;
  if (port != 1 || !gidAt(ctxOf(c), index, gid, &type)) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

int svQueryGidEx(ibv_context* c, uint32_t port, uint32_t index, ibv_gid_entry* e, uint32_t flags) {
  ibv_gid_type type;
  ibv_gid gid;
  if (port != 1 || flags != 0 || index > 3 || !gidAt(ctxOf(c), static_cast<int>(index), &gid, &type)) {
    return EINVAL;
  }
  std::memset(e, 0, sizeof(*e));
  e->gid = gid;
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = type;
  e->ndev_ifindex = static_cast<uint32_t>(ctxOf(c)->netif.ifindex);
  return 0;
}

ibv_pd* svAllocPd(ibv_context* c) {
  auto* pd = new Pd();
  std::memset(&pd->base, 0, sizeof(pd->base));
  pd->base.context = c;
  pd->ctx = ctxOf(c);
  return &pd->base;
}

int svDeallocPd(ibv_pd* pd) {
  {
    std::lock_guard<std::mutex> lk(gMrMu);
    for (auto& [key, mr] : gMrs) {
      (void)key;
      if (mr->base.pd == pd) return EBUSY;
    }
  }
  delete reinterpret_cast<Pd*>(pd);
  return 0;
}

ibv_mr* svRegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  const int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
  if (pd == nullptr || (access & ~known) != 0 ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
       (access & IBV_ACCESS_LOCAL_WRITE) == 0) ||
      (addr == nullptr && length > 0)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = new Mr();
  std::memset(&mr->base, 0, sizeof(mr->base));
  mr->base.context = pd->context;
  mr->base.pd = pd;
  mr->base.addr = addr;
  mr->base.length = length;
  mr->access = access;
  std::lock_guard<std::mutex> lk(gMrMu);
  uint32_t key;
  do {
    key = static_cast<uint32_t>(gRng());
  } while (key == 0 || gMrs.count(key) != 0 || gMrs.count(key ^ 0x5a5a0f0fu) != 0);
  mr->base.lkey = mr->base.rkey = key;
  mr->base.handle = key;
  gMrs[key] = mr;
  return &mr->base;
}

int svDeregMr(ibv_mr* m) {
  {
    std::lock_guard<std::mutex> lk(gMrMu);
    auto it = gMrs.find(m->lkey);
    if (it == gMrs.end() || &it->second->base != m) return EINVAL;
    gMrs.erase(it);
  }
  delete reinterpret_cast<Mr*>(m);
  return 0;
}

ibv_cq* svCreateCq(ibv_context* c, int cqe, void* cqContext, ibv_comp_channel* channel, int compVector) {
  if (cqe < 1 || cqe > kMaxCqe || channel != nullptr || compVector != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new Cq();
  std::memset(&cq->base, 0, sizeof(cq->base));
  cq->base.context = c;
  cq->base.cq_context = cqContext;
  cq->base.cqe = cqe;
  return &cq->base;
}

int svDestroyCq(ibv_cq* cq) {
  delete cqOf(cq);
  return 0;
}

int svPollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  Cq* c = cqOf(cq);
  if (c->ready.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> lk(c->mu);
  if (c->overrun) return -1;
  int got = 0;
  while (got < n && !c->entries.empty()) {
    wc[got++] = c->entries.front();
    c->entries.pop_front();
  }
  c->ready.store(static_cast<int>(c->entries.size()), std::memory_order_release);
  return got;
}

ibv_qp* svCreateQp(ibv_pd* pd, ibv_qp_init_attr* ia) {
  if (pd == nullptr || ia == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (ia->qp_type != IBV_QPT_RC || ia->srq != nullptr) {
    errno = ia->qp_type == IBV_QPT_RC ? ENOTSUP : EINVAL;
    return nullptr;
  }
  if (ia->send_cq == nullptr || ia->recv_cq == nullptr || ia->cap.max_send_wr > kMaxQpWr ||
      ia->cap.max_recv_wr > kMaxQpWr || ia->cap.max_send_sge > kMaxSge || ia->cap.max_recv_sge > kMaxSge ||
      ia->cap.max_inline_data > kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = ctxOf(pd->context);
  std::lock_guard<std::mutex> lk(ctx->mu);
  // Numbers rotate (as a NIC's do) so that a connection meant for a QP just
  // destroyed does not reach a new QP with the same number.
  int index = 0;
  for (int k = 0; k < 255; ++k) {
    const int i = (ctx->lastIndex + k) % 255 + 1;
    if (ctx->qps.count(i) == 0) {
      index = i;
      ctx->lastIndex = i;
      break;
    }
  }
  if (index == 0) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* qp = new Qp();
  std::memset(&qp->base, 0, sizeof(qp->base));
  qp->base.context = pd->context;
  qp->base.qp_context = ia->qp_context;
  qp->base.pd = pd;
  qp->base.send_cq = ia->send_cq;
  qp->base.recv_cq = ia->recv_cq;
  qp->base.qp_type = IBV_QPT_RC;
  qp->base.qp_num = (static_cast<uint32_t>(ctx->port) << 8) | static_cast<uint32_t>(index);
  qp->base.handle = qp->base.qp_num;
  qp->base.events_completed = 0;
  qp->ctx = ctx;
  qp->index = index;
  qp->cap = ia->cap;
  if (qp->cap.max_send_sge == 0) qp->cap.max_send_sge = 1;
  if (qp->cap.max_recv_sge == 0) qp->cap.max_recv_sge = 1;
  qp->sqSigAll = ia->sq_sig_all != 0;
  setState(qp, IBV_QPS_RESET);
  ctx->qps[index] = qp;
  ia->cap = qp->cap;
  return &qp->base;
}

// The masks each transition needs (NCCL's set) and may carry.
bool checkMask(ibv_qp_state from, ibv_qp_state to, int mask) {
  auto has = [mask](int m) { return (mask & m) == m; };
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return true;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    return has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) return true;
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    return has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER);
  }
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    return has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) return true;
  return false;
}

// Clears the queues (no completions) and drops the connections: RESET.
void resetQp(Qp* qp) {
  qp->sq.clear();
  qp->inflight.clear();
  qp->rq.clear();
  qp->inQ.clear();
  if (qp->outConn) qp->outConn->dead = true;
  if (qp->inConn) qp->inConn->dead = true;
  qp->nextPsn = 0;
  setState(qp, IBV_QPS_RESET);
}

int svModifyQp(ibv_qp* q, ibv_qp_attr* a, int mask) {
  Qp* qp = qpOf(q);
  Context* ctx = qp->ctx;
  std::unique_lock<std::mutex> lk(ctx->mu);
  const ibv_qp_state from = qp->state;
  const ibv_qp_state to = (mask & IBV_QP_STATE) != 0 ? a->qp_state : from;
  if ((mask & IBV_QP_CUR_STATE) != 0 && a->cur_qp_state != from) return EINVAL;
  if (!checkMask(from, to, mask)) {
    logf("QP 0x%x: transition %d -> %d with mask 0x%x rejected", q->qp_num, from, to, mask);
    return EINVAL;
  }
  if (to == IBV_QPS_RESET) {
    resetQp(qp);
    ctx->kick();
    return 0;
  }
  if (to == IBV_QPS_ERR) {
    errorQp(qp, IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR, "moved to ERR by the user");
    ctx->kick();
    return 0;
  }
  if ((mask & IBV_QP_PORT) != 0 && a->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) != 0 && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) != 0 && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
    return EINVAL;
  uint32_t peerIp = 0;
  uint16_t peerPort = 0;
  if ((mask & IBV_QP_AV) != 0) {
    const ibv_ah_attr& ah = a->ah_attr;
    if (ah.is_global != 1 || ah.port_num != 1 || ah.grh.sgid_index > 3) return EINVAL;
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(ah.grh.dgid.raw, kMapped, 12) != 0) {
      logf("QP 0x%x: destination GID is not IPv4-mapped (unsupported)", q->qp_num);
      return EINVAL;
    }
    std::memcpy(&peerIp, ah.grh.dgid.raw + 12, 4);
  }
  if ((mask & IBV_QP_DEST_QPN) != 0) {
    if ((a->dest_qp_num >> 24) != 0 || (a->dest_qp_num & 0xff) == 0) return EINVAL;
    peerPort = static_cast<uint16_t>(a->dest_qp_num >> 8);
  }
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0 && a->max_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0 && a->max_dest_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) != 0 && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) != 0 && a->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) != 0 && a->timeout > 31) return EINVAL;

  if ((mask & IBV_QP_ACCESS_FLAGS) != 0) qp->attr.qp_access_flags = a->qp_access_flags;
  if ((mask & IBV_QP_PKEY_INDEX) != 0) qp->attr.pkey_index = a->pkey_index;
  if ((mask & IBV_QP_PORT) != 0) qp->attr.port_num = a->port_num;
  if ((mask & IBV_QP_AV) != 0) qp->attr.ah_attr = a->ah_attr;
  if ((mask & IBV_QP_PATH_MTU) != 0) qp->attr.path_mtu = a->path_mtu;
  if ((mask & IBV_QP_DEST_QPN) != 0) qp->attr.dest_qp_num = a->dest_qp_num;
  if ((mask & IBV_QP_RQ_PSN) != 0) qp->attr.rq_psn = a->rq_psn;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0) qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
  if ((mask & IBV_QP_MIN_RNR_TIMER) != 0) qp->attr.min_rnr_timer = a->min_rnr_timer;
  if ((mask & IBV_QP_TIMEOUT) != 0) qp->attr.timeout = a->timeout;
  if ((mask & IBV_QP_RETRY_CNT) != 0) qp->attr.retry_cnt = a->retry_cnt;
  if ((mask & IBV_QP_RNR_RETRY) != 0) qp->attr.rnr_retry = a->rnr_retry;
  if ((mask & IBV_QP_SQ_PSN) != 0) qp->attr.sq_psn = a->sq_psn;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0) qp->attr.max_rd_atomic = a->max_rd_atomic;

  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    qp->peerIp = peerIp;
    qp->peerPort = peerPort;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = ctx->netif.ipv4;
    ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    tuneSocket(fd, qp->timeout());
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_addr.s_addr = peerIp;
    peer.sin_port = htons(peerPort);
    if (qp->outConn) ctx->graveyard.push_back(std::move(qp->outConn));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer));
    c->connecting = rc != 0 && errno == EINPROGRESS;
    if (rc != 0 && !c->connecting) c->dead = true;  // the progress thread closes it; the QP errors
    const HelloFrame hello{kHelloMagic, q->qp_num, a->dest_qp_num};
    c->queue(kHello, &hello, sizeof(hello));
    qp->outConn = std::move(c);
    if (qp->inConn && (qp->inConn->peerQpn != a->dest_qp_num || qp->inConn->peerIp != peerIp)) {
      qp->inConn->dead = true;  // someone else's connection (a stale one): not our peer
    } else if (qp->inConn) {
      qp->inConn->lastRecv = Clock::now();
    }
    setState(qp, IBV_QPS_RTR);
    if (qp->outConn->dead) peerLost(qp, "connect failed");
    logf("QP 0x%x -> RTR, peer QP 0x%x", q->qp_num, a->dest_qp_num);
  } else {
    if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) qp->nextPsn = qp->attr.sq_psn & 0xffffff;
    setState(qp, to);
  }
  ctx->kick();
  return 0;
}

int svQueryQp(ibv_qp* q, ibv_qp_attr* a, int mask, ibv_qp_init_attr* ia) {
  Qp* qp = qpOf(q);
  std::lock_guard<std::mutex> lk(qp->ctx->mu);
  (void)mask;
  *a = qp->attr;
  a->qp_state = qp->state;
  a->cur_qp_state = qp->state;
  a->cap = qp->cap;
  a->path_mig_state = IBV_MIG_MIGRATED;
  if (ia != nullptr) {
    std::memset(ia, 0, sizeof(*ia));
    ia->qp_context = q->qp_context;
    ia->send_cq = q->send_cq;
    ia->recv_cq = q->recv_cq;
    ia->cap = qp->cap;
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = qp->sqSigAll ? 1 : 0;
  }
  return 0;
}

int svDestroyQp(ibv_qp* q) {
  Qp* qp = qpOf(q);
  Context* ctx = qp->ctx;
  {
    std::unique_lock<std::mutex> lk(ctx->mu);
    qp->destroyed = true;
    ctx->kick();
    ctx->reapedCv.wait(lk, [&] { return qp->reaped || ctx->stop; });
    if (!qp->reaped) {  // the progress thread is gone (closeDevice raced): tidy here
      closeConn(qp->outConn);
      closeConn(qp->inConn);
      ctx->qps.erase(qp->index);
    }
  }
  delete qp;
  return 0;
}

int svPostSend(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = qpOf(q);
  Context* ctx = qp->ctx;
  std::lock_guard<std::mutex> lk(ctx->mu);
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
      err = EINVAL;
    } else if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
               wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM &&
               wr->opcode != IBV_WR_RDMA_READ) {
      err = EINVAL;
    } else if (wr->opcode == IBV_WR_RDMA_READ && (wr->send_flags & IBV_SEND_INLINE) != 0) {
      err = EINVAL;
    } else if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(qp->cap.max_send_sge) ||
               (wr->num_sge > 0 && wr->sg_list == nullptr)) {
      err = EINVAL;
    } else if (qp->sq.size() + qp->inflight.size() >= std::max<uint32_t>(qp->cap.max_send_wr, 1)) {
      err = ENOMEM;
    }
    SendWqe w;
    uint64_t total = 0;
    if (err == 0) {
      w.wrId = wr->wr_id;
      w.opcode = wr->opcode;
      w.signaled = qp->sqSigAll || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
      w.imm = wr->imm_data;
      w.remoteAddr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
      w.isInline = (wr->send_flags & IBV_SEND_INLINE) != 0;
      for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
      if (total > kMaxMsg ||
          (w.isInline && total > std::max<uint32_t>(qp->cap.max_inline_data, kMaxInline))) {
        err = EINVAL;
      }
    }
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      return err;
    }
    w.length = static_cast<uint32_t>(total);
    if (w.isInline) {
      w.inlineData.resize(total);
      uint8_t* p = w.inlineData.data();
      for (int i = 0; i < wr->num_sge; ++i) {
        if (wr->sg_list[i].length == 0) continue;
        std::memcpy(p, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
        p += wr->sg_list[i].length;
      }
    } else {
      if (wr->num_sge > 0) w.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    }
    if (qp->state == IBV_QPS_ERR) {
      completeSend(qp, w, IBV_WC_WR_FLUSH_ERR);
      continue;
    }
    qp->sq.push_back(std::move(w));
  }
  ctx->kick();
  return 0;
}

int svPostRecv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = qpOf(q);
  Context* ctx = qp->ctx;
  std::lock_guard<std::mutex> lk(ctx->mu);
  bool posted = false;
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (qp->state == IBV_QPS_RESET) {
      err = EINVAL;
    } else if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(qp->cap.max_recv_sge) ||
               (wr->num_sge > 0 && wr->sg_list == nullptr)) {
      err = EINVAL;
    } else if (qp->rq.size() >= std::max<uint32_t>(qp->cap.max_recv_wr, 1)) {
      err = ENOMEM;
    }
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      if (posted) ctx->kick();
      return err;
    }
    RecvWqe r;
    r.wrId = wr->wr_id;
    if (wr->num_sge > 0) r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    if (qp->state == IBV_QPS_ERR) {
      completeRecv(qp, r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, false, 0);
      continue;
    }
    qp->rq.push_back(std::move(r));
    posted = true;
  }
  if (posted) {
    execute(qp);  // messages held for want of a receive (RNR)
    ctx->kick();
  }
  return 0;
}

const VerbsApi kTable = [] {
  VerbsApi t;
  t.origin = "software verbs device";
  t.getDeviceList = svGetDeviceList;
  t.freeDeviceList = svFreeDeviceList;
  t.getDeviceName = svGetDeviceName;
  t.openDevice = svOpenDevice;
  t.closeDevice = svCloseDevice;
  t.queryDevice = svQueryDevice;
  t.queryPort = svQueryPort;
  t.queryGid = svQueryGid;
  t.queryGidEx = svQueryGidEx;
  t.allocPd = svAllocPd;
  t.deallocPd = svDeallocPd;
  t.regMr = svRegMr;
  t.regDmabufMr = nullptr;
  t.deregMr = svDeregMr;
  t.createCq = svCreateCq;
  t.destroyCq = svDestroyCq;
  t.pollCq = svPollCq;
  t.createQp = svCreateQp;
  t.modifyQp = svModifyQp;
  t.queryQp = svQueryQp;
  t.destroyQp = svDestroyQp;
  t.postSend = svPostSend;
  t.postRecv = svPostRecv;
  return t;
}();

}  // namespace

uint64_t rdmaWritesSent() {
  return gWritesSent.load();
}

void resetFaultsForTesting() {
  std::call_once(gKnobsOnce, [] {});
  readKnobs();
  gWritesSent = 0;
  gLinkFailed = false;
}

}  // namespace softverbs
}  // namespace braid

extern "C" const braid::VerbsApi* braid_verbs_table() {
  return &braid::softverbs::kTable;
}
