// Ops over Open MPI's collectives (-R mpi): the reference the host backend is
// measured against, same sweep, same buffers, same check.
#include "check.h"
#include "ops.h"

#if defined(PERF_HAVE_MPI)
#include <mpi.h>

#include <climits>
#include <cstring>

namespace perf {

namespace {

MPI_Datatype mpiType(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default:
      PERF_DIE("-R mpi: MPI has no datatype for NCCL type %d (half, bfloat16, fp8)", static_cast<int>(t));
  }
}

MPI_Op mpiOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: PERF_DIE("-R mpi: MPI has no reduction for NCCL op %d (avg)", static_cast<int>(op));
  }
}

int mpiCount(size_t count) {
  PERF_REQUIRE(count <= static_cast<size_t>(INT_MAX), "-R mpi: count %zu exceeds MPI's int counts", count);
  return static_cast<int>(count);
}

#define MPICHECK(call)                              \
  do {                                              \
    int perf_m_ = (call);                           \
    if (perf_m_ != MPI_SUCCESS) {                   \
      char perf_s_[MPI_MAX_ERROR_STRING];           \
      int perf_n_ = 0;                              \
      MPI_Error_string(perf_m_, perf_s_, &perf_n_); \
      PERF_DIE("%s failed: %s", #call, perf_s_);    \
    }                                               \
  } while (0)

// MPI_IN_PLACE where the caller passed one buffer for both.
const void* inPlace(const void* send, const void* recv) {
  return send == recv ? MPI_IN_PLACE : send;
}

class MpiOps final : public Ops {
 public:
  MpiOps() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  void allReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op) override {
    MPICHECK(
        MPI_Allreduce(inPlace(send, recv), recv, mpiCount(count), mpiType(t), mpiOp(op), MPI_COMM_WORLD));
  }
  void allGather(const void* send, void* recv, size_t sendCount, ncclDataType_t t) override {
    // In place when the input already sits at this rank's slot of the output.
    int n = mpiCount(sendCount);
    const void* s = send == static_cast<char*>(recv) + rank_ * sendCount * typeSize(t) ? MPI_IN_PLACE : send;
    MPICHECK(MPI_Allgather(s, n, mpiType(t), recv, n, mpiType(t), MPI_COMM_WORLD));
  }
  void reduceScatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t,
                     ncclRedOp_t op) override {
    const void* s =
        recv == static_cast<const char*>(send) + rank_ * recvCount * typeSize(t) ? MPI_IN_PLACE : send;
    if (s == MPI_IN_PLACE) {
      // MPI's in-place reduce-scatter takes its input in recvbuf and leaves the
      // result at its start; NCCL's leaves it at this rank's slot.
      MPICHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, const_cast<void*>(send), mpiCount(recvCount),
                                        mpiType(t), mpiOp(op), MPI_COMM_WORLD));
      if (rank_ != 0) std::memmove(recv, send, recvCount * typeSize(t));
      return;
    }
    MPICHECK(
        MPI_Reduce_scatter_block(send, recv, mpiCount(recvCount), mpiType(t), mpiOp(op), MPI_COMM_WORLD));
  }
  void broadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root) override {
    if (rank_ == root && send != recv) std::memcpy(recv, send, count * typeSize(t));
    MPICHECK(MPI_Bcast(recv, mpiCount(count), mpiType(t), root, MPI_COMM_WORLD));
  }
  void reduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
              int root) override {
    const void* s = rank_ == root ? inPlace(send, recv) : send;
    MPICHECK(MPI_Reduce(s, recv, mpiCount(count), mpiType(t), mpiOp(op), root, MPI_COMM_WORLD));
  }
  void sendRecv(const void* send, void* recv, size_t count, ncclDataType_t t, int sendPeer,
                int recvPeer) override {
    MPICHECK(MPI_Sendrecv(send, mpiCount(count), mpiType(t), sendPeer, 0, recv, mpiCount(count), mpiType(t),
                          recvPeer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  void allToAll(const void* send, void* recv, size_t countPerPeer, ncclDataType_t t) override {
    int n = mpiCount(countPerPeer);
    MPICHECK(MPI_Alltoall(inPlace(send, recv), n, mpiType(t), recv, n, mpiType(t), MPI_COMM_WORLD));
  }
  void gather(const void* send, void* recv, size_t sendCount, ncclDataType_t t, int root) override {
    int n = mpiCount(sendCount);
    const void* s = rank_ == root && send == static_cast<char*>(recv) + rank_ * sendCount * typeSize(t)
                        ? MPI_IN_PLACE
                        : send;
    MPICHECK(MPI_Gather(s, n, mpiType(t), recv, n, mpiType(t), root, MPI_COMM_WORLD));
  }
  void scatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t, int root) override {
    int n = mpiCount(recvCount);
    void* r = rank_ == root && recv == static_cast<const char*>(send) + rank_ * recvCount * typeSize(t)
                  ? MPI_IN_PLACE
                  : recv;
    MPICHECK(MPI_Scatter(send, n, mpiType(t), r, n, mpiType(t), root, MPI_COMM_WORLD));
  }

 private:
  static size_t typeSize(ncclDataType_t t) {
    int bytes = 0;
    MPI_Type_size(mpiType(t), &bytes);
    return static_cast<size_t>(bytes);
  }
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Ops> makeMpiOps() {
  return std::make_unique<MpiOps>();
}

std::string mpiVersion() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, static_cast<size_t>(len));
  size_t comma = v.find(',');  // "Open MPI v4.1.4, package: ..."
  return comma == std::string::npos ? v : v.substr(0, comma);
}

}  // namespace perf

#else

namespace perf {

std::unique_ptr<Ops> makeMpiOps() {
  PERF_DIE("-R mpi: this program was built without MPI");
}
std::string mpiVersion() {
  return "none";
}

}  // namespace perf

#endif
