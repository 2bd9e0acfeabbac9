// Error checks for the perf programs: a failing NCCL, MPI or GPU runtime call
// prints the call, file:line and the library's own words, then exits nonzero.
// Every thread may use them; exiting ends the whole process (and the forked
// launcher then stops the other ranks).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "nccl.h"

namespace perf {

[[noreturn]] void die(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// Fails with ncclGetErrorString and ncclGetLastError for `result`.
[[noreturn]] void ncclFailed(const char* call, const char* file, int line, ncclResult_t result);

}  // namespace perf

#define PERF_DIE(...) ::perf::die(__FILE__, __LINE__, __VA_ARGS__)

#define NCCLCHECK(call)                                                                 \
  do {                                                                                  \
    ncclResult_t perf_r_ = (call);                                                      \
    if (perf_r_ != ncclSuccess) ::perf::ncclFailed(#call, __FILE__, __LINE__, perf_r_); \
  } while (0)

#define PERF_REQUIRE(cond, ...)         \
  do {                                  \
    if (!(cond)) PERF_DIE(__VA_ARGS__); \
  } while (0)
