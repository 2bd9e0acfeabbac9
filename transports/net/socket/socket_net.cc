#include "transports/net/socket/socket_net.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "platform/socket.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {

IntParam paramSocketNthreads("SOCKET_NTHREADS", -1,
                             "Helper threads per socket-transport connection (0: the proxy thread moves the "
                             "bytes itself); each serves NSOCKS_PERTHREAD TCP streams; -1: 1 on machines "
                             "with 8 or more cores, else 0 (at most 64 are used)",
                             -1, 1 << 20);
IntParam paramNsocksPerthread("NSOCKS_PERTHREAD", 1,
                              "TCP streams per helper thread of a socket-transport connection (with "
                              "SOCKET_NTHREADS=0: streams the proxy drives)",
                              1, 1 << 20);
// TCP_USER_TIMEOUT takes milliseconds in an unsigned int.
IntParam paramNetLinkTimeout("NET_LINK_TIMEOUT", 20,
                             "Seconds a socket-transport stream may go unanswered (TCP keepalive and "
                             "TCP_USER_TIMEOUT) before the connection fails with an error naming the peer "
                             "(1 to 4000000)",
                             1, 4000000);

namespace {

// NCCL_SOCKET_NTHREADS, or its default: on a machine with cores to spare a
// helper thread per connection moves the bytes, so the proxy thread is no
// longer the bottleneck (16 cores, 2 ranks over loopback: all-reduce busbw
// 6.1 against 2.2 GB/s at 256 MB); on 2 cores helpers only compete with
// the ranks (0.2-0.4 against 0.5-1.0 GB/s).
int helperThreads() {
  const int64_t v = paramSocketNthreads.get();
  if (v >= 0) return static_cast<int>(std::min<int64_t>(v, 64));
  static const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return cores >= 8 ? 1 : 0;
}

constexpr uint32_t kHelloMagic = 0x42484c4fu;   // "BHLO"
constexpr uint32_t kFrameMagic = 0x4246524du;   // "BFRM"
constexpr uint32_t kHandleMagic = 0x424e4554u;  // "BNET"
constexpr size_t kMinPart = 64 * 1024;
constexpr int kMaxStreams = 64;
constexpr double kHelloTimeoutSec = 5;

struct Hello {
  uint32_t magic;
  uint32_t index;  // this stream's index
  uint64_t id;     // the listen it is for
  uint64_t secret;
  uint32_t nstreams;
  uint32_t pad;
};

struct Frame {
  uint32_t magic;
  uint32_t tag;
  uint64_t size;
};

struct HandleData {
  uint32_t magic;
  uint32_t pad;
  uint64_t id;
  uint64_t secret;
  char address[96];  // "10.0.0.1:40000"
};
static_assert(sizeof(HandleData) <= kNetHandleBytes, "handle too large");

// Payload parts of a message of `size` bytes over `n` streams: contiguous,
// at least kMinPart each (fewer parts for small messages).
int partCount(size_t size, int n) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(n), size / kMinPart)));
}
void partRange(size_t size, int parts, int i, size_t* lo, size_t* len) {
  size_t per = (size + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  per = (per + 4095) / 4096 * 4096;
  *lo = std::min(size, per * static_cast<size_t>(i));
  *len = std::min(size, *lo + per) - *lo;
}

void tuneDataStream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int timeout = static_cast<int>(std::max<int64_t>(1, paramNetLinkTimeout.get()));
  int idle = std::max(1, timeout / 2), intvl = std::max(1, timeout / 8), cnt = 4;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  unsigned userTimeoutMs = static_cast<unsigned>(timeout) * 1000u;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof(userTimeoutMs));
}

uint64_t randomU64() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32));
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

}  // namespace

void tuneNetLinkSocket(int fd) {
  tuneDataStream(fd);
}

// ------------------------------------------------------------ the connection

class SocketComm;

class NetRequest {
 public:
  SocketComm* comm = nullptr;
  bool used = false;
  bool isSend = false;
  char* data = nullptr;
  size_t capacity = 0;  // receive: the posted buffer's size
  size_t size = 0;      // bytes of the message (receive: known once the frame arrived)
  uint32_t tag = 0;
  Frame frame{};
  int partsLeft = 0;  // parts (and, for a receive, the frame) still moving
};

