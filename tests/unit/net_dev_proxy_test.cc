// The net proxy serving GPU connectors (DevNetBlock), over the socket Net on
// loopback, with no GPU: two threads of this test play the two kernels,
// keeping the device protocol exactly as DevPrims does (transports/
// transport.h): the sender writes a step's Simple payload or LL lines and
// its step word, then tail; the receiver waits for tail (Simple) or polls
// the lines' flags (LL), checks the data, then frees the slot through head.
// Steps mix protocols and sizes (0 bytes, odd sizes, a full slot) and wrap
// the FIFO many times; Simple slots larger and smaller than an LL slot
// cover both of the receiving proxy's landing paths. A step published
// without its step word becomes an error in the sink, naming the peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transports/net/net.h"
#include "transports/net/proxy.h"
#include "transports/net/socket/socket_net.h"
#include "transports/transport.h"
#include "util/param.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

struct Block {
  explicit Block(size_t slotBytes) {
    bytes = (DevNetLayout::bytes(slotBytes) + 4095) / 4096 * 4096;
    memory = static_cast<char*>(std::aligned_alloc(4096, bytes));
    std::memset(memory, 0, bytes);
    view.base = memory;
    view.slotBytes = slotBytes;
  }
  ~Block() { std::free(memory); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  char* memory;
  size_t bytes;
  DevNetBlock view;
};

uint64_t load(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
void store(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

// Waits (bounded) until `done` holds; false after 30 s.
template <typename F>
bool waitFor(F done) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Step s's protocol and size: every few steps LL, else Simple; sizes from 0
// up to what the protocol's slot holds.
bool stepIsLL(uint64_t s) {
  return s % 3 == 1;
}
size_t stepBytes(uint64_t s, size_t slotBytes) {
  const size_t cap = stepIsLL(s) ? kDevLLDataBytes : slotBytes;
  switch (s % 5) {
    case 0: return 0;
    case 1: return cap;
    case 2: return 13;
    case 3: return cap / 2 + 7;
    default: return 4096;
  }
}
uint8_t byteOf(uint64_t s, size_t i) {
  return static_cast<uint8_t>(s * 131 + i * 7 + (i >> 9));
}

// The sending kernel's side of step s.
bool sendStep(const DevNetBlock& b, uint64_t s) {
  if (!waitFor([&] { return load(b.head()) + kConnectorSteps > s; })) return false;
  const size_t n = stepBytes(s, b.slotBytes);
  if (stepIsLL(s)) {
    const uint32_t flag = static_cast<uint32_t>(s + 1);
    char* lines = b.ll(s);
    for (size_t line = 0; line < (n + 7) / 8; ++line) {
      uint8_t data[8] = {};
      for (size_t k = 0; k < 8 && line * 8 + k < n; ++k) data[k] = byteOf(s, line * 8 + k);
      uint32_t w[4];
      std::memcpy(&w[0], data, 4);
      std::memcpy(&w[2], data + 4, 4);
      w[1] = w[3] = flag;
      std::memcpy(lines + 16 * line, w, 16);
    }
  } else {
    for (size_t i = 0; i < n; ++i) b.simple(s)[i] = static_cast<char>(byteOf(s, i));
  }
  store(b.stepWord(s), DevStepWord::make(s, stepIsLL(s), n));
  store(b.tail(), s + 1);
  return true;
}

// The receiving kernel's side of step s: "" or what was wrong.
std::string recvStep(const DevNetBlock& b, uint64_t s) {
  const size_t n = stepBytes(s, b.slotBytes);
  if (stepIsLL(s)) {
    const uint32_t flag = static_cast<uint32_t>(s + 1);
    const char* lines = b.ll(s);
    for (size_t line = 0; line < (n + 7) / 8; ++line) {
      // Each 8-byte half {data, flag} in one load, as the kernel's line
      // load sees it (a half read in two loads could pair old data with a
      // new flag).
      uint32_t w[4];
      const bool ok = waitFor([&] {
        for (int k = 0; k < 2; ++k) {
          const uint64_t half =
              __atomic_load_n(reinterpret_cast<const uint64_t*>(lines + 16 * line) + k, __ATOMIC_ACQUIRE);
          std::memcpy(&w[2 * k], &half, 8);
        }
        return w[1] == flag && w[3] == flag;
      });
      if (!ok) return "LL step " + std::to_string(s) + " line " + std::to_string(line) + " never arrived";
      uint8_t data[8];
      std::memcpy(data, &w[0], 4);
      std::memcpy(data + 4, &w[2], 4);
      for (size_t k = 0; k < 8 && line * 8 + k < n; ++k) {
        if (data[k] != byteOf(s, line * 8 + k))
          return "LL step " + std::to_string(s) + " byte " + std::to_string(line * 8 + k) + " differs";
      }
    }
  } else {
    if (!waitFor([&] { return load(b.tail()) > s; })) return "step " + std::to_string(s) + " never arrived";
    // The receiving proxy records what it delivered (point-to-point kernels check it).
    if (load(b.stepWord(s)) != DevStepWord::make(s, false, n)) {
      return "step " + std::to_string(s) + " arrived without its step word";
    }
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<uint8_t>(b.simple(s)[i]) != byteOf(s, i)) {
        return "step " + std::to_string(s) + " byte " + std::to_string(i) + " differs";
      }
    }
  }
  store(b.head(), s + 1);
  return "";
}

class NetDevProxyTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    ParamRegistry::instance().reload();
    ASSERT_TRUE(socketNet(&net_).ok());
    NetHandle handle;
    NetListenComm* listen = nullptr;
    ASSERT_TRUE(net_->listen(0, &handle, &listen).ok());
    ASSERT_TRUE(net_->connect(0, handle, &send_).ok());
    ASSERT_NE(send_, nullptr);
    ASSERT_TRUE(waitFor([&] { return !net_->accept(listen, &recv_).ok() || recv_ != nullptr; }));
    ASSERT_NE(recv_, nullptr);
    net_->closeListen(listen);
  }

  Net* net_ = nullptr;
  NetSendComm* send_ = nullptr;
  NetRecvComm* recv_ = nullptr;
};

