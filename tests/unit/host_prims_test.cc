// Host primitives and the algorithms over them, with ranks as threads of
// one process and connectors in plain memory: both protocols, several
// peers per step, PreMulSum, in-place, and every failure path.
#include "exec/host/host_prims.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/direct.h"
#include "collectives/ring.h"
#include "collectives/tree.h"
#include "exec/reduce_ops.h"
#include "topology/trees.h"

namespace braid {
namespace {

// Connectors between threads: one zeroed block of connector memory per
// (sender, receiver, tag).
class Fabric {
 public:
  explicit Fabric(size_t slotBytes) : slotBytes_(slotBytes) {}
  // Both ends get their own Connector (each keeps its own step).
  PeerConnector sendTo(int from, int to, int tag = 0) { return {&end(from, to, tag, true), to}; }
  PeerConnector recvFrom(int to, int from, int tag = 0) { return {&end(from, to, tag, false), from}; }

 private:
  struct Pair {
    std::unique_ptr<uint64_t[]> memory;
    Connector send, recv;
  };
  Connector& end(int from, int to, int tag, bool sender) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pair& p = pairs_[{from, to, tag}];
    if (!p.memory) {
      size_t words = (ConnectorMemory::sizeFor(slotBytes_) + 7) / 8;
      p.memory.reset(new uint64_t[words]());
      new (p.memory.get()) ConnectorCounters();
      p.send = Connector::over(p.memory.get(), slotBytes_);
      p.recv = Connector::over(p.memory.get(), slotBytes_);
    }
    return sender ? p.send : p.recv;
  }
  size_t slotBytes_;
  std::mutex mutex_;
  std::map<std::tuple<int, int, int>, Pair> pairs_;
};

PrimsContext context(double timeout = 20) {
  PrimsContext ctx;
  ctx.timeoutSec = timeout;
  ctx.collective = "test";
  return ctx;
}

void runThreads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

template <Protocol P>
void ringAllReduceCase(int n, size_t count, size_t chunk) {
  Fabric fabric(256);
  std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count));
  std::vector<Status> status(static_cast<size_t>(n));
  runThreads(n, [&](int r) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r * 7 + i * 3) % 11);
    HostPrims<float, OpSum, P> p(fabric.sendTo(r, (r + 1) % n), fabric.recvFrom(r, (r - 1 + n) % n),
                                 context());
    coll::ringAllReduce(p, in.data(), out[static_cast<size_t>(r)].data(), count, r, n,
                        std::min(chunk, p.maxElems()));
    status[static_cast<size_t>(r)] = p.status();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)].message();
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>((q * 7 + i * 3) % 11);
      ASSERT_EQ(out[static_cast<size_t>(r)][i], want) << "rank " << r << " at " << i;
    }
  }
}

TEST(HostPrims, RingAllReduceSimpleAndLL) {
  ringAllReduceCase<Protocol::Simple>(3, 1001, 64);  // 256-byte slots: many steps
  ringAllReduceCase<Protocol::LL>(3, 1001, 1u << 20);
  ringAllReduceCase<Protocol::LL>(4, 5000, 1u << 20);  // several LL slots per chunk round
  ringAllReduceCase<Protocol::Simple>(2, 0, 64);
}

// An LL step carries its data in the header's cache line up to 56 bytes and
// from the next line on above: every count across that boundary, odd ones,
// and a full slot, in one stream of steps that wraps the FIFO many times.
TEST(HostPrims, LLStepsOfEverySizeArriveWhole) {
  Fabric fabric(256);
  std::vector<size_t> sizes;
  for (size_t b = 0; b <= 130; ++b) sizes.push_back(b);
  const size_t full =
      HostPrims<uint8_t, OpSum, Protocol::LL>(PeerConnector{}, PeerConnector{}, context()).maxElems();
  for (size_t b : {full - 1, full, size_t{4097}, size_t{8}}) sizes.push_back(b);
  auto byte = [](size_t step, size_t i) { return static_cast<uint8_t>(step * 31 + i * 7 + 1); };
  Status status[2];
  size_t wrong = 0;
  runThreads(2, [&](int r) {
    HostPrims<uint8_t, OpSum, Protocol::LL> p(fabric.sendTo(r, 1 - r), fabric.recvFrom(r, 1 - r), context());
    std::vector<uint8_t> buf(full);
    for (size_t k = 0; k < sizes.size() && !p.failed(); ++k) {
      if (r == 0) {
        for (size_t i = 0; i < sizes[k]; ++i) buf[i] = byte(k, i);
        p.send(buf.data(), sizes[k]);
      } else {
        std::fill(buf.begin(), buf.end(), 0);
        p.recv(buf.data(), sizes[k]);
        for (size_t i = 0; i < sizes[k]; ++i) wrong += buf[i] != byte(k, i);
      }
    }
    status[r] = p.status();
  });
  ASSERT_TRUE(status[0].ok()) << status[0].message();
  ASSERT_TRUE(status[1].ok()) << status[1].message();
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(full, kLLSlotBytes - 64);
}