namespace {

// One queued transfer on one stream: optionally the frame, then a part.
struct Task {
  NetRequest* req;
  bool withFrame;  // stream 0: the frame comes first
  size_t frameDone = 0;
  bool frameChecked = false;  // a receive's frame was checked and its parts queued
  char* data = nullptr;       // the part (set for a receive once the frame arrived)
  size_t len = 0;
  size_t done = 0;
};

}  // namespace

class SocketComm {
 public:
  SocketComm(bool isSend, std::vector<Socket> streams, std::string peer)
      : isSend_(isSend), streams_(std::move(streams)), peer_(std::move(peer)), queues_(streams_.size()) {
    for (auto& s : streams_) tuneDataStream(s.fd());
    threads_ = std::min<int>(helperThreads(), static_cast<int>(streams_.size()));
    for (int t = 0; t < threads_; ++t) {
      wake_.push_back(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    }
    for (int t = 0; t < threads_; ++t) helpers_.emplace_back([this, t] { helperLoop(t); });
  }
  ~SocketComm() {
    if (isSend_) sayGoodbye();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    for (int t = 0; t < threads_; ++t) wakeThread(t);
    for (auto& th : helpers_) th.join();
    for (int fd : wake_) ::close(fd);
  }

  // An orderly close: a frame with kNetClosedTag, so the receiver tells a
  // destroyed communicator from a dead process. Best effort, never blocks long.
  void sayGoodbye() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return;
      for (const auto& q : queues_) {
        if (!q.empty()) return;
      }
    }
    const Frame bye{kFrameMagic, kNetClosedTag, 0};
    streams_[0].sendAll(&bye, sizeof(bye), deadlineIn(0.2), nullptr).ignore();
  }

  const std::string& peer() const { return peer_; }
  bool isSend() const { return isSend_; }

  Status post(bool send, char* data, size_t size, uint32_t tag, NetRequest** out) {
    *out = nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    NetRequest* r = nullptr;
    for (auto& q : reqs_) {
      if (!q.used) {
        r = &q;
        break;
      }
    }
    if (r == nullptr) return okStatus();
    *r = NetRequest();
    r->comm = this;
    r->used = true;
    r->isSend = send;
    r->data = data;
    r->tag = tag;
    if (closed_) {
      r->tag = kNetClosedTag;
    } else if (send) {
      r->size = size;
      r->frame = Frame{kFrameMagic, tag, size};
      const int parts = partCount(size, static_cast<int>(streams_.size()));
      r->partsLeft = parts;
      for (int i = 0; i < parts; ++i) {
        Task t{r, i == 0};
        size_t lo, len;
        partRange(size, parts, i, &lo, &len);
        t.data = data + lo;
        t.len = len;
        enqueue(i, t);
      }
    } else {
      r->capacity = size;
      r->partsLeft = 1;  // the frame; its arrival adds the parts
      enqueue(0, Task{r, true});
    }
    *out = r;
    return okStatus();
  }

  Status test(NetRequest* r, bool* done, size_t* size, uint32_t* tag) {
    if (threads_ == 0) {
      for (size_t s = 0; s < streams_.size(); ++s) progress(static_cast<int>(s));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    *done = r->partsLeft == 0;
    if (*done) {
      if (size != nullptr) *size = r->size;
      if (tag != nullptr) *tag = r->tag;
      r->used = false;
    }
    return okStatus();
  }

 private:
  void enqueue(int stream, const Task& t) {  // mu_ held
    queues_[static_cast<size_t>(stream)].push_back(t);
    if (threads_ > 0) wakeThread(stream % threads_);
  }
  void wakeThread(int t) {
    uint64_t one = 1;
    ssize_t n = ::write(wake_[static_cast<size_t>(t)], &one, sizeof(one));
    (void)n;
  }

  void fail(Status s) {  // mu_ held
    if (error_.ok()) {
      error_ = s.withContext(strCat(isSend_ ? "sending to " : "receiving from ", peer_));
      BRAID_INFO(kLogNet, "NET/Socket: %s", error_.message().c_str());
    }
  }

  // Moves what the stream can move now without blocking. Returns whether
  // bytes moved; *wantWrite says which readiness the stream waits for.
  bool progress(int stream, bool* wantWrite = nullptr, bool* pending = nullptr) {
    const int fd = streams_[static_cast<size_t>(stream)].fd();
    auto& q = queues_[static_cast<size_t>(stream)];
    bool moved = false;
    while (true) {
      Task* t;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_.ok() || q.empty()) {
          if (pending != nullptr) *pending = false;
          return moved;
        }
        t = &q.front();  // only this stream's owner pops; push_back keeps references valid
      }
      Status st;
      const size_t before = t->frameDone + t->done;
      const bool finished = isSend_ ? sendSome(fd, t, &st) : recvSome(fd, t, &st);
      moved |= t->frameDone + t->done != before;
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok()) {
        fail(std::move(st));
        return moved;
      }
      if (!finished) {
        if (wantWrite != nullptr) *wantWrite = isSend_;
        if (pending != nullptr) *pending = true;
        return moved;
      }
      // A receive's frame just arrived: check it, then queue the parts.
      if (!isSend_ && t->withFrame && !t->frameChecked) {
        NetRequest* r = t->req;
        t->frameChecked = true;
        if (r->frame.magic != kFrameMagic) {
          fail(remoteError("a garbled frame arrived (magic 0x", std::hex, r->frame.magic, ")"));
          return moved;
        }
        if (r->frame.size > r->capacity) {
          fail(remoteError("a message of ", r->frame.size, " bytes arrived where ", r->capacity,
                           " were posted (the ranks disagree on the connector layout)"));
          return moved;
        }
        r->size = r->frame.size;
        r->tag = r->frame.tag;
        if (r->tag == kNetClosedTag) {  // the sender closed its comm: nothing follows
          BRAID_INFO(kLogNet, "NET/Socket: %s closed the connection", peer_.c_str());
          // Receives queued behind the goodbye complete the same way. (Other
          // streams hold only parts of earlier messages: the sender finished
          // those before saying goodbye, so they complete normally.)
          closed_ = true;
          for (Task& waiting : q) {
            waiting.req->size = 0;
            waiting.req->tag = kNetClosedTag;
            waiting.req->partsLeft = 0;
          }
          q.clear();
          return moved;
        }
        const int parts = partCount(r->size, static_cast<int>(streams_.size()));
        r->partsLeft = parts;
        for (int i = 0; i < parts; ++i) {
          size_t lo, len;
          partRange(r->size, parts, i, &lo, &len);
          if (i == 0) {
            t->data = r->data + lo;  // stream 0 goes on with part 0
            t->len = len;
          } else {
            Task p{r, false};
            p.data = r->data + lo;
            p.len = len;
            enqueue(i, p);
          }
        }
        if (t->len > 0) continue;
      }
      --t->req->partsLeft;
      q.pop_front();
    }
  }

  static bool sendSome(int fd, Task* t, Status* st) {
    while (true) {
      iovec iov[2];
      int n = 0;
      if (t->withFrame && t->frameDone < sizeof(Frame)) {
        iov[n++] = {reinterpret_cast<char*>(&t->req->frame) + t->frameDone, sizeof(Frame) - t->frameDone};
      }
      if (t->done < t->len) iov[n++] = {t->data + t->done, t->len - t->done};
      if (n == 0) return true;
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      ssize_t k = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        *st = errno == EPIPE || errno == ECONNRESET ? remoteError("the peer closed the connection")
                                                    : errnoError("send", errno);
        return false;
      }
      size_t left = static_cast<size_t>(k);
      if (t->withFrame && t->frameDone < sizeof(Frame)) {
        size_t f = std::min(left, sizeof(Frame) - t->frameDone);
        t->frameDone += f;
        left -= f;
      }
      t->done += left;
    }
  }

  static bool recvSome(int fd, Task* t, Status* st) {
    while (true) {
      char* p;
      size_t want;
      if (t->withFrame && t->frameDone < sizeof(Frame)) {
        p = reinterpret_cast<char*>(&t->req->frame) + t->frameDone;
        want = sizeof(Frame) - t->frameDone;
      } else if (t->withFrame && !t->frameChecked) {
        return true;  // the frame is in: the caller checks it and queues the parts
      } else if (t->done < t->len) {
        p = t->data + t->done;
        want = t->len - t->done;
      } else {
        return true;
      }
      ssize_t k = ::recv(fd, p, want, MSG_DONTWAIT);
      if (k == 0) {
        *st = remoteError("the peer closed the connection (its process died or closed the communicator)");
        return false;
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        *st = errno == ECONNRESET  ? remoteError("the peer reset the connection")
              : errno == ETIMEDOUT ? remoteError("the link timed out (no answer within NET_LINK_TIMEOUT)")
                                   : errnoError("recv", errno);
        return false;
      }
      if (t->withFrame && t->frameDone < sizeof(Frame)) {
        t->frameDone += static_cast<size_t>(k);
      } else {
        t->done += static_cast<size_t>(k);
      }
    }
  }

  void helperLoop(int t) {
    std::vector<int> mine;
    for (size_t s = static_cast<size_t>(t); s < streams_.size(); s += static_cast<size_t>(threads_)) {
      mine.push_back(static_cast<int>(s));
    }
    std::vector<pollfd> fds;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
      }
      fds.clear();
      bool any = false;
      for (int s : mine) {
        bool wantWrite = false, pending = false;
        any |= progress(s, &wantWrite, &pending);
        if (pending) {
          fds.push_back(
              {streams_[static_cast<size_t>(s)].fd(), static_cast<short>(wantWrite ? POLLOUT : POLLIN), 0});
        }
      }
      if (any) continue;
      fds.push_back({wake_[static_cast<size_t>(t)], POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      uint64_t drain;
      ssize_t n = ::read(wake_[static_cast<size_t>(t)], &drain, sizeof(drain));
      (void)n;
    }
  }

  const bool isSend_;
  std::vector<Socket> streams_;
  const std::string peer_;
  std::mutex mu_;
  std::vector<std::deque<Task>> queues_;
  NetRequest reqs_[kNetMaxRequests];
  Status error_;
  bool stop_ = false;
  bool closed_ = false;  // the sender said goodbye
  int threads_ = 0;
  std::vector<int> wake_;
  std::vector<std::thread> helpers_;
};

