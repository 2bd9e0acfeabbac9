// The socket Net over loopback, in one process: connection setup through
// the shared listener, messages split over several streams, the length
// check, orderly close, stray connections, and NCCL_NET=IB refused.
// (A dead peer and a downed link are tested across namespaces, tests/multinode.)
#include "transports/net/socket/socket_net.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "platform/socket.h"
#include "transports/net/net.h"
#include "util/param.h"
#include "util/sysfs.h"

namespace braid {
namespace {

struct Pair {
  Net* net = nullptr;
  NetSendComm* send = nullptr;
  NetRecvComm* recv = nullptr;
};

void connectPair(Pair* p) {
  ASSERT_TRUE(socketNet(&p->net).ok());
  ASSERT_GE(p->net->devices(), 1);
  NetHandle handle;
  NetListenComm* listen = nullptr;
  ASSERT_TRUE(p->net->listen(0, &handle, &listen).ok());
  ASSERT_TRUE(p->net->connect(0, handle, &p->send).ok());
  ASSERT_NE(p->send, nullptr);
  for (int i = 0; i < 5000 && p->recv == nullptr; ++i) {
    ASSERT_TRUE(p->net->accept(listen, &p->recv).ok());
    if (p->recv == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(p->recv, nullptr);
  p->net->closeListen(listen);
}

// Drives both requests until done (the sender's progress happens in test()).
Status waitBoth(Net* net, NetRequest* s, NetRequest* r, size_t* got, uint32_t* tag) {
  bool sdone = s == nullptr, rdone = r == nullptr;
  for (int i = 0; i < 2000000 && !(sdone && rdone); ++i) {
    if (!sdone) BRAID_CHECK(net->test(s, &sdone, nullptr, nullptr));
    if (!rdone) BRAID_CHECK(net->test(r, &rdone, got, tag));
  }
  if (!(sdone && rdone)) return internalError("requests did not complete");
  return okStatus();
}

class SocketNetTest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {
 protected:
  void SetUp() override {
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    setenv("BRAID_SOCKET_NTHREADS", GetParam().first, 1);
    setenv("BRAID_NSOCKS_PERTHREAD", GetParam().second, 1);
    ParamRegistry::instance().reload();
  }
};

TEST_P(SocketNetTest, MessagesArriveWholeAndInOrder) {
  Pair p;
  connectPair(&p);
  for (size_t size : {size_t(0), size_t(1), size_t(4097), size_t(3) << 20}) {
    std::vector<char> out(size), in(size + 64, 0);
    for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + size) % 251);
    NetRequest *s = nullptr, *r = nullptr;
    ASSERT_TRUE(p.net->irecv(p.recv, in.data(), in.size(), nullptr, &r).ok());
    ASSERT_TRUE(p.net->isend(p.send, out.data(), size, 42, nullptr, &s).ok());
    ASSERT_NE(s, nullptr);
    ASSERT_NE(r, nullptr);
    size_t got = 0;
    uint32_t tag = 0;
    Status st = waitBoth(p.net, s, r, &got, &tag);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got, size);
    EXPECT_EQ(tag, 42u);
    if (size > 0) {  // an empty vector's data() may be null
      EXPECT_EQ(std::memcmp(in.data(), out.data(), size), 0) << size << " bytes";
    }
  }
  p.net->closeSend(p.send);
  // The goodbye: a posted receive completes with the closed tag, no error.
  std::vector<char> in(16);
  NetRequest* r = nullptr;
  ASSERT_TRUE(p.net->irecv(p.recv, in.data(), in.size(), nullptr, &r).ok());
  uint32_t tag = 0;
  size_t got = 1;
  Status st = waitBoth(p.net, nullptr, r, &got, &tag);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(tag, kNetClosedTag);
  EXPECT_EQ(got, 0u);
  p.net->closeRecv(p.recv);
}

TEST_P(SocketNetTest, LongerMessageThanPostedIsAnError) {
  Pair p;
  connectPair(&p);
  std::vector<char> out(1000), in(100);
  NetRequest *s = nullptr, *r = nullptr;
  ASSERT_TRUE(p.net->irecv(p.recv, in.data(), in.size(), nullptr, &r).ok());
  ASSERT_TRUE(p.net->isend(p.send, out.data(), out.size(), 0, nullptr, &s).ok());
  Status st = waitBoth(p.net, s, r, nullptr, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1000 bytes arrived where 100 were posted"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("127.0.0.1"), std::string::npos) << st.message();
  p.net->closeSend(p.send);
  p.net->closeRecv(p.recv);
}

INSTANTIATE_TEST_SUITE_P(Streams, SocketNetTest,
                         ::testing::Values(std::make_pair("0", "1"), std::make_pair("0", "3"),
                                           std::make_pair("2", "2")));

TEST(SocketNet, StrayConnectionsAreDroppedAndTheRealOneAccepted) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ParamRegistry::instance().reload();
  Net* net = nullptr;
  ASSERT_TRUE(socketNet(&net).ok());
  NetHandle handle;
  NetListenComm* listen = nullptr;
  ASSERT_TRUE(net->listen(0, &handle, &listen).ok());
  NetProperties props;
  ASSERT_TRUE(net->properties(0, &props).ok());
  ASSERT_GT(props.port, 0);
  SocketAddress addr;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:" + std::to_string(props.port), &addr).ok());
  // Strays: garbage, a hello-sized block of zeros, one that closes at once.
  std::vector<Socket> strays(3);
  for (auto& s : strays) ASSERT_TRUE(Socket::connect(addr, deadlineIn(5), nullptr, &s).ok());
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n0123456789";
  ASSERT_TRUE(strays[0].sendAll(garbage, sizeof(garbage), deadlineIn(5), nullptr).ok());
  std::vector<char> zeros(64, 0);
  ASSERT_TRUE(strays[1].sendAll(zeros.data(), zeros.size(), deadlineIn(5), nullptr).ok());
  strays[2].close();
  NetRecvComm* recv = nullptr;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(net->accept(listen, &recv).ok());
  EXPECT_EQ(recv, nullptr);
  NetSendComm* send = nullptr;
  ASSERT_TRUE(net->connect(0, handle, &send).ok());
  for (int i = 0; i < 5000 && recv == nullptr; ++i) {
    ASSERT_TRUE(net->accept(listen, &recv).ok());
    if (recv == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(recv, nullptr);
  net->closeListen(listen);
  net->closeSend(send);
  net->closeRecv(recv);
}

// Sockets of this process: the listener and every stream count.
int openSockets() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) ++n;
  }
  return n;
}