// LL's FIFO is kHostLLSteps deep, Simple's kConnectorSteps, on the same
// counters: a sender runs kHostLLSteps small LL steps ahead of a receiver
// that has read nothing, then a Simple step waits for its slot, and every
// step of either protocol arrives whole and in order.
TEST(HostPrims, LLRunsFartherAheadThanSimpleOnTheSameSteps) {
  static_assert(kHostLLSteps > kConnectorSteps, "LL's FIFO is the deeper one");
  Fabric fabric(256);
  std::atomic<bool> ahead{false};
  bool senderRanAhead = true;
  Status status[4];
  std::vector<uint64_t> got;
  runThreads(2, [&](int r) {
    HostPrims<uint64_t, OpSum, Protocol::LL> ll(fabric.sendTo(r, 1 - r), fabric.recvFrom(r, 1 - r),
                                                context());
    HostPrims<uint64_t, OpSum, Protocol::Simple> simple(fabric.sendTo(r, 1 - r), fabric.recvFrom(r, 1 - r),
                                                        context());
    uint64_t v[4] = {};
    if (r == 0) {
      for (uint64_t s = 0; s < kHostLLSteps; ++s) v[0] = s, ll.send(v, 1);
      ahead.store(true);
      v[0] = 1000, v[1] = 1001, v[2] = 1002;
      simple.send(v, 3);  // its slot was last used kConnectorSteps steps ago: waits for the receiver
      v[0] = 2000;
      ll.send(v, 1);
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!ahead.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      senderRanAhead = ahead.load();
      for (int s = 0; s < kHostLLSteps; ++s) ll.recv(v, 1), got.push_back(v[0]);
      simple.recv(v, 3), got.insert(got.end(), v, v + 3);
      ll.recv(v, 1), got.push_back(v[0]);
    }
    status[2 * r] = ll.status();
    status[2 * r + 1] = simple.status();
  });
  for (const Status& st : status) ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(senderRanAhead) << "the sender could not post " << kHostLLSteps << " LL steps ahead";
  std::vector<uint64_t> want;
  for (uint64_t s = 0; s < kHostLLSteps; ++s) want.push_back(s);
  for (uint64_t x : {1000, 1001, 1002, 2000}) want.push_back(x);
  EXPECT_EQ(got, want);
}

// Tree all-reduce over the chain/tree of `nodeOf`, with PreMulSum.
template <Protocol P>
void treeCase(const std::vector<int>& nodeOf, int tree, size_t count) {
  const int n = static_cast<int>(nodeOf.size());
  Fabric fabric(512);
  std::vector<std::vector<double>> out(static_cast<size_t>(n), std::vector<double>(count));
  std::vector<Status> status(static_cast<size_t>(n));
  runThreads(n, [&](int r) {
    TreeLinks l = buildDoubleTree(nodeOf, r)[static_cast<size_t>(tree)];
    std::vector<double> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<double>(r + i);
    PeerConnector parentUp = l.up >= 0 ? fabric.sendTo(r, l.up, 1) : PeerConnector{nullptr, -1};
    PeerConnector parentDown = l.up >= 0 ? fabric.recvFrom(r, l.up, 2) : PeerConnector{nullptr, -1};
    PeerConnector childUp[kMaxTreeChildren], childDown[kMaxTreeChildren];
    for (int i = 0; i < l.ndown; ++i) {
      childUp[i] = fabric.recvFrom(r, l.down[i], 1);
      childDown[i] = fabric.sendTo(r, l.down[i], 2);
    }
    OpPreMulSum<double> op{2.0};
    HostPrims<double, OpPreMulSum<double>, P> up(&parentUp, l.up >= 0, childUp, l.ndown, context(), op);
    HostPrims<double, OpPreMulSum<double>, P> down(childDown, l.ndown, &parentDown, l.up >= 0, context(), op);
    coll::treeAllReduce(up, down, in.data(), out[static_cast<size_t>(r)].data(), count,
                        {l.up >= 0, l.ndown > 0}, std::min<size_t>(7, up.maxElems()), kConnectorSteps / 2);
    status[static_cast<size_t>(r)] = up.failed() ? up.status() : down.status();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)].message();
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += 2.0 * static_cast<double>(q + i);
      ASSERT_EQ(out[static_cast<size_t>(r)][i], want) << "rank " << r << " at " << i;
    }
  }
}

