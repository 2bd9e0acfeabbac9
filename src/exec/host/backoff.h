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
  enum class Result { Ready, Aborted, TimedOut, Cancelled };

  // `cancel` (optional) stops the wait like abort, for a reason of the
  // caller's (another channel of the same collective failed).
  // `spin`: whether a wait spins (about 5 us) before it yields its core;
  // not when there are more ranks than cores (the peer it waits for may
  // need the core).
  Backoff(const std::atomic<bool>* abort, double timeoutSec, const std::atomic<bool>* cancel = nullptr,
          bool spin = true)
      : abort_(abort), cancel_(cancel), timeoutSec_(timeoutSec), spin_(spin) {}

  // Waits until ready() is true, the abort flag rises or the deadline passes.
  template <typename Ready>
  Result wait(Ready ready) {
    if (ready()) return Result::Ready;
    reset();
    while (true) {
      if (ready()) return Result::Ready;
      Result r = pause();
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
  double timeoutSec_;
  bool spin_;
  // Set at the first check after reset() (which wait() calls before its
  // first pause): reading the clock costs about as much as a short wait.
  Clock::time_point start_{};
  bool started_ = false;
  uint64_t spins_ = 0;
};

}  // namespace braid
