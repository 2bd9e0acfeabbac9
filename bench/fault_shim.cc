// Test helper, preloaded (LD_PRELOAD) into allreduce_vs_mpi by its tests:
// BRAID_FAULT=fail makes ncclAllReduce fail without running; BRAID_FAULT=
// corrupt runs it and then flips one bit of rank 0's first output byte.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "nccl.h"

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void* send, void* recv,
                                                                             size_t count,
                                                                             ncclDataType_t type,
                                                                             ncclRedOp_t op, ncclComm_t comm,
                                                                             braidStream_t stream) {
  const char* fault = std::getenv("BRAID_FAULT");
  if (fault && !std::strcmp(fault, "fail")) return ncclInternalError;
  using Fn =
      ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, braidStream_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "ncclAllReduce"));
  ncclResult_t r = real(send, recv, count, type, op, comm, stream);
  int rank = -1;
  if (r == ncclSuccess && fault && !std::strcmp(fault, "corrupt") &&
      ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0 && count > 0) {
    static_cast<unsigned char*>(recv)[0] ^= 0x40;
  }
  return r;
}