class NetSendComm : public SocketComm {
  using SocketComm::SocketComm;
};
class NetRecvComm : public SocketComm {
  using SocketComm::SocketComm;
};

class NetListenComm {
 public:
  int dev = 0;
  uint64_t id = 0;
  uint64_t secret = 0;
};

// ------------------------------------------------------------ the Net

namespace {

class SocketNet final : public Net {
 public:
  Status init() {
    BRAID_CHECK(findInterfaces(&ifaces_).withContext("choosing the socket transport's interfaces"));
    devs_.resize(ifaces_.size());
    for (size_t i = 0; i < ifaces_.size(); ++i) {
      BRAID_INFO(kLogNet, "NET/Socket: device %zu is %s (%s)", i, ifaces_[i].name.c_str(),
                 ifaces_[i].address.toString().c_str());
    }
    return okStatus();
  }

  const char* name() const override { return "Socket"; }
  int devices() const override { return static_cast<int>(ifaces_.size()); }

  Status properties(int dev, NetProperties* out) const override {
    BRAID_CHECK(checkDev(dev));
    const NetInterface& ni = ifaces_[static_cast<size_t>(dev)];
    out->name = ni.name;
    std::string addr = ni.address.toString();
    out->address = addr.substr(0, addr.rfind(':'));
    describePciDevice(strCat("/sys/class/net/", ni.name, "/device"), out);
    out->speedMbps = 0;
    if (FILE* f = std::fopen(strCat("/sys/class/net/", ni.name, "/speed").c_str(), "r")) {
      if (std::fscanf(f, "%d", &out->speedMbps) != 1 || out->speedMbps < 0) out->speedMbps = 0;
      std::fclose(f);
    }
    std::lock_guard<std::mutex> lock(mu_);
    const Device& d = devs_[static_cast<size_t>(dev)];
    out->port = d.listener.isOpen() ? d.address.port() : 0;
    out->maxComms = 65536;
    return okStatus();
  }

