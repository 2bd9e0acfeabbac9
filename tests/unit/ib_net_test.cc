// The verbs Net on the software verbs device (tests/softverbs): connection
// setup, messages of 0, 1, 4 KiB and 1 MiB + 3 bytes checked, tags, several
// requests in flight, the length check at both ends, orderly close, several
// queue pairs per connection; and, in forked processes (each opens its own
// device after the fork), a peer in another process, a killed peer and a
// corrupted rkey, each an error naming the peer in bounded time.
#include "transports/net/ibverbs/ib_net.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "softverbs.h"
#include "transports/net/ibverbs/verbs_api.h"
#include "util/param.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  Net* net = nullptr;
  NetSendComm* send = nullptr;
  NetRecvComm* recv = nullptr;
};

// Connects a pair in one thread: connect() and accept() are non-blocking and
// each drives this process's listener.
Status connectPair(Net* net, Pair* p) {
  p->net = net;
  NetHandle handle;
  NetListenComm* listen = nullptr;
  BRAID_CHECK(net->listen(0, &handle, &listen));
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((p->send == nullptr || p->recv == nullptr) && Clock::now() < deadline) {
    if (p->send == nullptr) BRAID_CHECK(net->connect(0, handle, &p->send));
    if (p->recv == nullptr) BRAID_CHECK(net->accept(listen, &p->recv));
  }
  net->closeListen(listen);
  if (p->send == nullptr || p->recv == nullptr) return internalError("the pair did not connect within 20 s");
  return okStatus();
}

// Drives requests until every one completed or one failed (bounded).
Status waitAll(Net* net, std::vector<NetRequest*> reqs, std::vector<size_t>* sizes = nullptr,
               std::vector<uint32_t>* tags = nullptr, double seconds = 20) {
  if (sizes != nullptr) sizes->assign(reqs.size(), 0);
  if (tags != nullptr) tags->assign(reqs.size(), 0);
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  size_t left = reqs.size();
  while (left > 0) {
    if (Clock::now() > deadline) return internalError("requests did not complete in time");
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == nullptr) continue;
      bool done = false;
      size_t size = 0;
      uint32_t tag = 0;
      BRAID_CHECK(net->test(reqs[i], &done, &size, &tag));
      if (done) {
        if (sizes != nullptr) (*sizes)[i] = size;
        if (tags != nullptr) (*tags)[i] = tag;
        reqs[i] = nullptr;
        --left;
      }
    }
  }
  return okStatus();
}

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((seed + 1) * (i + 1) % 251);
  return v;
}

class IbverbsNet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { setVerbsApiForTesting(braid_verbs_table()); }
  static void TearDownTestSuite() { setVerbsApiForTesting(nullptr); }
  void SetUp() override {
    ASSERT_TRUE(ibNet(&net_).ok());
    Status s = connectPair(net_, &p_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    if (p_.send != nullptr) net_->closeSend(p_.send);
    if (p_.recv != nullptr) net_->closeRecv(p_.recv);
  }
  Net* net_ = nullptr;
  Pair p_;
};

TEST_F(IbverbsNet, DeviceAndProperties) {
  EXPECT_STREQ(net_->name(), "IB");
  ASSERT_GE(net_->devices(), 1);
  NetProperties props;
  ASSERT_TRUE(net_->properties(0, &props).ok());
  EXPECT_EQ(props.name, "softroce0:1");
  EXPECT_EQ(props.speedMbps, 100000);     // EDR x4
  EXPECT_EQ(props.address, "127.0.0.1");  // GID 3, ::ffff:127.0.0.1 (RoCE v2, IPv4)
}

