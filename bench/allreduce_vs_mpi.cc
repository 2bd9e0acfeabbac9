// Host all-reduce: Braid against Open MPI's MPI_Allreduce, same machine,
// same sizes, same run, alternating. Prints time, bus bandwidth (nccl-tests'
// definition: algbw * 2(n-1)/n) and their ratio per size, and single-thread
// memcpy bandwidth measured at the start as the reference ceiling.
//
//   mpirun -np 4 --allow-run-as-root --oversubscribe bench/allreduce_vs_mpi [-b 8] [-e 256M] [-f 4] [-w 1]
//   [-o 0] [-r 15] [-t 10] [-s median]
//
// Each size runs -r rounds of each library, alternating Braid and MPI. A
// round is one timed loop of as many calls as fill -t milliseconds (counted
// from Braid's time per call, the same count for both libraries); its time
// per call is the slowest rank's. The table gives each library's median
// round (-s best: its fastest round) and the median over rounds of MPI's time
// over Braid's in the same round pair, so that a machine whose speed drifts
// (a VM whose neighbours come and go) slows both sides of a ratio alike.
// Rounds much shorter than a scheduler time slice would instead measure
// whichever library happened to run undisturbed.
// -w 1: the buffers (both libraries use the same ones) come from
// ncclMemAlloc and are registered as a window (ncclCommWindowRegister), so
// Braid's all-reduce runs zero-copy where its selector prefers that.
// -o BYTES: the output buffer starts BYTES (a multiple of 4) past a page
// boundary; by default both buffers are page-aligned, as separate large
// allocations are. A small offset shows what misaligned views cost: glibc's
// memcpy, which Open MPI's shared-memory path uses, slows down 10-20x on some
// x86 CPUs when source and destination differ in alignment modulo 64.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

// The median of `values` (the upper middle one of an even count), or with
// `best` the smallest.
double pick(std::vector<double> values, bool best) {
  std::sort(values.begin(), values.end());
  return best ? values.front() : values[values.size() / 2];
}

double memcpyBandwidth() {
  const size_t bytes = 256u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  double t0 = now();
  for (int i = 0; i < 4; ++i) std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  return 4.0 * bytes / (now() - t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t minBytes = 8, maxBytes = 256u << 20;
  int factor = 4;
  bool window = false;
  size_t outOffset = 0;
  int rounds = 15;
  double roundSeconds = 0.010;
  bool best = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-b")) minBytes = parseSize(argv[i + 1]);
    if (!std::strcmp(argv[i], "-e")) maxBytes = parseSize(argv[i + 1]);
    if (!std::strcmp(argv[i], "-f")) factor = std::max(2, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "-w")) window = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "-o")) outOffset = parseSize(argv[i + 1]) / sizeof(float) * sizeof(float);
    if (!std::strcmp(argv[i], "-r")) rounds = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "-t")) roundSeconds = std::max(0.0, std::atof(argv[i + 1]) / 1e3);
    if (!std::strcmp(argv[i], "-s")) best = !std::strcmp(argv[i + 1], "best");
  }
  double mcpy = rank == 0 ? memcpyBandwidth() : 0;

  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const size_t page = 4096;
  const size_t elems = std::max(maxBytes, sizeof(float)) / sizeof(float);
  const size_t span = (elems * sizeof(float) + page - 1) / page * page;  // in, then out at span + outOffset
  const size_t total = 2 * span + outOffset;
  void* mem = nullptr;
  ncclWindow_t win = nullptr;
  if (window) {
    if (ncclMemAlloc(&mem, total) != ncclSuccess ||
        ncclCommWindowRegister(comm, mem, total, &win, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: window: %s\n", rank, ncclGetLastError(comm));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    mem = std::aligned_alloc(page, (total + page - 1) / page * page);
  }
  float* in = static_cast<float*>(mem);
  float* out = reinterpret_cast<float*>(static_cast<char*>(mem) + span + outOffset);
  std::fill(in, in + elems, 1.0f);
  std::fill(out, out + elems, 0.0f);
  if (rank == 0) {
    std::printf(
        "# all-reduce, float sum, %d ranks; single-thread memcpy %.2f GB/s; buffers: %s, output %zu bytes "
        "past a page\n# times: %s of %d alternating rounds of at least %.0f ms each; ratio: median of "
        "MPI/Braid "
        "per round pair\n",
        n, mcpy, window ? "ncclMemAlloc, registered as a window (zero-copy)" : "plain host memory", outOffset,
        best ? "best" : "median", rounds, roundSeconds * 1e3);
    std::printf("# %12s %12s %12s %12s %12s %8s\n", "bytes", "braid(us)", "mpi(us)", "braid GB/s", "mpi GB/s",
                "ratio");
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= static_cast<size_t>(factor)) {
    size_t count = std::max<size_t>(1, bytes / sizeof(float));
    // The time of one call (slowest rank, after a warm-up call) sets the
    // number of calls that fill a round.
    MPI_Barrier(MPI_COMM_WORLD);
    ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < 3; ++i) ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr);
    double perCall = (now() - t0) / 3;
    MPI_Allreduce(MPI_IN_PLACE, &perCall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const long iters =
        std::max(1L, std::min(1000000L, static_cast<long>(roundSeconds / std::max(perCall, 1e-9))));
    MPI_Allreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> braidRounds, mpiRounds, ratios;
    for (int round = 0; round < rounds; ++round) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      for (long i = 0; i < iters; ++i) ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr);
      double t = (now() - t0) / static_cast<double>(iters);
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      braidRounds.push_back(t);

      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      for (long i = 0; i < iters; ++i) {
        MPI_Allreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      t = (now() - t0) / static_cast<double>(iters);
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      mpiRounds.push_back(t);
      ratios.push_back(t / braidRounds.back());
    }
    const double tBraid = pick(braidRounds, best), tMpi = pick(mpiRounds, best);
    const double ratio = pick(ratios, false);
    double factorBus = 2.0 * (n - 1) / n;
    double b = count * sizeof(float);
    if (rank == 0) {
      std::printf("  %12zu %12.2f %12.2f %12.3f %12.3f %8.2f\n", static_cast<size_t>(b), tBraid * 1e6,
                  tMpi * 1e6, b / tBraid / 1e9 * factorBus, b / tMpi / 1e9 * factorBus, ratio);
      std::fflush(stdout);
    }
  }
  if (window) {
    ncclCommWindowDeregister(comm, win);
    ncclMemFree(mem);
  } else {
    std::free(mem);
  }
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
