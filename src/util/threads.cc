#include "util/threads.h"

#include <condition_variable>
#include <mutex>
#include <vector>

namespace braid {

Status threadRefused(const char* what, const std::system_error& e) {
  return systemError("cannot start ", what, ": ", e.what(),
                     " (the process or user may be at its thread limit, ulimit -u, or out of memory)");
}

Status runTogether(size_t n, const char* what, const std::function<void(size_t)>& task) {
  std::mutex mu;
  std::condition_variable cv;
  enum class Gate { Wait, Go, Cancel } gate = Gate::Wait;
  std::vector<std::thread> threads(n);
  Status started;
  for (size_t i = 0; i < n && started.ok(); ++i) {
    started = startThread(what, &threads[i], [&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return gate != Gate::Wait; });
        if (gate == Gate::Cancel) return;
      }
      task(i);
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    gate = started.ok() ? Gate::Go : Gate::Cancel;
  }
  cv.notify_all();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
  return started;
}

}  // namespace braid
