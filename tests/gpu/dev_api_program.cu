// NCCL's device API from user kernels built against NCCL 2.28's own headers
// (nccl.h, nccl_device.h), or against Braid's, and run on Braid's library, as PyTorch's
// symmetric-memory kernels are: two ranks in two processes, or with
// --threads two threads of one process (ncclCommInitAll), one GPU each or
// both on the one GPU there is, register an ncclMemAlloc window, create
// a device communicator with LSA barriers, a resource buffer and an LL
// all-to-all, and run kernels that
//   - write every peer's window through ncclGetLsaPointer between LSA
//     barriers, and check what the peers wrote into their own (rounds);
//   - all-reduce by reading every peer's window directly;
//   - find the window from a pointer (ncclFindWindow), exchange words
//     through the resource buffers and through ncclLLA2ASession;
//   - sync one warp's barrier, write peers through ncclSymPtr by world
//     rank, broadcast within a warp and within some of its lanes.
// Then: a window of cudaMalloc memory has a descriptor without a flat view,
// bad requirements and double destroys are refused, and everything is
// released. Exits 0 when all holds, 77 (skip) without a GPU.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <nccl_device.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// Built twice: against NCCL's headers (the drop-in case) and, with
// BRAID_HEADERS defined, against Braid's own nccl.h and nccl_device.h.
#if defined(BRAID_NCCL_H) != defined(BRAID_HEADERS)
#error "this build of the program must see the other library's headers"
#endif

namespace {

constexpr int kRanks = 2;
constexpr int kBlocks = 4;
constexpr int kThreads = 256;
constexpr size_t kPerRank = size_t(1) << 20;  // ints each rank writes into every window
constexpr size_t kCount = size_t(3) << 20;    // floats all-reduced
constexpr int kRounds = 3;

__host__ __device__ uint32_t putValue(int round, int src, int dst, size_t i) {
  return uint32_t(round) * 1000003u + uint32_t(src) * 7919u + uint32_t(dst) * 104729u + uint32_t(i);
}
__host__ __device__ float input(int rank, size_t i) {
  return float((i * 7 + size_t(rank) * 13) % 1024);
}
__host__ __device__ uint64_t word(int round, int src, int dst) {
  return (uint64_t(round + 1) << 40) | (uint64_t(src) << 20) | uint64_t(dst + 1);
}

// Block b of every rank writes and checks the same indices, so block b's
// barrier orders exactly the writes it checks.
__global__ void putAndCheck(ncclWindow_t win, ncclDevComm dc, int round, unsigned* errors) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamTagLsa(), blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);  // peers are done checking the last round
  const int me = dc.lsaRank, n = dc.lsaSize;
  for (int p = 0; p < n; ++p) {
    auto* dst = static_cast<uint32_t*>(ncclGetLsaPointer(win, size_t(me) * kPerRank * sizeof(uint32_t), p));
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kPerRank; i += gridDim.x * blockDim.x)
      dst[i] = putValue(round, me, p, i);
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  const auto* mine = static_cast<const uint32_t*>(ncclGetLocalPointer(win, 0));
  for (int r = 0; r < n; ++r) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kPerRank; i += gridDim.x * blockDim.x)
      if (mine[size_t(r) * kPerRank + i] != putValue(round, r, me, i)) atomicAdd(errors, 1u);
  }
}

__global__ void allReduce(ncclWindow_t win, size_t inOffset, float* out, ncclDevComm dc) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamTagLsa(), blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);  // every rank's input is in place
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kCount; i += gridDim.x * blockDim.x) {
    float sum = 0;
    for (int p = 0; p < dc.lsaSize; ++p)
      sum += static_cast<const float*>(ncclGetLsaPointer(win, inOffset, p))[i];
    out[i] = sum;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);  // nobody overwrites an input still read
}

