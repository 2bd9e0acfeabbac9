// Command line of the perf programs: nccl-tests' flags with the same meanings
// and defaults, plus -P (fork ranks), -R (reference library) and -J (JSON).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "types.h"

namespace perf {

struct Options {
  int nthreads = 1;             // -t
  int ngpus = 1;                // -g, GPUs (ranks) per thread
  size_t minBytes = 32u << 20;  // -b
  size_t maxBytes = 32u << 20;  // -e
  size_t stepBytes = 1u << 20;  // -i
  size_t stepFactor = 1;        // -f (> 1: multiply instead of add)
  int iters = 20;               // -n
  int warmup = 5;               // -w
  int aggIters = 1;             // -m
  int cycles = 1;               // -N, sweeps (0 = forever)
  int check = 1;                // -c, checked iterations per size (0 = none)
  std::vector<OpInfo> ops;      // -o
  std::vector<TypeInfo> types;  // -d
  int root = 0;                 // -r (-1: every root)
  int blocking = 0;             // -z, wait and barrier after each collective
  int graphLaunches = 0;        // -G, replay a captured graph (GPU only)
  int average = 1;              // -a, 0 rank 0, 1 avg, 2 min, 3 max
  int reportCputime = 0;        // -C
  int nprocs = 1;               // -P, forked ranks (no MPI)
  std::string reference;        // -R mpi: time Open MPI's collectives instead
  int registration = 0;         // -R 0/1/2: nccl-tests' buffer registration
  std::string jsonFile;         // -J
};

// Parses argv; prints usage and exits on -h or a bad flag.
Options parseOptions(int argc, char** argv, const char* program);

// "32M"-style sizes (K, M, G: powers of 1024); -1 if malformed.
double parseSize(const char* text);

}  // namespace perf
