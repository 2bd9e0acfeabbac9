// Procs over MPI_COMM_WORLD (mpirun, or -R mpi). Without MPI at build time,
// a stub that says how to get it.
#include "check.h"
#include "procs.h"

#if defined(PERF_HAVE_MPI)
#include <mpi.h>

#include <cstdlib>
#include <cstring>

namespace perf {

namespace {

class MpiProcs final : public Procs {
 public:
  MpiProcs() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = std::getenv("MPI_LOCALRANKID");
    localRank_ = local ? std::atoi(local) : rank_;
  }
  ~MpiProcs() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }
  const char* kind() const override { return "mpi"; }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void broadcast(void* data, size_t bytes, int root) override {
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  double allReduce(double v, Reduce op) override {
    if (op == Reduce::kRank0) {
      MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      return v;
    }
    MPI_Op mop = op == Reduce::kSum ? MPI_SUM : op == Reduce::kMin ? MPI_MIN : MPI_MAX;
    double r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, mop, MPI_COMM_WORLD);
    return r;
  }
  std::vector<std::string> gather(const std::string& text) override {
    // Any length: the lengths first, then the texts.
    int bytes = static_cast<int>(text.size());
    std::vector<int> lengths(rank_ == 0 ? static_cast<size_t>(size_) : 0), offsets(lengths.size());
    MPI_Gather(&bytes, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      offsets[i] = static_cast<int>(total);
      total += static_cast<size_t>(lengths[i]);
    }
    std::vector<char> all(total + 1);
    MPI_Gatherv(text.data(), bytes, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (size_t i = 0; i < lengths.size(); ++i) {
      out.emplace_back(all.data() + offsets[i], static_cast<size_t>(lengths[i]));
    }
    return out;
  }

 private:
  int rank_ = 0, size_ = 1, localRank_ = 0;
};

}  // namespace

std::unique_ptr<Procs> startMpiProcs(int& argc, char**& argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  return std::make_unique<MpiProcs>();
}

}  // namespace perf

#else

namespace perf {

std::unique_ptr<Procs> startMpiProcs(int&, char**&) {
  PERF_DIE(
      "this program was built without MPI (install libopenmpi-dev and reconfigure); "
      "run it forked with -P N instead of under mpirun, and without -R mpi");
}

}  // namespace perf

#endif
