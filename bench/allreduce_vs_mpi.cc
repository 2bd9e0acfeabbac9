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
// per call is the slowest rank's. The table gives the round pair (a Braid
// round and the MPI round after it) whose MPI/Braid ratio is the median of
// all pairs, so that a machine whose speed drifts (a VM whose neighbours come
// and go) slows both sides of a ratio alike; -s best gives each library's
// fastest round instead. Either way ratio = mpi(us) / braid(us) of the row.
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
// Each size's first call of each library is checked against the exact sum
// (small integers in float); a wrong element or a failed NCCL call ends the
// run with exit status 1.
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
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

// "8", "1.5K", "256M", "1G" (powers of 1024) as a whole number of bytes;
// false for anything else (no digits, trailing text, inf, nan, negative,
// fractions of a byte, more than 2^62).
bool parseSize(const char* s, size_t* bytes) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return false;
  switch (*end) {
    case 'K': case 'k': v *= 1024; ++end; break;
    case 'M': case 'm': v *= 1024 * 1024; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end != '\0' || v != std::floor(v) || v > 4.6e18) return false;
  *bytes = static_cast<size_t>(v);
  return true;
}

// A whole number in [min, max]; false for anything else.
bool parseInt(const char* s, long min, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < min || v > max) return false;
  *out = v;
  return true;
}

// The index of the median of `values` (the upper middle one of an even
// count), or with `best` of the smallest.
size_t pick(const std::vector<double>& values, bool best) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  return best ? order.front() : order[order.size() / 2];
}