  Status listen(int dev, NetHandle* handle, NetListenComm** listenComm) override {
    BRAID_CHECK(checkDev(dev));
    std::lock_guard<std::mutex> lock(mu_);
    Device& d = devs_[static_cast<size_t>(dev)];
    if (!d.listener.isOpen()) {
      BRAID_CHECK(Socket::listen(ifaces_[static_cast<size_t>(dev)].address, &d.listener)
                      .withContext(strCat("listening on ", ifaces_[static_cast<size_t>(dev)].name)));
      BRAID_CHECK(d.listener.localAddress(&d.address));
      BRAID_INFO(kLogNet, "NET/Socket: device %d listens on %s", dev, d.address.toString().c_str());
    } else {
      BRAID_CHECK(drain(&d));  // strays past their deadline go even while no accept runs
    }
    auto lc = std::make_unique<NetListenComm>();
    lc->dev = dev;
    lc->id = randomU64();
    lc->secret = randomU64();
    HandleData h{};
    h.magic = kHandleMagic;
    h.id = lc->id;
    h.secret = lc->secret;
    std::strncpy(h.address, d.address.toString().c_str(), sizeof(h.address) - 1);
    std::memset(handle, 0, sizeof(*handle));
    std::memcpy(handle->bytes, &h, sizeof(h));
    d.pending[lc->id] = Pending{lc->secret, {}, 0};
    *listenComm = lc.release();
    return okStatus();
  }

