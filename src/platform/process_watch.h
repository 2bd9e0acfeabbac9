// Telling when other processes of this host end, at once: ranks on one host
// share memory, and a rank whose peer was killed would otherwise wait for it
// until the stall timeout.
//
// One thread per process serves every watch: it holds a pidfd (pidfd_open,
// Linux 5.3) per distinct process watched, shared by the watches that name
// it, and sleeps in poll() until one ends or the set changes. Processes must
// be in this process's PID namespace. Where a process cannot be watched (no
// pidfds, no descriptors left, already gone) start() says why and watches
// nothing; the caller then relies on its timeouts.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "util/status.h"

namespace braid {

class ProcessWatch {
 public:
  // Watches `pids`; calls `ended(i)` once for each pids[i] as it ends, from
  // the watching thread with its lock held (so `ended` must be quick and must
  // not start or stop a watch).
  static Status start(const std::vector<pid_t>& pids, std::function<void(size_t)> ended,
                      std::unique_ptr<ProcessWatch>* out);
  ~ProcessWatch();  // no call of `ended` is running or made after it returns
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

 private:
  explicit ProcessWatch(uint64_t id) : id_(id) {}
  uint64_t id_;
};

}  // namespace braid
