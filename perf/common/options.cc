#include "options.h"

#include <getopt.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace perf {

double parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  // No digits, inf, nan, negative or beyond any buffer: malformed.
  if (end == text || !std::isfinite(v) || v < 0 || v > 9.0e18) return -1;
  while (*end == ' ') ++end;  // "32 M", as nccl-tests' sscanf("%lf %1s") reads it
  switch (*end) {
    case '\0': return v;
    case 'K':
    case 'k': v *= 1024; break;
    case 'M':
    case 'm': v *= 1024 * 1024; break;
    case 'G':
    case 'g': v *= 1024 * 1024 * 1024; break;
    default: return -1;
  }
  if (end[1] != '\0' || v > 9.0e18) return -1;  // "1Mfoo"
  return v;
}

namespace {

[[noreturn]] void usage(const char* program, int status) {
  std::FILE* out = status ? stderr : stdout;
  std::fprintf(
      out,
      "USAGE: %s\n"
      "  [-t,--nthreads <threads per process>] [-g,--ngpus <GPUs per thread>]\n"
      "  [-b,--minbytes <min size>] [-e,--maxbytes <max size>] (K, M, G suffixes)\n"
      "  [-i,--stepbytes <increment>] [-f,--stepfactor <factor>] (-b 0 with -f > 1 only with -e 0)\n"
      "  [-n,--iters <n>] [-w,--warmup_iters <n>] [-m,--agg_iters <n>] [-N,--run_cycles <n, 0=forever>]\n"
      "  [-c,--check <checked iterations, 0/1...>] [-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
      "  [-d,--datatype "
      "<int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
      "  [-r,--root <root, -1 = all>] [-z,--blocking <0/1>] [-G,--cudagraph <graph launches>]\n"
      "  [-a,--average <0 rank0/1 avg/2 min/3 max>] [-C,--report_cputime <0/1>]\n"
      "  [-P,--nprocs <ranks to fork, without mpirun>] [-R,--reference <mpi>] [-J,--json <file>]\n"
      "  [-R <0/1/2>: buffers from ncclMemAlloc, 1 registered, 2 symmetric windows] [-h,--help]\n"
      "Run under mpirun for one rank per process, or with -P N for N forked ranks.\n",
      program);
  std::exit(status);
}

size_t sizeArg(const char* program, const char* what, const char* text) {
  double v = parseSize(text);
  if (v < 0) {
    std::fprintf(stderr, "%s: invalid size '%s' for %s (bytes, optionally with a K, M or G suffix)\n", program,
                 text, what);
    std::exit(EXIT_FAILURE);
  }
  return static_cast<size_t>(v);
}

int intArg(const char* program, char flag, const char* text, int min, int max = 1000000000) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 0);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
    if (max == 1000000000) {
      std::fprintf(stderr, "%s: invalid value '%s' for -%c (at least %d)\n", program, text, flag, min);
    } else {
      std::fprintf(stderr, "%s: invalid value '%s' for -%c (%d to %d)\n", program, text, flag, min, max);
    }
    std::exit(EXIT_FAILURE);
  }
  return static_cast<int>(v);
}

}  // namespace

