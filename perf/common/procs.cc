#include "procs.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

namespace perf {

std::unique_ptr<Procs> startMpiProcs(int& argc, char**& argv);  // procs_mpi.cc (or a stub)

namespace {

double combine(double a, double b, Reduce op) {
  switch (op) {
    case Reduce::kSum: return a + b;
    case Reduce::kMin: return std::min(a, b);
    case Reduce::kMax: return std::max(a, b);
    case Reduce::kRank0: return a;
  }
  return a;
}

class SingleProcs final : public Procs {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int localRank() const override { return 0; }
  const char* kind() const override { return "single"; }
  void barrier() override {}
  void broadcast(void*, size_t, int) override {}
  double allReduce(double v, Reduce) override { return v; }
  std::vector<std::string> gather(const std::string& text) override { return {text}; }
};

// Forked ranks share one anonymous mapping made before fork: a process-shared
// barrier and one slot per rank. A rank that dies leaves the others waiting at
// the barrier; the parent then stops them (see launch()). Texts longer than a
// slot (nccl-tests' 2048 bytes a process) travel in several rounds.
constexpr int kMaxForked = 256;
constexpr size_t kTextBytes = 2048;
constexpr size_t kBroadcastBytes = 4096;

struct Shared {
  pthread_barrier_t barrier;
  double values[kMaxForked];
  size_t textBytes[kMaxForked];
  char texts[kMaxForked][kTextBytes];
  unsigned char broadcast[kBroadcastBytes];
};

class ForkProcs final : public Procs {
 public:
  ForkProcs(Shared* shared, int rank, int size) : shared_(shared), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return rank_; }
  const char* kind() const override { return "fork"; }
  void barrier() override { pthread_barrier_wait(&shared_->barrier); }
  void broadcast(void* data, size_t bytes, int root) override {
    PERF_REQUIRE(bytes <= kBroadcastBytes, "broadcast of %zu bytes exceeds %zu", bytes, kBroadcastBytes);
    if (rank_ == root) std::memcpy(shared_->broadcast, data, bytes);
    barrier();
    if (rank_ != root) std::memcpy(data, shared_->broadcast, bytes);
    barrier();
  }
  double allReduce(double v, Reduce op) override {
    shared_->values[rank_] = v;
    barrier();
    double r = shared_->values[0];
    for (int i = 1; i < size_; ++i) r = combine(r, shared_->values[i], op);
    barrier();
    return r;
  }
  std::vector<std::string> gather(const std::string& text) override {
    // A slot's worth of each rank's text per round, while any rank filled its slot.
    std::vector<std::string> all(rank_ == 0 ? static_cast<size_t>(size_) : 0);
    for (size_t offset = 0;; offset += kTextBytes) {
      const size_t bytes = offset < text.size() ? std::min(kTextBytes, text.size() - offset) : 0;
      std::memcpy(shared_->texts[rank_], text.data() + std::min(offset, text.size()), bytes);
      shared_->textBytes[rank_] = bytes;
      barrier();
      bool more = false;
      for (int i = 0; i < size_; ++i) {
        if (rank_ == 0) all[static_cast<size_t>(i)].append(shared_->texts[i], shared_->textBytes[i]);
        more = more || shared_->textBytes[i] == kTextBytes;
      }
      barrier();
      if (!more) return all;
    }
  }

 private:
  Shared* shared_;
  int rank_, size_;
};

// Forks `n` ranks. Returns in each child with its rank; the parent never
// returns: it waits for all, stops the rest as soon as one fails, and exits
// with the first failure's status.
std::unique_ptr<Procs> launch(int n) {
  PERF_REQUIRE(n >= 1 && n <= kMaxForked, "-P %d: between 1 and %d forked ranks", n, kMaxForked);
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  PERF_REQUIRE(mem != MAP_FAILED, "mmap of %zu bytes failed: %s", sizeof(Shared), std::strerror(errno));
  auto* shared = static_cast<Shared*>(mem);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&shared->barrier, &attr, static_cast<unsigned>(n));
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    PERF_REQUIRE(pid >= 0, "fork failed: %s", std::strerror(errno));
    if (pid == 0) return std::make_unique<ForkProcs>(shared, r, n);
    children.push_back(pid);
  }
  int status = 0;
  for (int left = n; left > 0; --left) {
    int ws = 0;
    pid_t pid = waitpid(-1, &ws, 0);
    if (pid < 0) break;
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    if (code != 0 && status == 0) {
      status = code;
      int rank = static_cast<int>(std::find(children.begin(), children.end(), pid) - children.begin());
      std::fprintf(stderr, "perf: rank %d (pid %d) failed with status %d; stopping the others\n", rank,
                   static_cast<int>(pid), code);
      for (pid_t c : children) {
        if (c != pid) kill(c, SIGTERM);  // ours, by pid; already-reaped pids are simply not found
      }
    }
  }
  std::exit(status);
}

}  // namespace

bool underMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

std::unique_ptr<Procs> startProcs(int& argc, char**& argv, int nprocs, bool needMpi) {
  if (underMpirun() || needMpi) {
    PERF_REQUIRE(nprocs <= 1, "-P (forked ranks) cannot be combined with mpirun or -R mpi");
    return startMpiProcs(argc, argv);
  }
  if (nprocs > 1) return launch(nprocs);
  return std::make_unique<SingleProcs>();
}

double Team::allReduce(int thread, double v, Reduce op) {
  std::unique_lock<std::mutex> lock(mutex_);
  unsigned long generation = generation_;
  if (op == Reduce::kRank0) {
    if (thread == 0) acc_ = v;
  } else {
    acc_ = arrived_ == 0 ? v : combine(acc_, v, op);
  }
  if (++arrived_ == nthreads_) {
    result_ = procs_.allReduce(acc_, op);  // the last thread speaks for the process
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  return result_;
}

std::string hostName() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace perf
