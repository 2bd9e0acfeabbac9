// Worker threads of the host backend: one per channel beyond the first.
//
// run(n, job) runs job(0) on the calling thread and job(1..n-1) on workers,
// then waits for all and returns the first failure. Workers start on first
// use and sleep on a condition variable between collectives; they belong to
// one communicator, which runs one collective at a time.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "util/status.h"

namespace braid {

class HostExecutor {
 public:
  using Job = std::function<Status(int channel)>;

  HostExecutor() = default;
  ~HostExecutor();
  HostExecutor(const HostExecutor&) = delete;
  HostExecutor& operator=(const HostExecutor&) = delete;

  Status run(int nChannels, const Job& job);

 private:
  struct Worker {
    std::thread thread;
    int channel = 0;
    // Guarded by the executor's mutex.
    const Job* job = nullptr;
    uint64_t generation = 0;  // of the last job taken
    Status result;
  };
  void loop(Worker* w);

  std::mutex mutex_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;  // of the current job
  int pending_ = 0;          // workers still running it
  int active_ = 0;           // workers taking part in it
  const Job* job_ = nullptr;
  bool stop_ = false;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace braid
