#include "exec/host/executor.h"

#include "util/threads.h"

namespace braid {

HostExecutor::~HostExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& w : workers_) w->thread.join();
}

void HostExecutor::loop(Worker* w) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    start_.wait(lock, [&] { return stop_ || (generation_ != w->generation && w->channel < active_); });
    if (stop_) return;
    w->generation = generation_;
    const Job* job = job_;
    lock.unlock();
    Status s = (*job)(w->channel);
    lock.lock();
    w->result = std::move(s);
    if (--pending_ == 0) done_.notify_one();
  }
}

Status HostExecutor::run(int nChannels, const Job& job) {
  if (nChannels <= 1) return job(0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (static_cast<int>(workers_.size()) < nChannels - 1) {
      auto w = std::make_unique<Worker>();
      w->channel = static_cast<int>(workers_.size()) + 1;
      w->generation = generation_;
      Worker* raw = w.get();
      BRAID_CHECK(startThread("a channel's worker thread", &raw->thread, [this, raw] { loop(raw); }));
      workers_.push_back(std::move(w));
    }
    job_ = &job;
    active_ = nChannels;
    pending_ = nChannels - 1;
    ++generation_;
  }
  start_.notify_all();
  Status first = job(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  for (int c = 1; c < nChannels; ++c) {
    Worker& w = *workers_[static_cast<size_t>(c - 1)];
    if (first.ok() && !w.result.ok()) first = w.result;
    w.result = okStatus();
  }
  job_ = nullptr;
  return first;
}

}  // namespace braid