// The LL all-to-all's packets go to slots slotBase + sender (of 2 * ranks);
// rank `lagRank` sends only after about a millisecond, so the other ranks
// look at its slots before it has written them.
__global__ void extras(ncclDevComm dc, ncclDevResourceHandle userBuf, ncclLLA2AHandle a2a, const void* inside,
                       ncclWindow_t expect, int round, unsigned* errors, int slotBase = 0, int lagRank = -1) {
  const int me = dc.lsaRank, n = dc.lsaSize;
  if (threadIdx.x == 0 && ncclFindWindow(ncclCoopThread(), dc, inside) != expect) atomicAdd(errors, 1000u);
  {
    ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamTagLsa(), kBlocks};
    bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
    if (threadIdx.x < n)
      static_cast<uint64_t*>(ncclGetResourceBufferLsaPointer(dc, userBuf, threadIdx.x))[me] =
          word(round, me, threadIdx.x);
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    if (threadIdx.x < n && static_cast<const uint64_t*>(ncclGetResourceBufferLocalPointer(
                               dc, userBuf))[threadIdx.x] != word(round, threadIdx.x, me))
      atomicAdd(errors, 100u);
  }
  ncclLLA2ASession<ncclCoopCta> s{ncclCoopCta(), dc, ncclTeamLsa(dc), a2a, 0, 2 * n};
  if (me == lagRank) {
    const long long start = clock64();
    while (clock64() - start < 2000000) {
    }
  }
  if (threadIdx.x < n) s.send(threadIdx.x, slotBase + me, word(round + 7, me, threadIdx.x));
  if (threadIdx.x < n && s.recv<uint64_t>(slotBase + threadIdx.x) != word(round + 7, threadIdx.x, me))
    atomicAdd(errors, 10u);
  s.endEpoch(ncclCoopCta());
}

#ifdef BRAID_HEADERS
// Braid's LL all-to-all across its 32-bit epoch wrap (its layout, from
// nccl_device.h: per block a header line holding the last epoch ended,
// then a half of slots for even epochs and one for odd): the next epoch
// becomes 2^32 - 2, and every slot of this rank's inbox holds a stale
// packet of epoch 2 (even half) or 3 (odd half), as it could 2^32 epochs
// after those were written, which the epochs after the wrap must not take
// for the peers' packets.
constexpr uint32_t kStaleData = 0xdeadbeefu;
__global__ void nearEpochWrap(ncclDevComm dc, ncclLLA2AHandle a2a) {
  uint4* lines = static_cast<uint4*>(ncclGetResourceBufferLocalPointer(dc, a2a.bufHandle));
  for (uint32_t i = threadIdx.x; i < 2 * a2a.nSlots; i += blockDim.x) {
    const uint32_t epoch = i < a2a.nSlots ? 2 : 3;
    lines[1 + i] = make_uint4(kStaleData, epoch, kStaleData, epoch);
  }
  if (threadIdx.x == 0) lines[0].x = 0xfffffffdu;
}
__global__ void lastEpoch(ncclDevComm dc, ncclLLA2AHandle a2a, uint32_t* out) {
  *out = static_cast<const uint4*>(ncclGetResourceBufferLocalPointer(dc, a2a.bufHandle))->x;
}
#endif

// A warp's worth of the rest: a barrier of one warp, symmetric pointers to
// world ranks, broadcasts within a warp and within some of its lanes.
__global__ void warps(ncclWindow_t win, ncclDevComm dc, int round, unsigned* errors) {
  if (threadIdx.x >= 32) return;
  ncclCoopWarp warp;
  const int me = dc.lsaRank, n = dc.lsaSize, lane = threadIdx.x;
  const ncclSymPtr<uint64_t> base(win, 0);
  ncclLsaBarrierSession<ncclCoopWarp> bar{warp, dc, ncclTeamTagLsa(), kBlocks + 1};
  bar.sync(warp, cuda::memory_order_relaxed);
  for (int p = 0; p < n; ++p)
    *(base + (me * 32 + lane)).peerPtr(ncclTeamRankToWorld(dc, ncclTeamLsa(dc), p)) = word(round, me, lane);
  bar.sync(warp, cuda::memory_order_acq_rel);
  for (int r = 0; r < n; ++r)
    if (*(base + (r * 32 + lane)).localPtr() != word(round, r, lane)) atomicAdd(errors, 1u);
  if (ncclCoopBcast(warp, uint64_t(lane == 5 ? 777 + round : lane), 5) != uint64_t(777 + round))
    atomicAdd(errors, 10u);
  if (lane >= 8 && lane < 16) {
    const ncclCoopLanes some(0x0000ff00u);
    if (some.thread_rank() != lane - 8 || some.size() != 8) atomicAdd(errors, 100u);
    if (ncclCoopBcast(some, lane * 3, 2) != 30) atomicAdd(errors, 100u);
  }
}

#define FAIL(...)                                           \
  do {                                                      \
    std::fprintf(stderr, "rank %d: ", rank);                \
    std::fprintf(stderr, __VA_ARGS__);                      \
    std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
    return 1;                                               \
  } while (0)
