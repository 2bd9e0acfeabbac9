// The bounded wait every host-side spin uses: spin briefly, then yield, then
// nap, while watching the abort flag and a deadline. Many ranks on few cores
// must still progress, so a waiter gives its core away quickly.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "platform/socket.h"  // Clock

namespace braid {

class Backoff {
 public:
  enum class Result { Ready, Aborted, TimedOut, Cancelled, PeerEnded };

  // `cancel` (optional) stops the wait like abort, for a reason of the
  // caller's (another channel of the same collective failed).
  // `spin`: whether a wait spins (about 5 us) before it yields its core;
  // not when there are more ranks than cores (the peer it waits for may
  // need the core).
  Backoff(const std::atomic<bool>* abort, double timeoutSec, const std::atomic<bool>* cancel = nullptr,
          bool spin = true)
      : abort_(abort), cancel_(cancel), timeoutSec_(timeoutSec), spin_(spin) {}

  // Waits until ready() is true, the abort flag rises or the deadline passes,
  // or `peerEnded` (optional: the process this wait depends on has ended)
  // rises. A raised cancel or peerEnded flag means nothing more will come,
  // so ready() is asked once more first: what the peer wrote before it ended
  // still counts.
  template <typename Ready>
  Result wait(Ready ready, const std::atomic<bool>* peerEnded = nullptr) {
    if (ready()) return Result::Ready;
    reset();
    peerEnded_ = peerEnded;
    while (true) {
      if (ready()) return Result::Ready;
      Result r = pause();
      if ((r == Result::Cancelled || r == Result::PeerEnded) && ready()) return Result::Ready;
      if (r != Result::Ready) return r;
    }
  }

  // One pause of a caller-driven polling loop (call reset() before the loop
  // and whenever progress was made). Returns Ready to keep polling.
  Result pause() {
    ++spins_;
    if ((spins_ & 15) != 0) {
      cpuRelax();
      return Result::Ready;
    }
    if (abort_ != nullptr && abort_->load(std::memory_order_relaxed)) return Result::Aborted;
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) return Result::Cancelled;
    if (peerEnded_ != nullptr && peerEnded_->load(std::memory_order_acquire)) return Result::PeerEnded;
    const Clock::time_point now = Clock::now();
    if (!started_) {  // the clock starts at the first check: most waits end before it
      start_ = now;
      started_ = true;
      return Result::Ready;
    }
    if (now - start_ > timeout()) return Result::TimedOut;
    const auto waited = now - start_;
    if (spin_ && waited < std::chrono::microseconds(5)) return Result::Ready;
    if (waited < std::chrono::microseconds(200)) {
      sched_yield();
    } else {
      usleep(waited < std::chrono::milliseconds(5) ? 10 : 100);
    }
    return Result::Ready;
  }

  void reset() {
    started_ = false;
    spins_ = 0;
    peerEnded_ = nullptr;
  }

 private:
  Clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutSec_));
  }
  static void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  const std::atomic<bool>* abort_;
  const std::atomic<bool>* cancel_;
  const std::atomic<bool>* peerEnded_ = nullptr;  // during wait()
  double timeoutSec_;
  bool spin_;
  // Set at the first check after reset() (which wait() calls before its
  // first pause): reading the clock costs about as much as a short wait.
  Clock::time_point start_{};
  bool started_ = false;
  uint64_t spins_ = 0;
};

}  // namespace braid