  Status connect(int dev, const NetHandle& handle, NetSendComm** sendComm) override {
    BRAID_CHECK(checkDev(dev));
    HandleData h;
    std::memcpy(&h, handle.bytes, sizeof(h));
    h.address[sizeof(h.address) - 1] = '\0';
    if (h.magic != kHandleMagic) return internalError("a socket-transport handle with a bad magic");
    SocketAddress addr;
    BRAID_CHECK(SocketAddress::parse(h.address, &addr));
    const int nstreams = streamsPerConnection();
    std::vector<Socket> streams(static_cast<size_t>(nstreams));
    const Deadline deadline = deadlineIn(static_cast<double>(paramNetLinkTimeout.get()));
    for (int i = 0; i < nstreams; ++i) {
      BRAID_CHECK(Socket::connect(addr, deadline, nullptr, &streams[static_cast<size_t>(i)]));  // names the address
      Hello hello{kHelloMagic, static_cast<uint32_t>(i), h.id, h.secret, static_cast<uint32_t>(nstreams), 0};
      BRAID_CHECK(streams[static_cast<size_t>(i)]
                      .sendAll(&hello, sizeof(hello), deadline, nullptr)
                      .withContext(strCat("introducing a stream to ", h.address)));
    }
    *sendComm = new NetSendComm(true, std::move(streams), h.address);
    return okStatus();
  }

  Status accept(NetListenComm* lc, NetRecvComm** recvComm) override {
    *recvComm = nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    Device& d = devs_[static_cast<size_t>(lc->dev)];
    BRAID_CHECK(drain(&d));
    auto it = d.pending.find(lc->id);
    if (it == d.pending.end()) return internalError("accept on an unknown socket-transport listen");
    Pending& p = it->second;
    if (p.nstreams == 0 || static_cast<int>(p.streams.size()) < p.nstreams) return okStatus();
    for (auto& s : p.streams) {
      if (!s.isOpen()) return okStatus();
    }
    SocketAddress peer;
    socklen_t len = sizeof(peer.storage);
    getpeername(p.streams[0].fd(), reinterpret_cast<sockaddr*>(&peer.storage), &len);
    peer.length = len;
    *recvComm = new NetRecvComm(false, std::move(p.streams), peer.toString());
    d.pending.erase(it);
    return okStatus();
  }

  Status regMr(void*, void* data, size_t size, void** mhandle) override {
    if (data == nullptr && size > 0) return invalidArgument("registering a null buffer");
    *mhandle = data;  // TCP needs no registration
    return okStatus();
  }
  Status deregMr(void*, void*) override { return okStatus(); }

  Status isend(NetSendComm* comm, const void* data, size_t size, uint32_t tag, void*,
               NetRequest** request) override {
    return comm->post(true, static_cast<char*>(const_cast<void*>(data)), size, tag, request);
  }
  Status irecv(NetRecvComm* comm, void* data, size_t size, void*, NetRequest** request) override {
    return comm->post(false, static_cast<char*>(data), size, 0, request);
  }
  Status test(NetRequest* request, bool* done, size_t* size, uint32_t* tag) override {
    return request->comm->test(request, done, size, tag);
  }

  void closeSend(NetSendComm* comm) override { delete comm; }
  void closeRecv(NetRecvComm* comm) override { delete comm; }
  void closeListen(NetListenComm* lc) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int dev = lc->dev;
    Device& d = devs_[static_cast<size_t>(dev)];
    d.pending.erase(lc->id);
    delete lc;
    if (d.pending.empty()) stopListening(&d, dev);
  }

