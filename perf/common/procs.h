// The processes of one perf job and the threads inside each: how ranks find
// each other outside the library under test (to share the unique id, agree on
// times and error counts, and print from one place).
//
// Processes come from mpirun (Open MPI), from the built-in launcher (fork),
// or are just this one. Procs' methods are collective over processes and are
// called by one thread per process at a time; Team adds the threads (-t) of
// each process and is called by every thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace perf {

enum class Reduce { kSum, kMin, kMax, kRank0 };

class Procs {
 public:
  virtual ~Procs() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;     // among the processes of this host
  virtual const char* kind() const = 0;  // "mpi", "fork" or "single"
  virtual void barrier() = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every process gets the reduction of all processes' `v`.
  virtual double allReduce(double v, Reduce op) = 0;
  // Process 0 gets every process's text in rank order; others get nothing.
  virtual std::vector<std::string> gather(const std::string& text) = 0;
};

// Under mpirun (when built with MPI) or when `needMpi`, MPI processes (MPI is
// initialized here); else, with nprocs > 1, forks nprocs ranks and returns in
// each child (the parent waits, reports and exits with the children's status);
// else this single process.
std::unique_ptr<Procs> startProcs(int& argc, char**& argv, int nprocs, bool needMpi);

// True when this process was started by mpirun.
bool underMpirun();

// Threads x processes: reductions and barriers over all threads of the job.
class Team {
 public:
  Team(Procs& procs, int nthreads) : procs_(procs), nthreads_(nthreads) {}
  Procs& procs() { return procs_; }
  int nthreads() const { return nthreads_; }
  // Every thread calls it; each gets the job-wide result. kRank0 takes
  // thread 0 of process 0.
  double allReduce(int thread, double v, Reduce op);
  void barrier(int thread) { allReduce(thread, 0, Reduce::kSum); }

 private:
  Procs& procs_;
  int nthreads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
  double acc_ = 0, result_ = 0;
};

// Host name for the device list.
std::string hostName();

}  // namespace perf