TEST_P(NetDevProxyTest, StepsOfBothProtocolsCrossTheNetIntact) {
  const size_t slotBytes = GetParam();
  Block sender(slotBytes), receiver(slotBytes);
  auto sink = std::make_shared<NetErrorSink>();
  NetProxy* proxy = NetProxy::get(net_, 0);
  const uint64_t sid = proxy->addDevSend(send_, sender.view, {1, "rank 1 (test)"}, sink);
  const uint64_t rid = proxy->addDevRecv(recv_, receiver.view, {0, "rank 0 (test)"}, sink);
  constexpr uint64_t kSteps = 200;
  std::atomic<bool> sendOk{true};
  std::thread kernelSend([&] {
    for (uint64_t s = 0; s < kSteps && sendOk; ++s) sendOk = sendStep(sender.view, s);
  });
  std::string err;
  for (uint64_t s = 0; s < kSteps && err.empty(); ++s) err = recvStep(receiver.view, s);
  kernelSend.join();
  EXPECT_TRUE(sendOk.load());
  EXPECT_EQ(err, "");
  EXPECT_TRUE(sink->first().ok()) << sink->first().message();
  EXPECT_EQ(load(sender.view.head()), kSteps);  // every slot came back to the sender
  proxy->remove(sid);
  proxy->remove(rid);
}

// 1 MiB Simple slots (an LL step lands in its Simple slot), 16 KiB ones (a
// staging area: smaller than an LL slot).
INSTANTIATE_TEST_SUITE_P(SlotSizes, NetDevProxyTest, ::testing::Values(size_t{1} << 20, size_t{16384}),
                         [](const ::testing::TestParamInfo<size_t>& p) {
                           return "slot" + std::to_string(p.param);
                         });

TEST_F(NetDevProxyTest, AStepWithoutItsStepWordIsAnErrorNamingThePeer) {
  Block sender(65536), receiver(65536);
  auto sink = std::make_shared<NetErrorSink>();
  std::atomic<bool> raised{false};
  const uint64_t call = sink->callOnFailure([&] { raised = true; });
  NetProxy* proxy = NetProxy::get(net_, 0);
  const uint64_t sid = proxy->addDevSend(send_, sender.view, {1, "rank 1 (hostb, pid 7)"}, sink);
  const uint64_t rid = proxy->addDevRecv(recv_, receiver.view, {0, "rank 0 (hosta, pid 6)"}, sink);
  store(sender.view.stepWord(0), DevStepWord::make(5, false, 8));  // another step's word
  store(sender.view.tail(), 1);
  EXPECT_TRUE(waitFor([&] { return sink->failed(); }));
  EXPECT_TRUE(raised.load());
  const std::string msg = sink->first().message();
  EXPECT_NE(msg.find("without its size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 (hostb, pid 7)"), std::string::npos) << msg;
  sink->stopCalling(call);
  proxy->remove(sid);
  proxy->remove(rid);
}

}  // namespace
}  // namespace braid