TEST(HostPrims, TreeAllReduceChainAndDoubleBinaryTree) {
  treeCase<Protocol::Simple>({0, 0, 0, 0}, 0, 100);              // one node: a chain
  treeCase<Protocol::Simple>({0, 1, 2, 3, 4, 5, 6}, 0, 100);     // 7 nodes, tree 0
  treeCase<Protocol::LL>({0, 1, 2, 3, 4, 5, 6}, 1, 100);         // tree 1 (mirrored)
  treeCase<Protocol::Simple>({0, 0, 1, 1, 2, 2, 3, 3}, 1, 333);  // chains + shifted tree: 3 children
}

// The one-shot and the two-shot (sendEach / recvEach: each connector its own block)
// reduce in rank order, in place, over several rounds with a ragged last.
TEST(HostPrims, OneShotAndTwoShotAreBitwiseIdenticalOnEveryRankAndInPlace) {
  const int n = 4;
  const size_t count = 33;
  // Values whose float sum depends on the order of the additions.
  auto value = [](int r, size_t i) {
    return (r % 2 == 0 ? 1e8f : 1.0f) * (r == 2 ? -1.0f : 1.0f) + float(i);
  };
  for (int variant = 0; variant < 4; ++variant) {
    const Protocol proto = variant % 2 == 0 ? Protocol::Simple : Protocol::LL;
    const bool twoShot = variant >= 2;
    SCOPED_TRACE(twoShot ? "two-shot" : "one-shot");
    Fabric fabric(1024);
    std::vector<std::vector<float>> buf(n, std::vector<float>(count));
    runThreads(n, [&](int r) {
      for (size_t i = 0; i < count; ++i) buf[static_cast<size_t>(r)][i] = value(r, i);
      PeerConnector sends[kMaxPrimsPeers], recvs[kMaxPrimsPeers];
      int k = 0;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        sends[k] = fabric.sendTo(r, p);
        recvs[k++] = fabric.recvFrom(r, p);
      }
      float* data = buf[static_cast<size_t>(r)].data();
      auto run = [&](auto& p, size_t chunk) {
        if (twoShot) {
          coll::twoShotAllReduce(p, data, data, count, r, n, chunk);
        } else {
          coll::oneShotAllReduce(p, data, data, count, chunk);
        }
        EXPECT_TRUE(p.status().ok()) << p.status().message();
      };
      if (proto == Protocol::LL) {
        HostPrims<float, OpSum, Protocol::LL> p(sends, k, recvs, k, context(), OpSum(), r);
        run(p, twoShot ? 3 : p.maxElems());
      } else {
        HostPrims<float, OpSum, Protocol::Simple> p(sends, k, recvs, k, context(), OpSum(), r);
        run(p, 5);
      }
    });
    for (size_t i = 0; i < count; ++i) {
      float want = value(0, i);
      for (int q = 1; q < n; ++q) want += value(q, i);  // rank order
      for (int r = 0; r < n; ++r) ASSERT_EQ(std::memcmp(&buf[static_cast<size_t>(r)][i], &want, 4), 0);
    }
  }
}

TEST(HostPrims, MismatchedStepsAreAnErrorNotCorruption) {
  for (Protocol proto : {Protocol::Simple, Protocol::LL}) {
    Fabric fabric(256);
    Status recvStatus;
    runThreads(2, [&](int r) {
      std::vector<int> data(20, r);
      auto run = [&](auto& p) {
        if (r == 0) p.send(data.data(), 10);
        if (r == 1) p.recv(data.data(), 12), recvStatus = p.status();
      };
      if (proto == Protocol::LL) {
        HostPrims<int, OpSum, Protocol::LL> p(fabric.sendTo(r, 1 - r), fabric.recvFrom(r, 1 - r), context());
        run(p);
      } else {
        HostPrims<int, OpSum, Protocol::Simple> p(fabric.sendTo(r, 1 - r), fabric.recvFrom(r, 1 - r),
                                                  context());
        run(p);
      }
    });
    ASSERT_FALSE(recvStatus.ok());
    EXPECT_EQ(recvStatus.code(), ncclInvalidUsage);
    EXPECT_NE(recvStatus.message().find("rank 0 sent 40 bytes"), std::string::npos) << recvStatus.message();
  }
}

