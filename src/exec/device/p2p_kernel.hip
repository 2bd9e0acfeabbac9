// The point-to-point kernel: every send and receive of one communicator's
// group in one launch, so any pattern of a group progresses at once (A
// sends to B while B sends to A, large messages both ways). Each block
// drives one connector through its segments in order (dev_work.h), in
// Simple steps; a segment takes at least one step, so zero-byte messages
// still match, and every step's size is checked by its receiver (a send
// and a receive of different sizes fail, naming the peer, instead of
// shifting the connector's later steps). Copy blocks move the group's
// sends to oneself. Large segments into buffers the sender's GPU may
// write (the receiver says so in the mailbox) skip the FIFO (dev_work.h,
// direct writes).
#include "exec/device/device_prims.h"
#include "exec/device/launch.h"
#include "exec/reduce_ops.h"
#include "util/strings.h"

namespace braid::device {
namespace {

// A block's copy of `n` bytes (a send to oneself): 16 bytes at a time where
// both ends are 16-byte aligned, else byte by byte.
__device__ void copyBytes(const char* src, char* dst, uint64_t n) {
  const uint64_t tid = threadIdx.x;
  uint64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) {
    const uint64_t packs = n / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    // Four packs in flight per thread, then one at a time.
    constexpr uint64_t U = 4, kStride = U * kDevThreads;
    uint64_t i = tid;
    for (; i + (U - 1) * kDevThreads < packs; i += kStride) {
      uint4 v[U];
#pragma unroll
      for (uint64_t u = 0; u < U; ++u) v[u] = s[i + u * kDevThreads];
#pragma unroll
      for (uint64_t u = 0; u < U; ++u) d[i + u * kDevThreads] = v[u];
    }
    for (; i < packs; i += kDevThreads) d[i] = s[i];
    done = packs * 16;
  }
  for (uint64_t i = done + tid; i < n; i += kDevThreads) dst[i] = src[i];
}

template <typename Args>
__global__ void __launch_bounds__(kDevThreads) p2pKernel(Args a) {
  __shared__ int sFail;
  if (threadIdx.x == 0) sFail = 0;
  __syncthreads();
  const DevP2pBlock& blk = a.blocks[blockIdx.x];
  if (blk.isSend == kDevP2pCopy) {
    for (int s = blk.segBegin; s + 1 < blk.segEnd; s += 2) copyBytes(a.segs[s].buf, a.segs[s + 1].buf, a.segs[s].bytes);
    return;
  }
  const DevConn* conn = (blk.isSend ? a.sendConns : a.recvConns) + blk.channel * a.nranks + blk.peer;
  const int peer = blk.peer;
  using Prims = DevPrims<uint8_t, OpSum, Protocol::Simple, 1, 1>;
  Prims p(&conn, &peer, blk.isSend ? 1 : 0, &conn, &peer, blk.isSend ? 0 : 1, -1, OpSum(), a.ctx, blk.channel,
          &sFail);
  p.checkSizes();
  const uint64_t chunk = p.maxElems();
  for (int s = blk.segBegin; s < blk.segEnd; ++s) {
    uint8_t* buf = reinterpret_cast<uint8_t*>(a.segs[s].buf);
    const uint64_t len = a.segs[s].bytes & ~kDevP2pWritable;
    if (conn->box != nullptr && a.directMinBytes != 0) {
      const bool large = len >= a.directMinBytes;
      if (!blk.isSend) {
        const bool direct = large && (a.segs[s].bytes & kDevP2pWritable) != 0;
        p.recvDirect(conn->box, direct ? buf : nullptr, len);
        if (direct) continue;
      } else if (large) {
        if (uint8_t* dst = p.directBuffer(conn->box, len)) {
          p.sendDirect(buf, dst, len);
          continue;
        }
      }
    }
    uint64_t off = 0;
    do {
      const uint64_t n = len - off < chunk ? len - off : chunk;
      if (blk.isSend) {
        p.send(buf + off, n);
      } else {
        p.recv(buf + off, n);
      }
      off += n;
    } while (off < len);
  }
  p.finish();
}

template <typename Args>
Status launchAs(const Args& args, void* stream) {
  hipLaunchKernelGGL(p2pKernel<Args>, dim3(static_cast<unsigned>(args.nBlocks)), dim3(kDevThreads), 0,
                     static_cast<hipStream_t>(stream), args);
  hipError_t e = hipGetLastError();
  if (e != hipSuccess) {
    return Status(ncclUnhandledCudaError, strCat("launching the point-to-point kernel: ", hipGetErrorString(e)));
  }
  return okStatus();
}

}  // namespace

Status launchP2p(const DevP2pArgs& args, void* stream) {
  if (args.nBlocks <= 0) return okStatus();
  if (args.nBlocks > DevP2pArgsSmall::kMaxBlocks || args.nSegs > DevP2pArgsSmall::kMaxSegs) {
    return launchAs(args, stream);
  }
  DevP2pArgsSmall small;
  small.nBlocks = args.nBlocks;
  small.nSegs = args.nSegs;
  small.nranks = args.nranks;
  small.directMinBytes = args.directMinBytes;
  small.ctx = args.ctx;
  small.sendConns = args.sendConns;
  small.recvConns = args.recvConns;
  for (int b = 0; b < args.nBlocks; ++b) small.blocks[b] = args.blocks[b];
  for (int i = 0; i < args.nSegs; ++i) small.segs[i] = args.segs[i];
  return launchAs(small, stream);
}

}  // namespace braid::device
