// Communicator init time and memory, for growing rank counts on this
// machine. Prints figures; asserts nothing about time.
//
//   comm_init_bench [--ranks 2,4,8,16,32,64] [--reps 3]
//
// Rank counts go from 1 to 256; a bad command line exits 1 with a message.
// Each rank is a forked process; the unique id comes from a separate root
// process, as in a real job. Init time is from the first rank entering
// ncclCommInitRank to the last one leaving it (CLOCK_MONOTONIC is shared by
// all processes of the machine), median over the repetitions. Memory is the
// growth of each rank's resident set across init, averaged over ranks.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "harness.h"
#include "nccl.h"
#include "util/strings.h"

using namespace braid::test;

namespace {

long long monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long residentKb() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

struct Sample {
  double seconds = 0;
  double kbPerComm = 0;
  bool ok = true;
  std::string error;
};

Sample runOnce(int nranks) {
  RootProcess root = startRootProcess();
  auto out = runRanks(nranks, [&](int rank, int n) -> std::string {
    long long kb0 = residentKb();
    long long t0 = monotonicNs();
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, n, root.id, rank);
    long long t1 = monotonicNs();
    long long kb1 = residentKb();
    if (r != ncclSuccess) return std::string("ERR ") + ncclGetLastError(nullptr);
    ncclCommDestroy(comm);
    return braid::strCat("OK ", t0, " ", t1, " ", kb1 - kb0);
  }, 120);
  Sample s;
  long long first = 0, last = 0;
  double kb = 0;
  for (const RankOutcome& o : out) {
    long long t0 = 0, t1 = 0, dk = 0;
    if (std::sscanf(o.report.c_str(), "OK %lld %lld %lld", &t0, &t1, &dk) != 3) {
      s.ok = false;
      s.error = o.report;
      continue;
    }
    first = first == 0 ? t0 : std::min(first, t0);
    last = std::max(last, t1);
    kb += static_cast<double>(dk);
  }
  s.seconds = (last - first) / 1e9;
  s.kbPerComm = kb / nranks;
  return s;
}

// Each rank is a process with a report pipe: more would exhaust the default
// limit of 1024 open files.
constexpr long kMaxRanks = 256;
constexpr char kUsage[] = "usage: comm_init_bench [--ranks 2,4,8] [--reps 3]  (ranks 1..256, reps 1..100)\n";

// A whole number in [min, max]; false for anything else.
bool parseCount(const std::string& text, long min, long max, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

int run(const std::vector<int>& sizes, int reps) {
  std::printf("# Communicator init on %ld cores, host backend, %d repetitions (median)\n",
              sysconf(_SC_NPROCESSORS_ONLN), reps);
  std::printf("# %6s %12s %12s %16s\n", "ranks", "init (s)", "min (s)", "RSS/comm (KiB)");
  int failures = 0;
  for (int n : sizes) {
    std::vector<double> times;
    double kb = 0;
    std::string error;
    for (int r = 0; r < reps; ++r) {
      Sample s = runOnce(n);
      if (!s.ok) {
        error = s.error;
        break;
      }
      times.push_back(s.seconds);
      kb += s.kbPerComm;
    }
    if (!error.empty()) {
      std::printf("  %6d  failed: %s\n", n, error.c_str());
      ++failures;
      continue;
    }
    std::sort(times.begin(), times.end());
    std::printf("  %6d %12.3f %12.3f %16.0f\n", n, times[times.size() / 2], times.front(), kb / reps);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {2, 4, 8, 16, 32, 64};
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (a != "--ranks" && a != "--reps") {
      std::fprintf(stderr, "comm_init_bench: unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 1;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "comm_init_bench: %s needs a value\n%s", a.c_str(), kUsage);
      return 1;
    }
    const std::string v = argv[++i];
    if (a == "--ranks") {
      sizes.clear();
      for (const std::string& part : braid::splitString(v, ',')) {
        int n = 0;
        if (!parseCount(part, 1, kMaxRanks, &n)) {
          std::fprintf(stderr, "comm_init_bench: --ranks '%s': '%s' is not a rank count from 1 to %ld\n",
                       v.c_str(), part.c_str(), kMaxRanks);
          return 1;
        }
        sizes.push_back(n);
      }
      if (sizes.empty()) {
        std::fprintf(stderr, "comm_init_bench: --ranks needs at least one rank count\n%s", kUsage);
        return 1;
      }
    } else if (!parseCount(v, 1, 100, &reps)) {
      std::fprintf(stderr, "comm_init_bench: --reps '%s': must be a whole number from 1 to 100\n", v.c_str());
      return 1;
    }
  }
  // The root process of a run dies with its RootProcess; an exception must
  // unwind to it rather than end the program with the root still holding
  // our stdout.
  try {
    return run(sizes, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_init_bench: %s\n", e.what());
    return 1;
  }
}
