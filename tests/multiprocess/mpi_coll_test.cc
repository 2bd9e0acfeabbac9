// The collective sweep (coll_sweep.cc) as an MPI program: launched by mpirun,
// rank 0 makes the unique id and MPI broadcasts it, as nccl-tests do.
//
//   mpi_coll_test            the sweep on the world communicator
//   mpi_coll_test --split    the sweep on teams split from it: reversed,
//                            odd/even (both teams at once), last rank left out
//   --quick                  quick counts (also with BRAID_TEST_SWEEP=quick)
//
// Rank 0 prints every rank's failures; exits non-zero on any. A failing rank
// whose peers do not reach the end in time (they may wait in a collective it
// left) aborts the whole job, so no rank hangs.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "coll_sweep.h"
#include "harness.h"
#include "nccl.h"

namespace {

using braid::test::SplitShape;
using braid::test::SweepCounts;

// How long a failing rank waits for the others before MPI_Abort.
constexpr double kFailureGraceSec = 60;

std::string run(int rank, int size, bool split, SweepCounts counts) {
  ncclUniqueId id{};
  ncclResult_t r = ncclSuccess;
  if (rank == 0) r = ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (r != ncclSuccess) return braid::test::check(r, "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  std::string err = braid::test::check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  if (!err.empty()) return err;
  if (split) {
    for (SplitShape shape : {SplitShape::kReversed, SplitShape::kOddEven, SplitShape::kLeaveLastOut}) {
      err += braid::test::splitSweep(comm, rank, size, shape, counts);
      if (!err.empty()) break;
    }
  } else {
    err = braid::test::collSweep(comm, rank, size, counts);
  }
  if (!err.empty()) {
    ncclCommAbort(comm);  // peers may still be inside a collective: do not wait for them
    return err;
  }
  return braid::test::check(ncclCommDestroy(comm), "ncclCommDestroy");
}

// True when any rank failed. Waits for every rank, but a failing one waits
// at most kFailureGraceSec, then aborts the job.
bool anyFailed(int rank, bool failed) {
  int mine = failed ? 1 : 0, any = 0;
  MPI_Request req;
  MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
  auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (failed && waited > kFailureGraceSec) {
      std::fprintf(stderr,
                   "rank %d: the other ranks did not finish within %.0f s of this failure: aborting\n", rank,
                   kFailureGraceSec);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    timespec ts{0, 1000000};  // 1 ms
    nanosleep(&ts, nullptr);
  }
  return any != 0;
}

// Every rank's text, on rank 0.
std::vector<std::string> gatherTexts(int rank, int size, const std::string& text) {
  int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int q = 0; q < size; ++q) {
    displs[static_cast<size_t>(q)] = total;
    total += lens[static_cast<size_t>(q)];
  }
  std::vector<char> all(static_cast<size_t>(total) + 1);
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> texts;
  if (rank == 0) {
    for (int q = 0; q < size; ++q) {
      texts.emplace_back(all.data() + displs[static_cast<size_t>(q)],
                         static_cast<size_t>(lens[static_cast<size_t>(q)]));
    }
  }
  return texts;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  bool split = false;
  SweepCounts counts = braid::test::sweepCountsFromEnv();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--split") == 0) {
      split = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      counts = SweepCounts::kQuick;
    } else {
      if (rank == 0) std::fprintf(stderr, "usage: %s [--split] [--quick]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }

  std::string text = run(rank, size, split, counts);
  // Shown at once, in case the job is aborted before rank 0 can print it.
  if (!text.empty()) std::fprintf(stderr, "rank %d failed:\n%s\n", rank, text.c_str());
  bool failed = anyFailed(rank, !text.empty());
  std::vector<std::string> texts = gatherTexts(rank, size, text);
  if (rank == 0) {
    for (int q = 0; q < size; ++q) {
      if (!texts[static_cast<size_t>(q)].empty())
        std::printf("rank %d: %s\n", q, texts[static_cast<size_t>(q)].c_str());
    }
    std::printf("%s: collective sweep%s over %d ranks (%s counts)\n", failed ? "FAIL" : "PASS",
                split ? " on split teams" : "", size, counts == SweepCounts::kQuick ? "quick" : "full");
    std::fflush(stdout);
  }
  if (failed) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  return 0;
}
