#include "platform/process_watch.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "util/threads.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif

namespace braid {
namespace {

class Watcher {
 public:
  static Watcher& get() {
    static Watcher* watcher = [] {
      auto* w = new Watcher();  // never destroyed: its thread may outlive static destructors
      // A child forked while the thread held the lock would find it held
      // for ever; the child starts afresh (its parent's watches are void).
      pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); }, [] { get().forgetInChild(); });
      return w;
    }();
    return *watcher;
  }

  Status subscribe(const std::vector<pid_t>& pids, std::function<void(size_t)> ended, uint64_t* id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (wake_ < 0) {
      wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (wake_ < 0) return systemError("eventfd failed: ", std::strerror(errno));
      std::thread thread;
      Status started = startThread("the thread that watches peer processes", &thread, [this] { run(); });
      if (!started.ok()) {  // the next subscriber tries again
        close(wake_);
        wake_ = -1;
        return started;
      }
      thread.detach();
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      auto it = procs_.find(pids[i]);
      // Not watched yet, or watched until it ended and now the pid of a new
      // process (a peer is alive when it is named here).
      if (it == procs_.end() || it->second.ended) {
        const int fd = static_cast<int>(syscall(SYS_pidfd_open, pids[i], 0));
        if (fd < 0) {
          const int e = errno;
          for (size_t j = 0; j < i; ++j) release(pids[j]);
          if (e == ESRCH) return remoteError("process ", pids[i], " has already ended");
          return systemError("cannot watch process ", pids[i], " (pidfd_open): ", std::strerror(e));
        }
        if (it == procs_.end()) {
          it = procs_.emplace(pids[i], Proc{fd, ++lastSerial_}).first;
        } else {
          close(it->second.fd);
          it->second.fd = fd;
          it->second.serial = ++lastSerial_;
          it->second.ended = false;
        }
      }
      ++it->second.users;
    }
    *id = ++lastId_;
    subs_[*id] = Sub{pids, std::move(ended)};
    notify();
    return okStatus();
  }

  void unsubscribe(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end()) return;
    for (pid_t pid : it->second.pids) release(pid);
    subs_.erase(it);
    notify();
  }

 private:
  struct Proc {
    int fd = -1;
    uint64_t serial = 0;  // tells apart watches whose descriptors share a number
    int users = 0;
    bool ended = false;
  };
  struct Sub {
    std::vector<pid_t> pids;
    std::function<void(size_t)> ended;
  };

  // In a forked child, with mu_ held since the fork: no thread runs here.
  void forgetInChild() {
    for (auto& [pid, proc] : procs_) close(proc.fd);
    procs_.clear();
    subs_.clear();
    if (wake_ >= 0) close(wake_);
    wake_ = -1;
    mu_.unlock();
  }

  // With mu_ held.
  void release(pid_t pid) {
    auto it = procs_.find(pid);
    if (it == procs_.end() || --it->second.users > 0) return;
    close(it->second.fd);
    procs_.erase(it);
  }
  void notify() {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
  }

  void run() {
    std::vector<pollfd> polled;
    std::vector<pid_t> polledPids;
    std::vector<uint64_t> polledSerials;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        polled.assign(1, pollfd{wake_, POLLIN, 0});
        polledPids.assign(1, 0);
        polledSerials.assign(1, 0);
        for (const auto& [pid, proc] : procs_) {
          if (proc.ended) continue;
          polled.push_back({proc.fd, POLLIN, 0});
          polledPids.push_back(pid);
          polledSerials.push_back(proc.serial);
        }
      }
      if (poll(polled.data(), polled.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;  // cannot happen with valid descriptors; the callers' timeouts still hold
      }
      std::lock_guard<std::mutex> lock(mu_);
      uint64_t drained;
      while (read(wake_, &drained, sizeof(drained)) > 0) {
      }
      for (size_t k = 1; k < polled.size(); ++k) {
        // A pidfd becomes readable when its process ends. POLLNVAL means it
        // was closed while polled (its watch released): no news of the
        // process. A watch replaced since the set was built (released, then
        // made again, perhaps with the same descriptor number) is skipped.
        if ((polled[k].revents & (POLLIN | POLLHUP)) == 0) continue;
        auto it = procs_.find(polledPids[k]);
        if (it == procs_.end() || it->second.serial != polledSerials[k] || it->second.ended) continue;
        it->second.ended = true;
        for (auto& [id, sub] : subs_) {
          for (size_t i = 0; i < sub.pids.size(); ++i) {
            if (sub.pids[i] == polledPids[k]) sub.ended(i);
          }
        }
      }
    }
  }

  std::mutex mu_;
  int wake_ = -1;
  uint64_t lastId_ = 0;
  uint64_t lastSerial_ = 0;
  std::map<pid_t, Proc> procs_;
  std::map<uint64_t, Sub> subs_;
};

}  // namespace

Status ProcessWatch::start(const std::vector<pid_t>& pids, std::function<void(size_t)> ended,
                           std::unique_ptr<ProcessWatch>* out) {
  uint64_t id = 0;
  BRAID_CHECK(Watcher::get().subscribe(pids, std::move(ended), &id));
  out->reset(new ProcessWatch(id));
  return okStatus();
}

ProcessWatch::~ProcessWatch() { Watcher::get().unsubscribe(id_); }

}  // namespace braid
