// Ops over the NCCL API: whichever nccl.h this is compiled against (Braid's,
// or an external NCCL's for the .nccl programs).
#include <thread>
#include <vector>

#include "check.h"
#include "ops.h"

#if defined(PERF_LIBRARY_BRAID)
#include "braid.h"
#endif

namespace perf {

namespace {

class NcclOps final : public Ops {
 public:
  NcclOps(ncclComm_t comm, Device* dev) : comm_(comm), dev_(dev) {}
  ~NcclOps() override {
    for (void* h : handles_) NCCLCHECK(ncclCommDeregister(comm_, h));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    for (ncclWindow_t w : windows_) NCCLCHECK(ncclCommWindowDeregister(comm_, w));
#endif
    ncclCommDestroy(comm_);
  }

  void registerBuffers(void* send, void* recv, size_t bytes, int mode) override {
    for (void* p : {send, recv}) {
      if (mode == 1) {
        void* h = nullptr;
        NCCLCHECK(ncclCommRegister(comm_, p, bytes, &h));
        handles_.push_back(h);
      } else if (mode == 2) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
        ncclWindow_t w = nullptr;
        NCCLCHECK(ncclCommWindowRegister(comm_, p, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
        windows_.push_back(w);
#else
        PERF_DIE("-R 2: this NCCL has no windows (ncclCommWindowRegister, NCCL 2.27+)");
#endif
      }
    }
  }

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 11, 0)
  ncclRedOp_t createPreMulSum(const void* scalar, ncclDataType_t t) override {
    ncclRedOp_t op;
    NCCLCHECK(ncclRedOpCreatePreMulSum(&op, const_cast<void*>(scalar), t, ncclScalarHostImmediate, comm_));
    return op;
  }
  void destroyOp(ncclRedOp_t op) override {
    NCCLCHECK(ncclRedOpDestroy(op, comm_));
  }
#endif

  void allReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op) override {
    NCCLCHECK(ncclAllReduce(send, recv, count, t, op, comm_, dev_->stream()));
  }
  void allGather(const void* send, void* recv, size_t sendCount, ncclDataType_t t) override {
    NCCLCHECK(ncclAllGather(send, recv, sendCount, t, comm_, dev_->stream()));
  }
  void reduceScatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t,
                     ncclRedOp_t op) override {
    NCCLCHECK(ncclReduceScatter(send, recv, recvCount, t, op, comm_, dev_->stream()));
  }
  void broadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root) override {
    NCCLCHECK(ncclBroadcast(send, recv, count, t, root, comm_, dev_->stream()));
  }
  void reduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
              int root) override {
    NCCLCHECK(ncclReduce(send, recv, count, t, op, root, comm_, dev_->stream()));
  }
  void sendRecv(const void* send, void* recv, size_t count, ncclDataType_t t, int sendPeer,
                int recvPeer) override {
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclSend(send, count, t, sendPeer, comm_, dev_->stream()));
    NCCLCHECK(ncclRecv(recv, count, t, recvPeer, comm_, dev_->stream()));
    NCCLCHECK(ncclGroupEnd());
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  // NCCL 2.28 (and Braid) have all-to-all, gather and scatter as calls.
  void allToAll(const void* send, void* recv, size_t countPerPeer, ncclDataType_t t) override {
    NCCLCHECK(ncclAlltoAll(send, recv, countPerPeer, t, comm_, dev_->stream()));
  }
  void gather(const void* send, void* recv, size_t sendCount, ncclDataType_t t, int root) override {
    NCCLCHECK(ncclGather(send, recv, sendCount, t, root, comm_, dev_->stream()));
  }
  void scatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t, int root) override {
    NCCLCHECK(ncclScatter(send, recv, recvCount, t, root, comm_, dev_->stream()));
  }