TEST_F(IbverbsNet, MessagesOfEverySizeArriveWithTheirTags) {
  const size_t sizes[] = {0, 1, 4096, (1u << 20) + 3};
  for (size_t k = 0; k < 4; ++k) {
    const size_t n = sizes[k];
    std::vector<char> out = pattern(n, static_cast<int>(k)), in(n + 64, 'x');
    NetRequest *r = nullptr, *s = nullptr;
    ASSERT_TRUE(net_->irecv(p_.recv, in.data(), in.size(), nullptr, &r).ok());
    ASSERT_TRUE(net_->isend(p_.send, out.data(), n, 100 + static_cast<uint32_t>(k), nullptr, &s).ok());
    ASSERT_NE(r, nullptr);
    ASSERT_NE(s, nullptr);
    std::vector<size_t> got;
    std::vector<uint32_t> tags;
    Status st = waitAll(net_, {r, s}, &got, &tags);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got[0], n);
    EXPECT_EQ(tags[0], 100 + k);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << n << " bytes";  // n = 0: out.data() is null
    EXPECT_EQ(in[n], 'x') << "written past the message";
  }
}

TEST_F(IbverbsNet, ManyRequestsInFlight) {
  const size_t n = 70000;  // parts over the queue pairs when there are several
  std::vector<std::vector<char>> out, in;
  std::vector<NetRequest*> recvs, sends;
  for (int i = 0; i < kNetMaxRequests; ++i) {
    out.push_back(pattern(n - static_cast<size_t>(i), i));
    in.emplace_back(n, 0);
  }
  for (int i = 0; i < kNetMaxRequests; ++i) {
    NetRequest* r = nullptr;
    ASSERT_TRUE(net_->irecv(p_.recv, in[i].data(), n, nullptr, &r).ok());
    ASSERT_NE(r, nullptr);
    recvs.push_back(r);
  }
  NetRequest* extra = nullptr;
  std::vector<char> spare(16);
  ASSERT_TRUE(net_->irecv(p_.recv, spare.data(), spare.size(), nullptr, &extra).ok());
  EXPECT_EQ(extra, nullptr) << "more than kNetMaxRequests receives in flight";
  for (int i = 0; i < kNetMaxRequests; ++i) {
    NetRequest* s = nullptr;
    ASSERT_TRUE(
        net_->isend(p_.send, out[i].data(), out[i].size(), static_cast<uint32_t>(i), nullptr, &s).ok());
    ASSERT_NE(s, nullptr);
    sends.push_back(s);
  }
  std::vector<size_t> got;
  std::vector<uint32_t> tags;
  std::vector<NetRequest*> all = recvs;
  all.insert(all.end(), sends.begin(), sends.end());  // a send moves when its test() finds the FIFO entry
  Status st = waitAll(net_, all, &got, &tags);
  ASSERT_TRUE(st.ok()) << st.message();
  for (int i = 0; i < kNetMaxRequests; ++i) {
    EXPECT_EQ(got[i], out[i].size());
    EXPECT_EQ(tags[i], static_cast<uint32_t>(i));
    EXPECT_EQ(std::memcmp(in[i].data(), out[i].data(), out[i].size()), 0) << "message " << i;
  }
}

TEST_F(IbverbsNet, ALongerMessageFailsAtBothEndsAndWritesNothing) {
  std::vector<char> in(200, 'g'), out = pattern(300, 1);
  NetRequest *r = nullptr, *s = nullptr;
  ASSERT_TRUE(net_->irecv(p_.recv, in.data(), 100, nullptr, &r).ok());
  ASSERT_TRUE(net_->isend(p_.send, out.data(), out.size(), 1, nullptr, &s).ok());
  Status ss = waitAll(net_, {s});
  Status rs = waitAll(net_, {r});
  ASSERT_FALSE(ss.ok());
  ASSERT_FALSE(rs.ok());
  EXPECT_NE(ss.message().find("300 bytes"), std::string::npos) << ss.message();
  EXPECT_NE(ss.message().find("127.0.0.1"), std::string::npos) << ss.message();
  EXPECT_NE(rs.message().find("300 bytes"), std::string::npos) << rs.message();
  EXPECT_NE(rs.message().find("127.0.0.1"), std::string::npos) << rs.message();
  for (char c : in) ASSERT_EQ(c, 'g') << "the receiver's buffer was written";
  // A failed comm stays failed.
  NetRequest* again = nullptr;
  EXPECT_FALSE(net_->isend(p_.send, out.data(), 1, 1, nullptr, &again).ok());
}