// Whether the peer of `s` closed or reset it within `ms`.
bool closedByPeer(Socket& s, int ms) {
  pollfd p{s.fd(), POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  char c;
  const ssize_t k = ::recv(s.fd(), &c, 1, MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno == ECONNRESET);
}

TEST(SocketNet, StraysGoAtTheirDeadlineAndNothingOutlivesTheLastListen) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ParamRegistry::instance().reload();
  Net* net = nullptr;
  ASSERT_TRUE(socketNet(&net).ok());
  const int before = openSockets();
  NetHandle handle;
  NetListenComm* first = nullptr;
  ASSERT_TRUE(net->listen(0, &handle, &first).ok());
  NetProperties props;
  ASSERT_TRUE(net->properties(0, &props).ok());
  ASSERT_GT(props.port, 0);
  SocketAddress addr;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:" + std::to_string(props.port), &addr).ok());
  // A silent stray, taken in by one accept; then nobody accepts on that
  // listen, but another listen starts after the stray's 5 s: it goes then.
  Socket silent;
  ASSERT_TRUE(Socket::connect(addr, deadlineIn(5), nullptr, &silent).ok());
  NetRecvComm* recv = nullptr;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(net->accept(first, &recv).ok());
  EXPECT_FALSE(closedByPeer(silent, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));
  NetListenComm* second = nullptr;
  ASSERT_TRUE(net->listen(0, &handle, &second).ok());
  EXPECT_TRUE(closedByPeer(silent, 2000)) << "a stray outlived its hello deadline";
  // Another stray still queued when the last listen closes goes with the
  // listener: no socket is left, and the port refuses connections.
  Socket queued;
  ASSERT_TRUE(Socket::connect(addr, deadlineIn(5), nullptr, &queued).ok());
  net->closeListen(first);
  net->closeListen(second);
  EXPECT_TRUE(closedByPeer(queued, 2000)) << "a stray outlived the last listen";
  silent.close();
  queued.close();
  EXPECT_EQ(openSockets(), before) << "the Net keeps sockets after its last listen closed";
  ASSERT_TRUE(net->properties(0, &props).ok());
  EXPECT_EQ(props.port, 0);
  Socket late;
  EXPECT_FALSE(Socket::connect(addr, deadlineIn(0.3), nullptr, &late).ok());
  // A later connection listens again and works.
  Pair p;
  connectPair(&p);
  ASSERT_NE(p.recv, nullptr);
  const char msg[] = "after";
  char got[sizeof(msg)] = {};
  NetRequest* s = nullptr;
  NetRequest* r = nullptr;
  ASSERT_TRUE(p.net->irecv(p.recv, got, sizeof(got), nullptr, &r).ok());
  ASSERT_TRUE(p.net->isend(p.send, msg, sizeof(msg), 7, nullptr, &s).ok());
  size_t size = 0;
  uint32_t tag = 0;
  ASSERT_TRUE(waitBoth(p.net, s, r, &size, &tag).ok());
  EXPECT_EQ(std::string(got), "after");
  p.net->closeSend(p.send);
  p.net->closeRecv(p.recv);
}

TEST(SocketNet, DevicesGiveTheirPciFunction) {
  // NCCL_SOCKET_IFNAME=lo here: a virtual interface has no PCI function.
  Net* net = nullptr;
  ASSERT_TRUE(socketNet(&net).ok());
  ASSERT_GE(net->devices(), 1);
  NetProperties p;
  ASSERT_TRUE(net->properties(0, &p).ok());
  EXPECT_EQ(p.name, "lo");
  EXPECT_EQ(p.busId, "");
  EXPECT_EQ(p.pciPath, "");
  // A real NIC's is its real sysfs path and its PCI address.
  for (const std::string& nic : listDir("/sys/class/net")) {
    NetProperties q;
    describePciDevice("/sys/class/net/" + nic + "/device", &q);
    if (q.busId.empty()) continue;
    EXPECT_NE(q.pciPath.find(q.busId), std::string::npos) << q.pciPath;
    EXPECT_EQ(q.pciPath[0], '/') << q.pciPath;
  }
}

TEST(SocketNet, IbIsRefusedWithAClearMessage) {
  setenv("NCCL_NET", "IB", 1);
  ParamRegistry::instance().reload();
  Net* net = nullptr;
  Status st = selectNet(&net);
  unsetenv("NCCL_NET");
  ParamRegistry::instance().reload();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("verbs"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NCCL_NET=Socket"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace braid
