// The library under test, as the nine verbs the perf programs time: NCCL's
// API (Braid or an external NCCL, whichever nccl.h this is compiled against)
// or Open MPI's collectives (-R mpi). One Ops per rank, called by the thread
// that drives the rank; group() brackets calls that must be issued together
// (several GPUs of one thread, -m aggregation).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "nccl.h"

namespace perf {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual void allReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op) = 0;
  virtual void allGather(const void* send, void* recv, size_t sendCount, ncclDataType_t t) = 0;
  virtual void reduceScatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t,
                             ncclRedOp_t op) = 0;
  virtual void broadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                      int root) = 0;
  // Sends `count` elements to `sendPeer` and receives as many from `recvPeer`.
  virtual void sendRecv(const void* send, void* recv, size_t count, ncclDataType_t t, int sendPeer,
                        int recvPeer) = 0;
  virtual void allToAll(const void* send, void* recv, size_t countPerPeer, ncclDataType_t t) = 0;
  virtual void gather(const void* send, void* recv, size_t sendCount, ncclDataType_t t, int root) = 0;
  virtual void scatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t, int root) = 0;
  // nccl-tests' -R: 1 registers both buffers (ncclCommRegister), 2 makes
  // them symmetric windows (ncclCommWindowRegister, collective: every rank
  // calls it). Undone before the communicator is destroyed. No-op for MPI.
  virtual void registerBuffers(void* send, void* recv, size_t bytes, int mode) {}
  // mulsum: an op that multiplies this rank's input by `scalar` (one element
  // of type t, host memory) before summing (ncclRedOpCreatePreMulSum), and
  // its release. MPI has none: fails with a message.
  virtual ncclRedOp_t createPreMulSum(const void* scalar, ncclDataType_t t);
  virtual void destroyOp(ncclRedOp_t op) {}
};

// Which library a program times.
enum class Library { kNccl, kMpi };

// The name the programs print: "braid" or "nccl" (what nccl.h this is built
// against), or "mpi".
const char* libraryName(Library lib);
// "Braid 0.1.0 (NCCL API 2.28.9)", "NCCL 2.28.9" or "Open MPI v4.1.4".
std::string libraryVersion(Library lib);

// NCCL: communicators for ranks firstRank .. firstRank + ndevices - 1 of
// nranks, rank i on devices[i], from `id` (made by rank 0). Several devices
// initialize together (one helper thread each). Each Ops destroys its
// communicator.
std::vector<std::unique_ptr<Ops>> initNcclRanks(const ncclUniqueId& id, int nranks, int firstRank,
                                                const std::vector<Device*>& devices);
// ncclGetUniqueId, checked.
ncclUniqueId ncclId();
// Ops::registerBuffers for each of a thread's ranks, each on a thread of its
// own with its device current (window registration blocks until every rank
// of the communicator joins).
void registerNcclBuffers(const std::vector<std::unique_ptr<Ops>>& ops, const std::vector<Device*>& devices,
                         const std::vector<void*>& send, const std::vector<void*>& recv, size_t bytes,
                         int mode);

// Open MPI's collectives on MPI_COMM_WORLD over host memory (-R mpi). Fails
// with a message for a type or op MPI lacks (half, bfloat16, fp8; avg).
std::unique_ptr<Ops> makeMpiOps();
std::string mpiVersion();

// Every call of an Ops bracketed together (no-op for MPI).
void opsGroupStart(Library lib);
void opsGroupEnd(Library lib);

}  // namespace perf