TEST_F(IbverbsNet, CloseCompletesPendingAndLaterReceivesWithTheClosedTag) {
  std::vector<char> out = pattern(5000, 3), in(5000);
  NetRequest *r = nullptr, *s = nullptr;
  ASSERT_TRUE(net_->irecv(p_.recv, in.data(), in.size(), nullptr, &r).ok());
  ASSERT_TRUE(net_->isend(p_.send, out.data(), out.size(), 7, nullptr, &s).ok());
  ASSERT_TRUE(waitAll(net_, {s, r}).ok());
  NetRequest* pending = nullptr;
  ASSERT_TRUE(net_->irecv(p_.recv, in.data(), in.size(), nullptr, &pending).ok());
  net_->closeSend(p_.send);
  p_.send = nullptr;
  std::vector<size_t> got;
  std::vector<uint32_t> tags;
  Status st = waitAll(net_, {pending}, &got, &tags);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(tags[0], kNetClosedTag);
  EXPECT_EQ(got[0], 0u);
  NetRequest* later = nullptr;
  ASSERT_TRUE(net_->irecv(p_.recv, in.data(), in.size(), nullptr, &later).ok());
  st = waitAll(net_, {later}, &got, &tags);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(tags[0], kNetClosedTag);
}

TEST_F(IbverbsNet, ExplicitRegistrationIsUsed) {
  std::vector<char> out = pattern(10000, 5), in(10000);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_TRUE(net_->regMr(p_.send, out.data(), out.size(), &smh).ok());
  ASSERT_TRUE(net_->regMr(p_.recv, in.data(), in.size(), &rmh).ok());
  NetRequest *r = nullptr, *s = nullptr;
  ASSERT_TRUE(net_->irecv(p_.recv, in.data(), in.size(), rmh, &r).ok());
  ASSERT_TRUE(net_->isend(p_.send, out.data(), out.size(), 9, smh, &s).ok());
  ASSERT_TRUE(waitAll(net_, {s, r}).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(net_->deregMr(p_.send, smh).ok());
  EXPECT_TRUE(net_->deregMr(p_.recv, rmh).ok());
}

TEST(IbverbsNetQps, FourQueuePairsPerConnection) {
  setVerbsApiForTesting(braid_verbs_table());
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  ParamRegistry::instance().reload();
  std::unique_ptr<Net> net;
  Status st = newIbNet(&net);
  unsetenv("NCCL_IB_QPS_PER_CONNECTION");
  ParamRegistry::instance().reload();
  ASSERT_TRUE(st.ok()) << st.message();
  Pair p;
  st = connectPair(net.get(), &p);
  ASSERT_TRUE(st.ok()) << st.message();
  const uint64_t before = softverbs::rdmaWritesSent();
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, (size_t{1} << 20) + 3}) {
    std::vector<char> out = pattern(n, 2), in(n);
    NetRequest *r = nullptr, *s = nullptr;
    ASSERT_TRUE(net->irecv(p.recv, in.data(), in.size(), nullptr, &r).ok());
    ASSERT_TRUE(net->isend(p.send, out.data(), out.size(), 4, nullptr, &s).ok());
    std::vector<size_t> got;
    st = waitAll(net.get(), {r, s}, &got);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got[0], n);
    EXPECT_EQ(in, out);
  }
  // 1 MiB + 3 goes as 4 parts plus the record; the others as at most 2 writes, plus the 4 FIFO entries.
  EXPECT_GE(softverbs::rdmaWritesSent() - before, 4u + 4u + 5u);
  net->closeSend(p.send);
  net->closeRecv(p.recv);
  setVerbsApiForTesting(nullptr);
}