 private:
  struct Pending {
    uint64_t secret;
    std::vector<Socket> streams;
    int nstreams;
  };
  struct Incoming {
    Socket socket;
    SocketAddress from;
    Hello hello{};
    size_t got = 0;
    Deadline deadline;
  };
  struct Device {
    Socket listener;
    SocketAddress address;
    std::map<uint64_t, Pending> pending;
    std::vector<Incoming> incoming;
  };

  static int streamsPerConnection() {
    const int64_t threads = std::max(1, helperThreads());
    const int64_t per = std::max<int64_t>(1, paramNsocksPerthread.get());
    return static_cast<int>(std::min<int64_t>(kMaxStreams, threads * per));
  }

  Status checkDev(int dev) const {
    if (dev < 0 || dev >= devices())
      return invalidArgument("socket-transport device ", dev, " does not exist");
    return okStatus();
  }

  // No connection is being set up on `d`: nothing may connect until the
  // next listen(). The strays accepted so far are dropped, and closing the
  // listener refuses those still queued on it, so no socket stays open
  // between setups (a listener living as long as the process kept strays
  // nobody accepted any more). mu_ held.
  void stopListening(Device* d, int dev) {
    for (Incoming& in : d->incoming) {
      BRAID_WARN(
          "NET/Socket: dropped a connection from %s: it sent %zu of %zu hello bytes and no connection "
          "is being set up any more",
          in.from.toString().c_str(), in.got, sizeof(Hello));
    }
    d->incoming.clear();
    if (!d->listener.isOpen()) return;
    BRAID_INFO(kLogNet, "NET/Socket: device %d stops listening on %s: no connection is being set up", dev,
               d->address.toString().c_str());
    d->listener.close();
  }

  // Accepts waiting connections and reads their hellos without blocking;
  // strays are dropped with a warning. mu_ held.
  Status drain(Device* d) {
    while (true) {
      Incoming in;
      BRAID_CHECK(d->listener.tryAccept(&in.socket, &in.from));
      if (!in.socket.isOpen()) break;
      in.deadline = deadlineIn(kHelloTimeoutSec);
      d->incoming.push_back(std::move(in));
    }
    for (size_t i = 0; i < d->incoming.size();) {
      Incoming& in = d->incoming[i];
      size_t got = 0;
      Status st =
          in.socket.recvSome(reinterpret_cast<char*>(&in.hello) + in.got, sizeof(Hello) - in.got, &got);
      in.got += got;
      const char* why = nullptr;
      if (!st.ok()) {
        why = "it closed before introducing itself";
      } else if (in.got < sizeof(Hello)) {
        if (Clock::now() > in.deadline) why = "it sent no hello within 5 s";
      } else {
        auto it = d->pending.find(in.hello.id);
        if (in.hello.magic != kHelloMagic) {
          why = "its hello has a bad magic";
        } else if (it == d->pending.end() || it->second.secret != in.hello.secret) {
          why = "its hello names no connection this process waits for";
        } else if (in.hello.nstreams == 0 || in.hello.nstreams > kMaxStreams ||
                   in.hello.index >= in.hello.nstreams ||
                   (it->second.nstreams != 0 && it->second.nstreams != static_cast<int>(in.hello.nstreams))) {
          why = "its hello has an impossible stream count";
        } else {
          Pending& p = it->second;
          p.nstreams = static_cast<int>(in.hello.nstreams);
          p.streams.resize(static_cast<size_t>(p.nstreams));
          p.streams[in.hello.index] = std::move(in.socket);
          d->incoming.erase(d->incoming.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
      }
      if (why != nullptr) {
        BRAID_WARN("NET/Socket: dropped a connection from %s: %s", in.from.toString().c_str(), why);
        d->incoming.erase(d->incoming.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
    return okStatus();
  }

  std::vector<NetInterface> ifaces_;
  mutable std::mutex mu_;
  std::vector<Device> devs_;
};

}  // namespace

Status socketNet(Net** out) {
  static std::mutex mu;
  static SocketNet* net = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (net == nullptr) {
    auto n = std::make_unique<SocketNet>();
    BRAID_CHECK(n->init());
    net = n.release();
  }
  *out = net;
  return okStatus();
}

}  // namespace braid