Options parseOptions(int argc, char** argv, const char* program) {
  Options o;
  parseTypes("float", &o.types);
  parseOps("sum", &o.ops);
  static const option kLong[] = {{"nthreads", required_argument, nullptr, 't'},
                                 {"ngpus", required_argument, nullptr, 'g'},
                                 {"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"agg_iters", required_argument, nullptr, 'm'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"run_cycles", required_argument, nullptr, 'N'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"root", required_argument, nullptr, 'r'},
                                 {"blocking", required_argument, nullptr, 'z'},
                                 {"cudagraph", required_argument, nullptr, 'G'},
                                 {"average", required_argument, nullptr, 'a'},
                                 {"report_cputime", required_argument, nullptr, 'C'},
                                 {"nprocs", required_argument, nullptr, 'P'},
                                 {"reference", required_argument, nullptr, 'R'},
                                 {"json", required_argument, nullptr, 'J'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:c:o:d:r:z:G:a:C:P:R:J:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 't': o.nthreads = intArg(program, 't', optarg, 1); break;
      case 'g': o.ngpus = intArg(program, 'g', optarg, 1); break;
      case 'b': o.minBytes = sizeArg(program, "minbytes", optarg); break;
      case 'e': o.maxBytes = sizeArg(program, "maxbytes", optarg); break;
      case 'i': o.stepBytes = sizeArg(program, "stepbytes", optarg); break;
      case 'f': o.stepFactor = static_cast<size_t>(intArg(program, 'f', optarg, 1)); break;
      case 'n': o.iters = intArg(program, 'n', optarg, 1); break;
      case 'm': o.aggIters = intArg(program, 'm', optarg, 1); break;
      case 'w': o.warmup = intArg(program, 'w', optarg, 0); break;
      case 'N': o.cycles = intArg(program, 'N', optarg, 0); break;
      case 'c': o.check = intArg(program, 'c', optarg, 0); break;
      case 'r': o.root = intArg(program, 'r', optarg, -1); break;
      case 'z': o.blocking = intArg(program, 'z', optarg, 0, 1); break;
      case 'G': o.graphLaunches = intArg(program, 'G', optarg, 0); break;
      case 'a': o.average = intArg(program, 'a', optarg, 0, 3); break;
      case 'C': o.reportCputime = intArg(program, 'C', optarg, 0, 1); break;
      case 'P': o.nprocs = intArg(program, 'P', optarg, 1); break;
      case 'J': o.jsonFile = optarg; break;
      case 'o':
        if (!parseOps(optarg, &o.ops)) {
          std::fprintf(stderr, "%s: unknown op '%s' (sum, prod, min, max, avg, mulsum, all)\n", program,
                       optarg);
          std::exit(EXIT_FAILURE);
        }
        break;
      case 'd':
        if (!parseTypes(optarg, &o.types)) {
          std::fprintf(stderr, "%s: unknown datatype '%s'\n", program, optarg);
          std::exit(EXIT_FAILURE);
        }
        break;
      case 'R':
        // nccl-tests' -R 0/1/2: buffer registration.
        if (std::strcmp(optarg, "0") == 0 || std::strcmp(optarg, "1") == 0 || std::strcmp(optarg, "2") == 0) {
          o.registration = std::atoi(optarg);
          break;
        }
        o.reference = optarg;
        if (o.reference != "mpi" && o.reference != "none" && o.reference != "") {
          std::fprintf(stderr, "%s: -R takes 'mpi' (Open MPI's collectives), or nccl-tests' 0/1/2\n",
                       program);
          std::exit(EXIT_FAILURE);
        }
        if (o.reference == "none") o.reference.clear();
        break;
      case 'h': usage(program, 0);
      default: usage(program, EXIT_FAILURE);
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", program, argv[optind]);
    usage(program, EXIT_FAILURE);
  }
  if (o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "%s: invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", program, o.minBytes,
                 o.maxBytes);
    std::exit(EXIT_FAILURE);
  }
  // nccl-tests' loop multiplies 0 forever; -b 0 with -f times size 0 alone (-e 0) or steps with -i.
  if (o.minBytes == 0 && o.stepFactor > 1 && o.maxBytes > 0) {
    std::fprintf(
        stderr,
        "%s: -b 0 with -f %zu never grows past size 0: use -b 0 -e 0 for size 0 alone, a -b above 0, "
        "or -i for steps\n",
        program, o.stepFactor);
    std::exit(EXIT_FAILURE);
  }
  if (o.stepFactor <= 1 && o.stepBytes == 0) {
    std::fprintf(stderr, "%s: -i 0 needs -f > 1\n", program);
    std::exit(EXIT_FAILURE);
  }
  return o;
}

}  // namespace perf