#else
  // Older NCCL: grouped send/recv, as nccl-tests does.
  void allToAll(const void* send, void* recv, size_t countPerPeer, ncclDataType_t t) override {
    size_t bytes = countPerPeer * typeBytes(t);
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < nranks(); ++r) {
      NCCLCHECK(
          ncclSend(static_cast<const char*>(send) + r * bytes, countPerPeer, t, r, comm_, dev_->stream()));
      NCCLCHECK(ncclRecv(static_cast<char*>(recv) + r * bytes, countPerPeer, t, r, comm_, dev_->stream()));
    }
    NCCLCHECK(ncclGroupEnd());
  }
  void gather(const void* send, void* recv, size_t sendCount, ncclDataType_t t, int root) override {
    size_t bytes = sendCount * typeBytes(t);
    NCCLCHECK(ncclGroupStart());
    if (rank() == root) {
      for (int r = 0; r < nranks(); ++r) {
        NCCLCHECK(ncclRecv(static_cast<char*>(recv) + r * bytes, sendCount, t, r, comm_, dev_->stream()));
      }
    }
    NCCLCHECK(ncclSend(send, sendCount, t, root, comm_, dev_->stream()));
    NCCLCHECK(ncclGroupEnd());
  }
  void scatter(const void* send, void* recv, size_t recvCount, ncclDataType_t t, int root) override {
    size_t bytes = recvCount * typeBytes(t);
    NCCLCHECK(ncclGroupStart());
    if (rank() == root) {
      for (int r = 0; r < nranks(); ++r) {
        NCCLCHECK(
            ncclSend(static_cast<const char*>(send) + r * bytes, recvCount, t, r, comm_, dev_->stream()));
      }
    }
    NCCLCHECK(ncclRecv(recv, recvCount, t, root, comm_, dev_->stream()));
    NCCLCHECK(ncclGroupEnd());
  }

 private:
  int nranks() {
    int n = 0;
    NCCLCHECK(ncclCommCount(comm_, &n));
    return n;
  }
  int rank() {
    int r = 0;
    NCCLCHECK(ncclCommUserRank(comm_, &r));
    return r;
  }
  static size_t typeBytes(ncclDataType_t t) {
    switch (t) {
      case ncclInt8:
      case ncclUint8: return 1;
      case ncclFloat16:
      case ncclBfloat16: return 2;
      case ncclInt32:
      case ncclUint32:
      case ncclFloat32: return 4;
      default: return 8;
    }
  }
#endif

 private:
  ncclComm_t comm_;
  Device* dev_;
  std::vector<void*> handles_;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  std::vector<ncclWindow_t> windows_;
#endif
};

}  // namespace

ncclRedOp_t Ops::createPreMulSum(const void*, ncclDataType_t) {
  PERF_DIE(
      "-o mulsum: no PreMulSum operator here (Open MPI has none; NCCL has ncclRedOpCreatePreMulSum from "
      "2.11)");
}

void registerNcclBuffers(const std::vector<std::unique_ptr<Ops>>& ops, const std::vector<Device*>& devices,
                         const std::vector<void*>& send, const std::vector<void*>& recv, size_t bytes,
                         int mode) {
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ops.size(); ++i) {
    threads.emplace_back([&, i] {
      devices[i]->select();
      ops[i]->registerBuffers(send[i], recv[i], bytes, mode);
    });
  }
  for (std::thread& t : threads) t.join();
}

ncclUniqueId ncclId() {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  return id;
}

std::vector<std::unique_ptr<Ops>> initNcclRanks(const ncclUniqueId& id, int nranks, int firstRank,
                                                const std::vector<Device*>& devices) {
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  if (devices.size() == 1) {
    devices[0]->select();
    NCCLCHECK(ncclCommInitRank(&comms[0], nranks, id, firstRank));
  } else {
    // Each communicator initializes on its own thread: ncclCommInitRank blocks
    // until all ranks join, and Braid does not defer it inside a group.
    std::vector<std::thread> threads;
    for (size_t i = 0; i < devices.size(); ++i) {
      threads.emplace_back([&, i] {
        devices[i]->select();
        NCCLCHECK(ncclCommInitRank(&comms[i], nranks, id, firstRank + static_cast<int>(i)));
      });
    }
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::unique_ptr<Ops>> ops;
  for (size_t i = 0; i < devices.size(); ++i) ops.push_back(std::make_unique<NcclOps>(comms[i], devices[i]));
  return ops;
}

const char* libraryName(Library lib) {
  if (lib == Library::kMpi) return "mpi";
#if defined(PERF_LIBRARY_BRAID)
  return "braid";
#else
  return "nccl";
#endif
}

std::string libraryVersion(Library lib) {
  if (lib == Library::kMpi) return mpiVersion();
  int v = 0;
  NCCLCHECK(ncclGetVersion(&v));
  char buf[128];
#if defined(PERF_LIBRARY_BRAID)
  int b = 0;
  NCCLCHECK(braidGetVersion(&b));
  std::snprintf(buf, sizeof(buf), "Braid %d.%d.%d (NCCL API %d.%d.%d)", b / 10000, b / 100 % 100, b % 100,
                v / 10000, v / 100 % 100, v % 100);
#else
  std::snprintf(buf, sizeof(buf), "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#endif
  return buf;
}

void opsGroupStart(Library lib) {
  if (lib == Library::kNccl) NCCLCHECK(ncclGroupStart());
}

void opsGroupEnd(Library lib) {
  if (lib == Library::kNccl) NCCLCHECK(ncclGroupEnd());
}

}  // namespace perf