#define NCCLCHECK(call)                                                                                   \
  do {                                                                                                    \
    ncclResult_t r_ = (call);                                                                             \
    if (r_ != ncclSuccess) FAIL("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
  } while (0)
#define CUDACHECK(call)                                                   \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess) FAIL("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

// Both ranks' threads meet here (one-process mode): a thread must not
// block on the GPU (allocations, copies) while the other's kernel waits
// for a kernel it has yet to launch.
class Rendezvous {
 public:
  void meet() {
    std::unique_lock<std::mutex> lock(mu_);
    const int generation = generation_;
    if (++arrived_ == kRanks) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, generation_ = 0;
};

// Everything one rank does on its initialized communicator, on its GPU.
int runRank(int rank, ncclComm_t comm, Rendezvous* together) {
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const size_t putBytes = kRanks * kPerRank * sizeof(uint32_t), bytes = putBytes + kCount * sizeof(float);
  void* buf = nullptr;
  NCCLCHECK(ncclMemAlloc(&buf, bytes));
  ncclWindow_t win = nullptr;
  NCCLCHECK(ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  ncclWindow_vidmem desc{};
  CUDACHECK(cudaMemcpy(&desc, win, sizeof(desc), cudaMemcpyDeviceToHost));
  if (desc.lsaFlatBase == nullptr || desc.lsaRank != rank || desc.worldRank != rank || desc.stride4G < 1)
    FAIL("window descriptor: flat base %p, LSA rank %d, world rank %d, stride %u x 4 GiB",
         static_cast<void*>(desc.lsaFlatBase), desc.lsaRank, desc.worldRank, desc.stride4G);

  ncclDevResourceHandle userBuf = 0;
  ncclDevResourceRequirements userReq{};
  userReq.bufferSize = 64 * sizeof(uint64_t);
  userReq.bufferAlign = 256;
  userReq.outBufferHandle = &userBuf;
  ncclLLA2AHandle a2a{};
  ncclDevResourceRequirements a2aReq{};
  NCCLCHECK(ncclLLA2ACreateRequirement(1, ncclLLA2ACalcSlots(2 * kRanks, sizeof(uint64_t)), &a2a, &a2aReq));
  userReq.next = &a2aReq;
  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = kBlocks + 2;
  reqs.resourceRequirementsList = &userReq;
  ncclDevComm dc{};
  NCCLCHECK(ncclDevCommCreate(comm, &reqs, &dc));
  if (dc.rank != rank || dc.nRanks != kRanks || dc.lsaSize != kRanks || dc.lsaRank != rank ||
      dc.lsaBarrier.nBarriers != kBlocks + 2 || dc.resourceWindow == nullptr || userBuf == 0)
    FAIL("device communicator: rank %d of %d, LSA %d of %d, %d barriers, user buffer at handle %u", dc.rank,
         dc.nRanks, dc.lsaRank, dc.lsaSize, dc.lsaBarrier.nBarriers, userBuf);
  if (ncclTeamLsa(comm).nRanks != kRanks) FAIL("host ncclTeamLsa has %d ranks", ncclTeamLsa(comm).nRanks);

  unsigned* errors = nullptr;
  CUDACHECK(cudaMalloc(&errors, sizeof(unsigned)));
  CUDACHECK(cudaMemsetAsync(errors, 0, sizeof(unsigned), stream));
  float* result = nullptr;
  CUDACHECK(cudaMalloc(&result, kCount * sizeof(float)));
  uint32_t* last = nullptr;  // allocated here: a thread must not allocate while kernels wait for each other
  CUDACHECK(cudaMalloc(&last, sizeof(uint32_t)));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (together != nullptr) together->meet();
  for (int round = 0; round < kRounds; ++round)
    putAndCheck<<<kBlocks, kThreads, 0, stream>>>(win, dc, round, errors);
  CUDACHECK(cudaGetLastError());
  unsigned bad = 0;
  CUDACHECK(cudaMemcpyAsync(&bad, errors, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (bad != 0) FAIL("%u words written by peers through ncclGetLsaPointer were wrong", bad);

  std::vector<float> in(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = input(rank, i);
  CUDACHECK(cudaMemcpyAsync(static_cast<char*>(buf) + putBytes, in.data(), kCount * sizeof(float),
                            cudaMemcpyHostToDevice, stream));
  allReduce<<<kBlocks, kThreads, 0, stream>>>(win, putBytes, result, dc);
  CUDACHECK(cudaGetLastError());
  CUDACHECK(cudaMemcpyAsync(out.data(), result, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0;
    for (int r = 0; r < kRanks; ++r) want += input(r, i);
    if (out[i] != want) FAIL("device-API all-reduce: element %zu is %g, not %g", i, out[i], want);
  }

  for (int round = 0; round < kRounds; ++round)
    extras<<<1, 64, 0, stream>>>(dc, userBuf, a2a, static_cast<char*>(buf) + 4096, win, round, errors);
  CUDACHECK(cudaGetLastError());
  CUDACHECK(cudaMemcpyAsync(&bad, errors, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (bad != 0)
    FAIL("ncclFindWindow (x1000), resource buffers (x100) or the LL all-to-all (x10) went wrong: %u", bad);
#ifdef BRAID_HEADERS
  // Across the epoch wrap: 2^32 - 2 and 2^32 - 1 on the first half of
  // the slots, then 2 and 3 on the second half, whose stale packets no
  // epoch has overwritten; rank 1 sends those late, so rank 0 reads its
  // slots first and would take the stale packets had the wrap not cleared them.
  {
    nearEpochWrap<<<1, 64, 0, stream>>>(dc, a2a);
    for (int round = kRounds; round < kRounds + 4; ++round) {
      const bool wrapped = round >= kRounds + 2;
      extras<<<1, 64, 0, stream>>>(dc, userBuf, a2a, static_cast<char*>(buf) + 4096, win, round, errors,
                                   wrapped ? kRanks : 0, wrapped ? 1 : -1);
    }
    lastEpoch<<<1, 1, 0, stream>>>(dc, a2a, last);
    CUDACHECK(cudaGetLastError());
    uint32_t ended = 0;
    CUDACHECK(cudaMemcpyAsync(&bad, errors, sizeof(bad), cudaMemcpyDeviceToHost, stream));
    CUDACHECK(cudaMemcpyAsync(&ended, last, sizeof(ended), cudaMemcpyDeviceToHost, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    if (bad != 0)
      FAIL("across the LL epoch wrap, ncclLLA2ASession went wrong: %u (x10: a stale packet taken)", bad);
    if (ended != 3) FAIL("after the LL epoch wrap the last epoch ended is %u, not 3", ended);
  }
#endif
  for (int round = 0; round < kRounds; ++round) warps<<<1, 64, 0, stream>>>(win, dc, round, errors);
  CUDACHECK(cudaGetLastError());
  CUDACHECK(cudaMemcpyAsync(&bad, errors, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (bad != 0)
    FAIL("a warp's barrier and symmetric pointers (x1) or broadcasts (x10, x100) went wrong: %u", bad);
  if (together != nullptr) together->meet();  // both ranks' kernels are done

  // The library's collectives still run on the window (ranks that are
  // threads drive collectives from one thread: tests/gpu's GpuWindows).
  if (together == nullptr) {
    float* sums = static_cast<float*>(buf) + putBytes / sizeof(float);
    NCCLCHECK(ncclAllReduce(sums, sums, kCount, ncclFloat, ncclSum, comm, stream));
    CUDACHECK(cudaMemcpyAsync(out.data(), sums, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < kCount; i += 4099) {
      float want = 0;
      for (int r = 0; r < kRanks; ++r) want += input(r, i);
      if (out[i] != want) FAIL("ncclAllReduce on the window: element %zu is %g, not %g", i, out[i], want);
    }
  }

  // A window of the runtime's allocator: fine for collectives, no flat view.
  void* plain = nullptr;
  CUDACHECK(cudaMalloc(&plain, 1 << 20));
  ncclWindow_t plainWin = nullptr;
  NCCLCHECK(ncclCommWindowRegister(comm, plain, 1 << 20, &plainWin, NCCL_WIN_DEFAULT));
  CUDACHECK(cudaMemcpy(&desc, plainWin, sizeof(desc), cudaMemcpyDeviceToHost));
  if (desc.lsaFlatBase != nullptr) FAIL("a cudaMalloc window got a flat view");
  NCCLCHECK(ncclCommWindowDeregister(comm, plainWin));
  CUDACHECK(cudaFree(plain));

  // Refusals: multimem, and destroying twice.
  ncclDevCommRequirements multimem{};
  multimem.lsaMultimem = true;
  ncclDevComm none{};
  if (ncclDevCommCreate(comm, &multimem, &none) != ncclInvalidUsage ||
      std::strstr(ncclGetLastError(nullptr), "multimem") == nullptr)
    FAIL("lsaMultimem was not refused: %s", ncclGetLastError(nullptr));
  NCCLCHECK(ncclDevCommDestroy(comm, &dc));
  if (ncclDevCommDestroy(comm, &dc) != ncclInvalidArgument) FAIL("a device communicator was destroyed twice");
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  if (ncclCommWindowDeregister(comm, win) != ncclInvalidArgument) FAIL("a window was deregistered twice");
  NCCLCHECK(ncclMemFree(buf));
  CUDACHECK(cudaFree(result));
  CUDACHECK(cudaFree(errors));
  CUDACHECK(cudaFree(last));
  CUDACHECK(cudaStreamDestroy(stream));
  NCCLCHECK(ncclCommDestroy(comm));
  std::printf(
      "rank %d%s: device API: %d rounds of LSA puts, all-reduce of %zu floats, resource buffers, "
      "ncclFindWindow, the LL all-to-all, warp barriers, symmetric pointers and broadcasts all correct\n",
      rank, together != nullptr ? " (thread)" : " (process)", kRounds, kCount);
  return 0;
}

int runProcess(int rank, const ncclUniqueId& id) {
  int ndev = 0;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  CUDACHECK(cudaSetDevice(rank % ndev));
  ncclComm_t comm = nullptr;
  NCCLCHECK(ncclCommInitRank(&comm, kRanks, id, rank));
  return runRank(rank, comm, nullptr);
}

// ncclCommInitAll: the ranks are threads of this process, each on its GPU
// (GPU i % count): their windows are mapped from this process's allocations.
int runThreads() {
  int rank = -1, ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;  // no GPU: skip, as the processes do
  int devs[kRanks];
  for (int r = 0; r < kRanks; ++r) devs[r] = r % ndev;
  ncclComm_t comms[kRanks];
  NCCLCHECK(ncclCommInitAll(comms, kRanks, devs));
  // Every kernel loaded before any runs: the ranks share a CUDA context per
  // GPU, where a kernel's first launch under lazy loading (the default) may
  // wait for the context to go idle, which it never does while the other
  // rank's kernel spins waiting for this one (docs/gpu.md, "NCCL's device API").
  for (int r = 0; r < kRanks && r < ndev; ++r) {
    CUDACHECK(cudaSetDevice(devs[r]));
    cudaFuncAttributes attr;
    CUDACHECK(cudaFuncGetAttributes(&attr, putAndCheck));
    CUDACHECK(cudaFuncGetAttributes(&attr, allReduce));
    CUDACHECK(cudaFuncGetAttributes(&attr, extras));
    CUDACHECK(cudaFuncGetAttributes(&attr, warps));
#ifdef BRAID_HEADERS
    CUDACHECK(cudaFuncGetAttributes(&attr, nearEpochWrap));
    CUDACHECK(cudaFuncGetAttributes(&attr, lastEpoch));
#endif
  }
  Rendezvous together;
  int rc[kRanks] = {};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      int rank = r;
      cudaError_t e = cudaSetDevice(devs[r]);
      if (e != cudaSuccess) {
        std::fprintf(stderr, "rank %d: cudaSetDevice: %s\n", rank, cudaGetErrorString(e));
        rc[r] = 1;
        return;
      }
      rc[r] = runRank(r, comms[r], &together);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    if (rc[r] != 0) return rc[r];
  return 0;
}

}  // namespace

// No argument: one process per rank. --threads: one process, a thread per rank.
int main(int argc, char** argv) {
  if (dlsym(RTLD_DEFAULT, "braidGetVersion") == nullptr) {
    std::fprintf(stderr, "not running on Braid's libnccl (braidGetVersion missing)\n");
    return 1;
  }
  // Where there is one GPU both ranks use it (Braid refuses that by default, as NCCL does).
  setenv("BRAID_SHARE_GPU", "1", 0);
  if (argc > 1 && std::strcmp(argv[1], "--threads") == 0) {
    alarm(120);  // a hang fails the test
    return runThreads();
  }
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120);  // a hang fails the test
      int ndev = 0;
      if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) _exit(77);
      std::fflush(stdout);
      int rc = runProcess(rank, id);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int result = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0 && result == 0) result = rc;
  }
  return result;
}