// A failed NCCL call ends the job: the other ranks may be waiting in a
// collective this rank will never join.
void checkNccl(ncclResult_t r, const char* what, int rank, ncclComm_t comm) {
  if (r == ncclSuccess) return;
  std::fprintf(stderr, "allreduce_vs_mpi: rank %d: %s failed: %s (last error: %s)\n", rank, what,
               ncclGetErrorString(r), ncclGetLastError(comm));
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Input element i of `rank`: small integers, so that the float sum over the
// ranks, n(n+1)/2 + n(i % 7), is exact in any order.
float inputValue(int rank, size_t i) {
  return static_cast<float>(rank + 1 + static_cast<int>(i % 7));
}

// Whether `out` holds the sum over n ranks of every input element; the
// ranks agree on the answer, and those with wrong elements say where.
bool outputCorrect(const char* library, const float* out, size_t count, int rank, int n) {
  long long wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
    if (!(out[i] == want) && wrong++ == 0) first = i;
  }
  if (wrong) {
    std::fprintf(stderr,
                 "allreduce_vs_mpi: rank %d: %s all-reduce of %zu bytes: %lld wrong elements, the first at "
                 "%zu: %g, expected %g\n",
                 rank, library, count * sizeof(float), wrong, first, static_cast<double>(out[first]),
                 static_cast<double>(n * (n + 1) / 2 + n * static_cast<int>(first % 7)));
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return wrong == 0;
}

double memcpyBandwidth() {
  const size_t bytes = 256u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  double t0 = now();
  for (int i = 0; i < 4; ++i) std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  return 4.0 * bytes / (now() - t0) / 1e9;
}

constexpr char kUsage[] =
    "usage: allreduce_vs_mpi [-b MIN] [-e MAX] [-f FACTOR] [-w 0|1] [-o BYTES] [-r ROUNDS] [-t MS]\n"
    "                        [-s median|best] [-h]\n"
    "  -b, -e  smallest and largest size, bytes with K, M, G suffixes, 4 to 4G (default 8 and 256M)\n"
    "  -f      sizes grow by this whole factor, 2 to 1024 (default 4)\n"
    "  -w 1    buffers from ncclMemAlloc, registered as a window (default 0)\n"
    "  -o      output this many bytes past a page, a multiple of 4 up to 1M (default 0)\n"
    "  -r      alternating rounds of each library, 1 to 100000 (default 15)\n"
    "  -t      milliseconds each round fills, 0 to 60000 (default 10)\n"
    "  -s      times of the round pair with the median MPI/Braid ratio, or each library's best round\n";

struct Args {
  size_t minBytes = 8, maxBytes = 256u << 20;
  size_t factor = 4;
  bool window = false;
  size_t outOffset = 0;
  int rounds = 15;
  double roundSeconds = 0.010;
  bool best = false;
  bool help = false;
};

// Parses the command line into `a`: "" when it is good, else what is wrong.
std::string parseArgs(int argc, char** argv, Args* a) {
  const size_t kMaxBytes = size_t{4} << 30;  // MPI counts are ints
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      a->help = true;
      return "";
    }
    const char* expected = nullptr;
    if (flag == "-b" || flag == "-e") {
      expected = "a size from 4 to 4G (K, M, G suffixes)";
    } else if (flag == "-f") {
      expected = "a whole number from 2 to 1024";
    } else if (flag == "-w") {
      expected = "0 or 1";
    } else if (flag == "-o") {
      expected = "a multiple of 4 bytes up to 1M";
    } else if (flag == "-r") {
      expected = "a whole number from 1 to 100000";
    } else if (flag == "-t") {
      expected = "milliseconds from 0 to 60000";
    } else if (flag == "-s") {
      expected = "'median' or 'best'";
    } else {
      return "unknown argument '" + flag + "'";
    }
    if (i + 1 >= argc) return flag + " needs a value: " + expected;
    const char* v = argv[++i];
    long n = 0;
    bool ok = false;
    if (flag == "-b" || flag == "-e") {
      size_t* bytes = flag == "-b" ? &a->minBytes : &a->maxBytes;
      ok = parseSize(v, bytes) && *bytes >= sizeof(float) && *bytes <= kMaxBytes;
    } else if (flag == "-f") {
      ok = parseInt(v, 2, 1024, &n);
      a->factor = static_cast<size_t>(n);
    } else if (flag == "-w") {
      ok = parseInt(v, 0, 1, &n);
      a->window = n != 0;
    } else if (flag == "-o") {
      ok = parseSize(v, &a->outOffset) && a->outOffset % sizeof(float) == 0 && a->outOffset <= (1u << 20);
    } else if (flag == "-r") {
      ok = parseInt(v, 1, 100000, &n);
      a->rounds = static_cast<int>(n);
    } else if (flag == "-t") {
      char* end = nullptr;
      double ms = std::strtod(v, &end);
      ok = end != v && *end == '\0' && std::isfinite(ms) && ms >= 0 && ms <= 60000;
      a->roundSeconds = ms / 1e3;
    } else if (flag == "-s") {
      ok = !std::strcmp(v, "median") || !std::strcmp(v, "best");
      a->best = !std::strcmp(v, "best");
    }
    if (!ok) return "invalid value '" + std::string(v) + "' for " + flag + ": " + expected;
  }
  if (a->minBytes > a->maxBytes) {
    return "-b " + std::to_string(a->minBytes) + " is larger than -e " + std::to_string(a->maxBytes);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Args args;
  const std::string bad = parseArgs(argc, argv, &args);
  if (!bad.empty() || args.help) {
    // Every rank parsed the same command line; rank 0 speaks, all exit.
    if (rank == 0 && args.help) std::printf("%s", kUsage);
    if (rank == 0 && !bad.empty()) std::fprintf(stderr, "allreduce_vs_mpi: %s\n%s", bad.c_str(), kUsage);
    MPI_Finalize();
    return bad.empty() ? 0 : 1;
  }
  const size_t minBytes = args.minBytes, maxBytes = args.maxBytes, factor = args.factor;
  const bool window = args.window, best = args.best;
  const size_t outOffset = args.outOffset;
  const int rounds = args.rounds;
  const double roundSeconds = args.roundSeconds;
  double mcpy = rank == 0 ? memcpyBandwidth() : 0;

  ncclUniqueId id;
  if (rank == 0) checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", rank, nullptr);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  checkNccl(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank", rank, nullptr);
  const size_t page = 4096;
  const size_t elems = std::max(maxBytes, sizeof(float)) / sizeof(float);
  const size_t span = (elems * sizeof(float) + page - 1) / page * page;  // in, then out at span + outOffset
  const size_t total = 2 * span + outOffset;
  void* mem = nullptr;
  ncclWindow_t win = nullptr;
  if (window) {
    checkNccl(ncclMemAlloc(&mem, total), "ncclMemAlloc", rank, comm);
    checkNccl(ncclCommWindowRegister(comm, mem, total, &win, NCCL_WIN_COLL_SYMMETRIC),
              "ncclCommWindowRegister", rank, comm);
  } else {
    mem = std::aligned_alloc(page, (total + page - 1) / page * page);
  }
  float* in = static_cast<float*>(mem);
  float* out = reinterpret_cast<float*>(static_cast<char*>(mem) + span + outOffset);
  for (size_t i = 0; i < elems; ++i) in[i] = inputValue(rank, i);
  std::fill(out, out + elems, 0.0f);
  if (rank == 0) {
    std::printf(
        "# all-reduce, float sum, %d ranks; single-thread memcpy %.2f GB/s; buffers: %s, output %zu bytes "
        "past a page\n# times: %s of %d alternating rounds of at least %.0f ms each; ratio = mpi(us) / "
        "braid(us)\n",
        n, mcpy, window ? "ncclMemAlloc, registered as a window (zero-copy)" : "plain host memory", outOffset,
        best ? "each library's best" : "the round pair with the median MPI/Braid ratio", rounds,
        roundSeconds * 1e3);
    std::printf("# %12s %12s %12s %12s %12s %8s\n", "bytes", "braid(us)", "mpi(us)", "braid GB/s", "mpi GB/s",
                "ratio");
  }
  int status = 0;
  // -b >= 4 and -f >= 2: the sizes grow, and stop before they could overflow.
  for (size_t bytes = minBytes; bytes <= maxBytes;
       bytes = bytes > maxBytes / factor ? maxBytes + 1 : bytes * factor) {
    size_t count = std::max<size_t>(1, bytes / sizeof(float));
    // The time of one call (slowest rank, after a warm-up call) sets the
    // number of calls that fill a round.
    // The warm-up calls of each library are checked: a wrong sum stops the sweep.
    auto allReduce = [&] {
      checkNccl(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce", rank,
                comm);
    };
    MPI_Barrier(MPI_COMM_WORLD);
    std::fill(out, out + count, -1.0f);
    allReduce();
    if (!outputCorrect("Braid", out, count, rank, n)) {
      status = 1;
      break;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < 3; ++i) allReduce();
    double perCall = (now() - t0) / 3;
    MPI_Allreduce(MPI_IN_PLACE, &perCall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const long iters =
        std::max(1L, std::min(1000000L, static_cast<long>(roundSeconds / std::max(perCall, 1e-9))));
    std::fill(out, out + count, -1.0f);
    MPI_Allreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (!outputCorrect("MPI", out, count, rank, n)) {
      status = 1;
      break;
    }
    std::vector<double> braidRounds, mpiRounds, ratios;
    for (int round = 0; round < rounds; ++round) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      for (long i = 0; i < iters; ++i) allReduce();
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
    // The printed times and ratio come from the same rounds.
    const size_t braidRound = best ? pick(braidRounds, true) : pick(ratios, false);
    const size_t mpiRound = best ? pick(mpiRounds, true) : braidRound;
    const double tBraid = braidRounds[braidRound], tMpi = mpiRounds[mpiRound];
    const double ratio = tMpi / tBraid;
    double factorBus = 2.0 * (n - 1) / n;
    double b = count * sizeof(float);
    if (rank == 0) {
      std::printf("  %12zu %12.2f %12.2f %12.3f %12.3f %8.2f\n", static_cast<size_t>(b), tBraid * 1e6,
                  tMpi * 1e6, b / tBraid / 1e9 * factorBus, b / tMpi / 1e9 * factorBus, ratio);
      std::fflush(stdout);
    }
  }
  if (window) {
    checkNccl(ncclCommWindowDeregister(comm, win), "ncclCommWindowDeregister", rank, comm);
    checkNccl(ncclMemFree(mem), "ncclMemFree", rank, comm);
  } else {
    std::free(mem);
  }
  checkNccl(ncclCommDestroy(comm), "ncclCommDestroy", rank, nullptr);
  MPI_Finalize();
  return status;
}