// NCCL_NET unset: as NCCL, the verbs Net when an RDMA port is usable;
// NCCL_NET=Socket or NCCL_IB_DISABLE=1 choose TCP.
TEST(IbverbsNetSelect, UnsetNetPrefersVerbsUnlessSocketOrIbDisabled) {
  setVerbsApiForTesting(braid_verbs_table());
  unsetenv("NCCL_NET");
  ParamRegistry::instance().reload();
  Net* net = nullptr;
  Status st = selectNet(&net);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_STREQ(net->name(), "IB");
  setenv("NCCL_NET", "Socket", 1);
  ParamRegistry::instance().reload();
  st = selectNet(&net);
  unsetenv("NCCL_NET");
  ParamRegistry::instance().reload();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_STREQ(net->name(), "Socket");
  // NCCL_IB_DISABLE=1: TCP although the port is usable; with NCCL_NET=IB an
  // error naming both.
  setenv("NCCL_IB_DISABLE", "1", 1);
  ParamRegistry::instance().reload();
  st = selectNet(&net);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_STREQ(net->name(), "Socket");
  setenv("NCCL_NET", "IB", 1);
  ParamRegistry::instance().reload();
  st = selectNet(&net);
  EXPECT_EQ(st.code(), ncclInvalidArgument);
  EXPECT_NE(st.message().find("NCCL_IB_DISABLE"), std::string::npos) << st.message();
  unsetenv("NCCL_NET");
  unsetenv("NCCL_IB_DISABLE");
  ParamRegistry::instance().reload();
  setVerbsApiForTesting(nullptr);
}

// ------------------------------------------------------------ across processes
// The parent never opens a device: each child opens its own after the fork.

struct Child {
  pid_t pid = -1;
  int status = -1;
};

