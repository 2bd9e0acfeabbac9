// Watching other processes (platform/process_watch.h) with real children:
// each watch hears of each of its processes' end once, watches of the same
// process share it, a stopped watch hears nothing, and a process that is
// gone already is an error. Then the communicator's use of it
// (core/connectors.h), which the GPU engine hooks into, and which counts a
// peer gone already as ended.
#include "platform/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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

// A watch released and made again at once (a communicator destroyed and
// the next made with the same peers) may get the same descriptor number
// while the watching thread still polls the old one, which then reads as
// closed (POLLNVAL): that is no news of the process, which lives on. The
// watcher once took it for the process's end.
TEST(ProcessWatch, AWatchMadeAgainNeverHearsOfALiveProcessEnding) {
  const pid_t a = sleeper();
  ASSERT_GT(a, 0);
  std::atomic<int> ended{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int rounds = 0;
  while (std::chrono::steady_clock::now() < until && ended.load() == 0) {
    std::unique_ptr<ProcessWatch> w;
    ASSERT_TRUE(ProcessWatch::start(
                    {a}, [&](size_t) { ++ended; }, &w)
                    .ok());
    ++rounds;
  }
  EXPECT_EQ(ended.load(), 0) << "after " << rounds << " watches of a live process";
  end(a);
}

// The system refusing the watching thread (a thread limit, no memory for
// its stack) is an error that says so, and the next watch tries again: the
// watcher once marked itself started before the thread failed, so no later
// watch in the process ever heard of a peer's end.
TEST(ProcessWatch, AThreadTheSystemRefusesIsAnErrorAndTheNextWatchTriesAgain) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers reserve address space that a cap would break";
#endif
  const pid_t a = sleeper();
  ASSERT_GT(a, 0);
  const pid_t child = fork();
  if (child == 0) {
    // No thread started in this process yet: cap the address space below
    // what a thread's stack needs.
    long pages = 0;
    FILE* statm = fopen("/proc/self/statm", "r");
    if (statm == nullptr || fscanf(statm, "%ld", &pages) != 1) _exit(10);
    fclose(statm);
    rlimit old{};
    getrlimit(RLIMIT_AS, &old);
    rlimit capped = old;
    capped.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (1 << 20);
    if (setrlimit(RLIMIT_AS, &capped) != 0) _exit(11);
    std::atomic<int> ended{0};
    std::unique_ptr<ProcessWatch> w;
    Status s = ProcessWatch::start(
        {a}, [&](size_t) { ++ended; }, &w);
    if (s.ok() || s.code() != ncclSystemError) _exit(12);
    if (s.message().find("cannot start the thread that watches peer processes") == std::string::npos)
      _exit(13);
    setrlimit(RLIMIT_AS, &old);
    if (!ProcessWatch::start(
             {a}, [&](size_t) { ++ended; }, &w)
             .ok()) {
      _exit(14);
    }
    kill(a, SIGKILL);
    _exit(soon(ended, 1) ? 0 : 15);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  end(a);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-11: setup, 12-13: the refusal's error, 14: the second watch, "
                                       "15: the end not heard";
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
