// Watching other processes (platform/process_watch.h) with real children:
// each watch hears of each of its processes' end once, watches of the same
// process share it, a stopped watch hears nothing, and a process that is
// gone already is an error. Then the communicator's use of it
// (core/connectors.h), which the GPU engine hooks into, and which counts a
// peer gone already as ended.
#include "platform/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/connectors.h"

namespace braid {
namespace {

pid_t sleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

void end(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

bool soon(const std::atomic<int>& v, int want) {
  for (int i = 0; i < 500 && v.load() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return v.load() == want;
}

TEST(ProcessWatch, EachWatchHearsOfEachEndOnce) {
  const pid_t a = sleeper(), b = sleeper();
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  std::atomic<int> first{0}, second{0}, stopped{0};
  std::unique_ptr<ProcessWatch> w1, w2, w3;
  ASSERT_TRUE(ProcessWatch::start(
                  {a, b}, [&](size_t i) { first += i == 0 ? 1 : 10; }, &w1)
                  .ok());
  ASSERT_TRUE(ProcessWatch::start(
                  {b}, [&](size_t i) { second += i == 0 ? 1 : 100; }, &w2)
                  .ok());
  ASSERT_TRUE(ProcessWatch::start(
                  {a}, [&](size_t) { ++stopped; }, &w3)
                  .ok());
  w3.reset();  // hears nothing from here on
  end(b);
  EXPECT_TRUE(soon(first, 10));
  EXPECT_TRUE(soon(second, 1));
  end(a);
  EXPECT_TRUE(soon(first, 11));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(first.load(), 11);
  EXPECT_EQ(second.load(), 1);
  EXPECT_EQ(stopped.load(), 0);
}

TEST(ProcessWatch, AProcessGoneAlreadyIsAnError) {
  const pid_t a = sleeper();
  ASSERT_GT(a, 0);
  end(a);
  std::unique_ptr<ProcessWatch> w;
  Status s = ProcessWatch::start(
      {a}, [](size_t) {}, &w);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has already ended"), std::string::npos) << s.message();
  EXPECT_EQ(w, nullptr);
}

// Which ranks a communicator watches (peers of this host in other
// processes), and its hook: a rank that ended before the hook was set is
// passed on when it is set, one that ends later from the watching thread,
// and none after stopCallingOnPeerEnd().
TEST(ConnectorFactoryWatch, PassesPeerEndsOnToItsHook) {
  const pid_t a = sleeper(), b = sleeper(), c = sleeper();
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  ASSERT_GT(c, 0);
  std::atomic<bool> abort{false};
  std::vector<PeerPlace> peers = {
      {true, true, true, getpid(), "rank 0 (this process)"},
      {true, false, true, a, "rank 1"},
      {true, false, true, b, "rank 2"},
      {false, false, false, c, "rank 3 (another host: its pid means nothing here)"},
      {true, false, true, c, "rank 4"}};
  ConnectorFactory f(nullptr, peers, &abort, 1.0);
  f.watchPeerProcesses();
  const std::atomic<bool>* ended = f.peerEnded();
  ASSERT_NE(ended, nullptr);
  auto endedSoon = [ended](int r) {
    for (int i = 0; i < 500 && !ended[r].load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return ended[r].load();
  };
  end(a);
  ASSERT_TRUE(endedSoon(1));
  std::atomic<int> heard{0};  // a bit per rank
  f.callOnPeerEnd([&heard](int r) { heard |= 1 << r; });
  EXPECT_EQ(heard.load(), 1 << 1) << "rank 1 ended before the hook was set";
  end(b);
  EXPECT_TRUE(soon(heard, (1 << 1) | (1 << 2)));
  f.stopCallingOnPeerEnd();
  end(c);
  EXPECT_TRUE(endedSoon(4));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(heard.load(), (1 << 1) | (1 << 2)) << "a stopped hook heard of rank 4";
  EXPECT_FALSE(ended[0].load());
  EXPECT_FALSE(ended[3].load()) << "a rank of another host was watched";
}

// A peer whose process is gone before the watch starts (a rank may end right
// after init) counts as ended at once, and the others are still watched.
TEST(ConnectorFactoryWatch, APeerGoneAlreadyCountsAsEnded) {
  const pid_t a = sleeper(), b = sleeper();
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  end(a);
  std::atomic<bool> abort{false};
  std::vector<PeerPlace> peers = {{true, true, true, getpid(), "rank 0 (this process)"},
                                  {true, false, true, a, "rank 1"},
                                  {true, false, true, b, "rank 2"}};
  ConnectorFactory f(nullptr, peers, &abort, 1.0);
  f.watchPeerProcesses();
  const std::atomic<bool>* ended = f.peerEnded();
  ASSERT_NE(ended, nullptr);
  EXPECT_TRUE(ended[1].load());
  EXPECT_FALSE(ended[2].load());
  end(b);
  for (int i = 0; i < 500 && !ended[2].load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(ended[2].load()) << "rank 2 was not watched";
}

}  // namespace
}  // namespace braid