int waitChild(Child* c, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    pid_t w = waitpid(c->pid, &c->status, WNOHANG);
    if (w == c->pid) return WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 128 + WTERMSIG(c->status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(c->pid, SIGKILL);
  waitpid(c->pid, &c->status, 0);
  return -1;  // hung
}

// How a child ends: 0 as expected, else a code the parent reports.
enum Outcome {
  kOk = 0,
  kSetupFailed = 10,
  kWrongData = 11,
  kNoError = 12,
  kErrorLacksPeer = 13,
  kTooSlow = 14
};

Status openChildNet(std::unique_ptr<Net>* net) {
  setVerbsApiForTesting(braid_verbs_table());
  ParamRegistry::instance().reload();
  return newIbNet(net);
}

// Receiver: listens, hands the handle over the pipe, accepts.
int receiverChild(int handleFd, int mode) {
  std::unique_ptr<Net> net;
  if (!openChildNet(&net).ok()) return kSetupFailed;
  NetHandle handle;
  NetListenComm* listen = nullptr;
  if (!net->listen(0, &handle, &listen).ok()) return kSetupFailed;
  if (write(handleFd, handle.bytes, sizeof(handle.bytes)) != sizeof(handle.bytes)) return kSetupFailed;
  NetRecvComm* recv = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (recv == nullptr && Clock::now() < deadline) {
    if (!net->accept(listen, &recv).ok()) return kSetupFailed;
  }
  if (recv == nullptr) return kSetupFailed;
  const size_t n = (1u << 20) + 3;
  std::vector<char> in(n);
  for (int m = 0; m < 3; ++m) {
    NetRequest* r = nullptr;
    const auto t0 = Clock::now();
    Status st = net->irecv(recv, in.data(), n, nullptr, &r);  // a comm that failed already says so here
    if (st.ok() && r == nullptr) return kSetupFailed;
    std::vector<size_t> got(1);
    std::vector<uint32_t> tags(1);
    if (st.ok()) st = waitAll(net.get(), {r}, &got, &tags, 30);
    if (mode == 0) {
      if (!st.ok() || got[0] != n - static_cast<size_t>(m) || tags[0] != static_cast<uint32_t>(m)) {
        std::fprintf(stderr, "receiver: %s\n", st.message().c_str());
        return kWrongData;
      }
      if (std::memcmp(in.data(), pattern(n - static_cast<size_t>(m), m).data(), got[0]) != 0)
        return kWrongData;
      continue;
    }
    // mode 1: the sender is killed after the first message; 2: its first
    // write fails (the software device may still deliver the record, so the
    // receiver's error may come with a later message: the sender's exit).
    if ((mode == 1 && m == 0) || (mode == 2 && st.ok())) {
      if (!st.ok()) return kWrongData;
      continue;
    }
    if (st.ok()) return kNoError;
    std::fprintf(stderr, "receiver's error: %s\n", st.message().c_str());
    if (st.message().find("127.0.0.1") == std::string::npos) return kErrorLacksPeer;
    if (Clock::now() - t0 > std::chrono::seconds(15)) return kTooSlow;
    return kOk;
  }
  net->closeRecv(recv);
  net->closeListen(listen);
  return mode == 0 ? kOk : kNoError;
}

// Sender: mode 0 sends three messages; 1 sends one and dies; 2 (bad rkey) expects an error.
int senderChild(int handleFd, int mode) {
  if (mode == 2) setenv("BRAID_SOFTVERBS_BAD_RKEY_AFTER", "1", 1);
  std::unique_ptr<Net> net;
  if (!openChildNet(&net).ok()) return kSetupFailed;
  NetHandle handle;
  if (read(handleFd, handle.bytes, sizeof(handle.bytes)) != sizeof(handle.bytes)) return kSetupFailed;
  NetSendComm* send = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (send == nullptr && Clock::now() < deadline) {
    if (!net->connect(0, handle, &send).ok()) return kSetupFailed;
  }
  if (send == nullptr) return kSetupFailed;
  const size_t n = (1u << 20) + 3;
  for (int m = 0; m < 3; ++m) {
    std::vector<char> out = pattern(n - static_cast<size_t>(m), m);
    NetRequest* s = nullptr;
    if (!net->isend(send, out.data(), out.size(), static_cast<uint32_t>(m), nullptr, &s).ok() ||
        s == nullptr) {
      return kSetupFailed;
    }
    Status st = waitAll(net.get(), {s}, nullptr, nullptr, 30);
    if (mode == 2) {
      if (st.ok()) return kNoError;
      std::fprintf(stderr, "sender's error: %s\n", st.message().c_str());
      if (st.message().find("127.0.0.1") == std::string::npos ||
          st.message().find("REM_ACCESS_ERR") == std::string::npos) {
        return kErrorLacksPeer;
      }
      return kOk;
    }
    if (!st.ok()) return kWrongData;
    if (mode == 1) kill(getpid(), SIGKILL);
  }
  net->closeSend(send);
  return kOk;
}

void runPair(int senderMode, int receiverMode, int wantSender, int wantReceiver) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Child recv, send;
  recv.pid = fork();
  if (recv.pid == 0) _exit(receiverChild(fds[1], receiverMode));
  send.pid = fork();
  if (send.pid == 0) _exit(senderChild(fds[0], senderMode));
  close(fds[0]);
  close(fds[1]);
  const int s = waitChild(&send, 60), r = waitChild(&recv, 60);
  EXPECT_EQ(s, wantSender)
      << "sender (-1: hung; 10 setup, 11 data, 12 no error, 13 no peer in error, 14 slow)";
  EXPECT_EQ(r, wantReceiver)
      << "receiver (-1: hung; 10 setup, 11 data, 12 no error, 13 no peer in error, 14 slow)";
}

TEST(IbverbsNetFork, MessagesBetweenProcesses) {
  runPair(0, 0, kOk, kOk);
}

TEST(IbverbsNetFork, AKilledSenderIsAnErrorNamingIt) {
  runPair(1, 1, 128 + SIGKILL, kOk);
}

TEST(IbverbsNetFork, ACorruptedRkeyIsAnErrorNamingThePeer) {
  // The receiver then sees the sender's process end: an error naming it too.
  runPair(2, 2, kOk, kOk);
}

}  // namespace
}  // namespace braid