struct CountingListener : StallListener {
  std::atomic<int> calls{0};
  void onStall(int) override { ++calls; }
};

TEST(HostPrims, StallsTimeOutNamingThePeerAndAbortCancelAndPeerEndStopWaits) {
  Fabric fabric(256);
  float x[4] = {};
  {
    CountingListener listener;
    PrimsContext ctx = context(0.2);
    ctx.channel = 3;
    ctx.stall = &listener;
    HostPrims<float, OpSum> p(fabric.sendTo(0, 1), fabric.recvFrom(0, 5), ctx);
    p.recv(x, 4);  // rank 5 never sends
    ASSERT_EQ(p.status().code(), ncclRemoteError);
    EXPECT_NE(p.status().message().find("channel 3 waiting for rank 5"), std::string::npos)
        << p.status().message();
    EXPECT_EQ(listener.calls.load(), 1);
    p.recv(x, 4);  // a failed primitives object stays failed and never waits again
    EXPECT_EQ(listener.calls.load(), 1);
  }
  // Each flag ends a wait on rank 6 at once, with its own message; rank 7
  // (the peerEnded flags are per rank) never raises one.
  const char* const expected[] = {"aborted", "the collective failed elsewhere",
                                  "the process of rank 6 ended"};
  for (int how = 0; how < 3; ++how) {
    std::atomic<bool> flag{false};
    std::atomic<bool> ended[8] = {};
    PrimsContext ctx = context(30);
    if (how == 0) ctx.abort = &flag;
    if (how == 1) ctx.cancel = &flag;
    if (how == 2) ctx.peerEnded = ended;
    HostPrims<float, OpSum> p(fabric.sendTo(0, 1, 10 + how), fabric.recvFrom(0, 6, 10 + how), ctx);
    // Taken before the raiser starts its 100 ms: on a loaded machine this
    // thread may run again only after the raiser has slept a while.
    const auto start = std::chrono::steady_clock::now();
    std::thread raiser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ended[7].store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      (how == 2 ? ended[6] : flag).store(true);
    });
    p.recv(x, 4);
    raiser.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100))
        << "rank 7 ended the wait";
    EXPECT_NE(p.status().message().find(expected[how]), std::string::npos) << p.status().message();
  }
  // What rank 6 sent before its process ended is still received.
  std::atomic<bool> ended[8] = {};
  PrimsContext ctx = context(30);
  ctx.peerEnded = ended;
  {
    HostPrims<float, OpSum> sender(fabric.sendTo(6, 0, 20), fabric.recvFrom(6, 1, 20), context());
    const float data[4] = {1, 2, 3, 4};
    sender.send(data, 4);
    ASSERT_TRUE(sender.status().ok());
  }
  ended[6].store(true);
  HostPrims<float, OpSum> p(fabric.sendTo(0, 1, 20), fabric.recvFrom(0, 6, 20), ctx);
  p.recv(x, 4);
  ASSERT_TRUE(p.status().ok()) << p.status().message();
  EXPECT_EQ(x[3], 4.0f);
}

// The engine's copy takes memcpy or its own loop by the pointers' relative
// alignment: every skew and length copies exactly the bytes asked for.
TEST(CopyBytes, EverySkewAndLength) {
  std::vector<unsigned char> src(70000), dst(70000 + 160);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t skew = 0; skew < 68; ++skew) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{31}, size_t{255}, size_t{256}, size_t{257},
                         size_t{4095}, size_t{65537}}) {
      std::fill(dst.begin(), dst.end(), 0xAB);
      copyBytes(dst.data() + 64 + skew, src.data() + 3, bytes);
      ASSERT_EQ(std::memcmp(dst.data() + 64 + skew, src.data() + 3, bytes), 0)
          << "skew " << skew << ", " << bytes;
      for (size_t i = 0; i < 64 + skew; ++i) ASSERT_EQ(dst[i], 0xAB) << "before, skew " << skew;
      for (size_t i = 64 + skew + bytes; i < dst.size(); ++i)
        ASSERT_EQ(dst[i], 0xAB) << "after, skew " << skew;
    }
  }
}

}  // namespace
}  // namespace braid
