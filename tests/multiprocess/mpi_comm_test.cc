// The communicator tests as an MPI program: launched by mpirun, rank 0 makes
// the unique id and MPI broadcasts it, as nccl-tests and most users do.
// Prints one line per check and "N passed, M failed"; exits non-zero on failure.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/comm.h"
#include "nccl.h"

namespace {

int passed = 0, failed = 0;

void report(int rank, const char* name, bool ok, const std::string& detail = "") {
  int all = 0, mine = ok ? 1 : 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, name, detail.c_str());
  if (rank == 0) std::printf("%s %s\n", all ? "PASS" : "FAIL", name);
  (all ? passed : failed)++;
}

std::string lastError(ncclResult_t r) {
  return std::string(ncclGetErrorString(r)) + ": " + ncclGetLastError(nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  ncclUniqueId id;
  ncclResult_t r = ncclSuccess;
  if (rank == 0) r = ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  report(rank, "ncclGetUniqueId on rank 0", r == ncclSuccess, lastError(r));

  ncclComm_t comm = nullptr;
  r = ncclCommInitRank(&comm, size, id, rank);
  report(rank, "ncclCommInitRank", r == ncclSuccess, lastError(r));
  if (r != ncclSuccess) {
    MPI_Finalize();
    return 1;
  }
  int count = -1, me = -1;
  ncclCommCount(comm, &count);
  ncclCommUserRank(comm, &me);
  report(rank, "ncclCommCount and ncclCommUserRank match MPI", count == size && me == rank);

  // The bootstrap all-gather agrees with MPI's.
  std::vector<long long> ours(static_cast<size_t>(size)), theirs(static_cast<size_t>(size));
  long long value = (rank + 1) * 7919LL + 3;
  ours[static_cast<size_t>(rank)] = value;
  braid::Status s = static_cast<braid::Communicator*>(comm)->bootstrap()->allGather(ours.data(), sizeof(long long));
  MPI_Allgather(&value, 1, MPI_LONG_LONG, theirs.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD);
  report(rank, "bootstrap all-gather equals MPI_Allgather", s.ok() && ours == theirs, s.message());

  // Split into odd and even ranks, reversed.
  ncclComm_t sub = nullptr;
  r = ncclCommSplit(comm, rank % 2, size - rank, &sub, nullptr);
  int subSize = -1, subRank = -1;
  if (r == ncclSuccess) {
    ncclCommCount(sub, &subSize);
    ncclCommUserRank(sub, &subRank);
  }
  int expectSize = rank % 2 == 0 ? (size + 1) / 2 : size / 2;
  int expectRank = expectSize - 1 - rank / 2;
  report(rank, "ncclCommSplit by parity, reversed keys",
         r == ncclSuccess && subSize == expectSize && subRank == expectRank, lastError(r));
  if (sub != nullptr) ncclCommDestroy(sub);

  r = ncclCommDestroy(comm);
  report(rank, "ncclCommDestroy", r == ncclSuccess, lastError(r));
  if (rank == 0) std::printf("%d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
