// What a kernel is given: plain data shared by the host code that fills it
// and the kernels that read it (DESIGN.md §4: kernels get trivially
// copyable handles, never host objects).
#pragma once

#include <cstdint>

#include "platform/host_device.h"
#include "transports/transport.h"

namespace braid::device {

constexpr int kDevThreads = 512;     // threads of one block (one channel)
constexpr int kDevMaxPeers = 8;      // connectors of a one-shot (direct) primitives object
constexpr int kDevTreeChildren = 3;  // matches topology/trees.h kMaxTreeChildren
constexpr int kDevMaxChannels = 32;

// One channel's connectors on this rank's GPU (device memory, one per channel).
struct DevChannel {
  DevConn ringSend, ringRecv;
  DevConn treeUpSend, treeDownRecv;  // with the parent (unused at the root)
  DevConn treeUpRecv[kDevTreeChildren], treeDownSend[kDevTreeChildren];
  int32_t treeParent = -1;
  int32_t nTreeChildren = 0;
  int32_t treeChild[kDevTreeChildren] = {-1, -1, -1};
  int32_t ringPrev = -1, ringNext = -1;
  // The ring's order (the schedule's, not rank order): this rank's position,
  // the rank at each position and each rank's position (device arrays of
  // nranks entries).
  int32_t ringPos = 0;
  const int32_t* ringRankAt = nullptr;
  const int32_t* ringPosOf = nullptr;
};

// How a kernel ended, in host-mapped memory the host polls
// (ncclCommGetAsyncError) while kernels run. The first failing block
// claims it (kDevClaimed), records its wait, then publishes the code: the
// host reads the fields only after a final code, so it never reports a
// failure with fields not yet written.
struct DevStatus {
  int32_t code;     // kDevOk, kDevClaimed, kDevAborted, kDevTimedOut, kDevMismatch, kDevPeerEnded
  int32_t channel;  // the block (channel) that failed first
  int32_t peer;     // the rank it waited for
  // 0: data (tail or LL flags), 1: a free slot (head); zero-copy: 2 a peer
  // to enter, 3 a peer to finish; 4: a receiver to hand over its buffer
  // (direct writes; with kDevMismatch: its size differs from the send's);
  // 5: the next rank of a ring to post its output (ring direct mode; with
  // kDevMismatch: its part differs in size)
  int32_t waitingFor;
  uint64_t step;
};
// kDevMismatch: a zero-copy peer runs another collective, or passed its
// buffers at other offsets in its windows; waiting for 0 (data): a
// point-to-point step's size differs from the receive's (checkSizes).
// kDevPeerEnded: the process of the rank waited for ended (a rank of this
// host in another process; the host watches them, core/connectors.h).
constexpr int32_t kDevOk = 0, kDevAborted = 1, kDevTimedOut = 2, kDevMismatch = 3, kDevPeerEnded = 4,
                  kDevClaimed = -1;

// The bits of DevCtx::abort: ncclCommAbort (or a failed net connector)
// ends every wait; kDevSomePeerEnded sends a wait to DevCtx::ended.
constexpr int32_t kDevAbortRaised = 1, kDevSomePeerEnded = 2;

struct DevCtx {
  const volatile int32_t* abort = nullptr;  // host-mapped: kDevAbortRaised, kDevSomePeerEnded
  // Host-mapped, one byte per rank: nonzero once the rank's process ended
  // (null where no peer process is watched).
  const volatile uint8_t* ended = nullptr;
  DevStatus* status = nullptr;  // host-mapped
  uint64_t timeoutNs = 0;       // a wait making no progress this long fails
};

enum class DevAlgo : int32_t { Ring = 0, Tree = 1, Direct = 2, TwoShot = 3 };
enum class DevColl : int32_t { AllReduce = 0, AllGather = 1, ReduceScatter = 2, Broadcast = 3, Reduce = 4 };

// Ring direct mode (Ring, Simple; ranks of one host whose ring connectors
// carry a mailbox): on each channel the receiver posts its output buffer in
// the mailbox when the call starts, as the previous rank's GPU addresses it
// (recv + outView; null if that GPU may not write it), and steps that carry
// results (collectives/ring.h) go straight into the next rank's output
// instead of its FIFO. Both ends set kDevRingDirect alike (same sizes, one
// agreed threshold); kDevRingWritable is this rank's own: may the previous
// rank's GPU write its output?
constexpr int32_t kDevRingDirect = 1, kDevRingWritable = 2;

struct DevCollArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  // Elements per rank, as the API counts them; bytes for all-gather and
  // broadcast, which run on bytes whatever the datatype (launch.h).
  uint64_t count = 0;
  uint64_t chunkElems = 0;  // Simple: elements one step carries (0: a whole slot)
  uint64_t scalar = 0;      // PreMulSum's scalar, its bits
  const void* scalarPtr = nullptr;  // or, for ncclScalarDevice, where to read it when the kernel runs
  DevColl coll = DevColl::AllReduce;
  DevAlgo algo = DevAlgo::Ring;
  int32_t rank = 0, nranks = 1, root = 0;
  int32_t nChannels = 1;
  int32_t avgDivisor = 0;                // > 0: divide the result by it (ncclAvg)
  int32_t ringDirect = 0;                // kDevRingDirect* bits (Ring, Simple)
  int64_t outView = 0;  // ring direct mode: recv as the previous rank addresses it, minus recv
  const DevChannel* channels = nullptr;  // device memory, nChannels entries
  const DevConn* peerSend = nullptr;     // direct: device memory, [channel * nranks + peer]
  const DevConn* peerRecv = nullptr;
  DevCtx ctx;
};

// Zero-copy collectives on symmetric windows (collectives/symmetric.h):
// every rank's buffers are mapped here, and ranks meet through barrier
// slots in each rank's GPU memory, written by the peers (NVLink stores),
// polled locally.
constexpr int kDevMaxSymRanks = 8;
struct DevSymSlot {
  uint64_t arrive;  // the sender's call number on this channel: it entered
  uint64_t done;    // ... and finished
  uint64_t key;     // what the sender passed (windows and offsets), to check
  uint64_t scalar;  // the sender's PreMulSum scalar (its bits), which scales its input
};
// One rank's barrier memory: slots[channel][sender], then its own call
// counters per channel (never read by peers; kept on the GPU so that graph
// replays count on).
struct DevSymSync {
  DevSymSlot slots[kDevMaxChannels][kDevMaxSymRanks];
  uint64_t calls[kDevMaxChannels];
};
struct DevSymArgs {
  DevColl coll = DevColl::AllReduce;
  int32_t rank = 0, nranks = 1, nChannels = 1;
  int32_t avgDivisor = 0;
  uint64_t scalar = 0;              // PreMulSum: this rank's scalar, its bits
  const void* scalarPtr = nullptr;  // or where to read it when the kernel runs (ncclScalarDevice)
  // Elements (all-gather: bytes) of one rank's buffer; all-gather and
  // reduce-scatter: of one rank's block, blocks `count` apart.
  uint64_t count = 0;
  uint64_t key = 0;                          // this rank's windows and offsets; every rank's must match
  const void* inputs[kDevMaxSymRanks] = {};  // every rank's send buffer, mapped here
  void* outputs[kDevMaxSymRanks] = {};       // every rank's receive buffer
  DevSymSync* sync[kDevMaxSymRanks] = {};    // every rank's barrier memory, mapped here
  DevCtx ctx;
};

// Collectives of one group that run on the same kernel (launch.h,
// launchCollectives, fusable) share a launch: block c runs channel c of
// each in call order, so connectors see the same sequence as with one
// launch per collective. A launch of one runs the single-collective kernel
// with items[0].
constexpr int kDevMaxFused = 8;
struct DevCollLaunch {
  DevCollArgs items[kDevMaxFused];
  int32_t n = 0;

  // Blocks of the launch: the most channels any of its collectives uses.
  int blocks() const {
    int b = 0;
    for (int i = 0; i < n; ++i) b = items[i].nChannels > b ? items[i].nChannels : b;
    return b;
  }
};
static_assert(sizeof(DevCollLaunch) < 2048, "a fused launch's parameters stay well under 4 KB (HIP's limit)");

// A point-to-point group in one launch. Block b serves one connector
// (peer, direction, peer channel) and moves its segments in order: the
// parts of the group's messages to or from that peer that map to that
// channel. Both ranks cut their matching messages the same way, so their
// blocks move matching segments in matching order. A copy block (isSend ==
// kDevP2pCopy) moves a part of the rank's sends to itself: its segments come
// in pairs, from and to, of equal size.
//
// Direct writes: on a connector with a mailbox (DevConn::box), a segment of
// at least directMinBytes is handed over whole: the receiver posts its
// buffer (or null, which keeps the segment on the FIFO), the sender writes
// it straight there and publishes tail once. Both ends of matching sizes
// take the same path; the receiver posts its size with every segment
// (small ones with null), so the sender of a large one sees a receive of
// another size, and the receiver's step-word check sees a small send
// arrive where it posted a buffer.
struct DevP2pSeg {
  char* buf = nullptr;
  uint64_t bytes = 0;  // receives: kDevP2pWritable set if the peer's GPU may write buf
};
constexpr uint64_t kDevP2pWritable = 1ull << 63;
struct DevP2pBlock {
  int32_t peer = 0;
  int32_t isSend = 0;
  int32_t channel = 0;
  int16_t segBegin = 0, segEnd = 0;
};
constexpr int32_t kDevP2pCopy = 2;
constexpr int kDevMaxP2pBlocks = 64;
constexpr int kDevMaxP2pSegs = 128;

template <int MaxBlocks, int MaxSegs>
struct DevP2pArgsOf {
  static constexpr int kMaxBlocks = MaxBlocks, kMaxSegs = MaxSegs;
  int32_t nBlocks = 0;
  int32_t nSegs = 0;
  int32_t nranks = 1;
  uint64_t directMinBytes = 0;  // segments this large use direct writes where they can (0: never)
  DevCtx ctx;
  const DevConn* sendConns = nullptr;  // device memory: [channel * nranks + peer]
  const DevConn* recvConns = nullptr;
  DevP2pBlock blocks[MaxBlocks];
  DevP2pSeg segs[MaxSegs];
};
// What the host fills; a group that fits the small form is launched with it
// (kernel parameters are copied at every launch).
using DevP2pArgs = DevP2pArgsOf<kDevMaxP2pBlocks, kDevMaxP2pSegs>;
using DevP2pArgsSmall = DevP2pArgsOf<8, 16>;
static_assert(sizeof(DevP2pArgs) < 4000, "kernel parameters stay under 4 KB (HIP's limit)");

// Channel c's part of `count` elements: contiguous, 64-byte aligned (the
// host engine cuts buffers the same way).
BRAID_HOST_DEVICE inline void channelPart(uint64_t count, uint64_t elemSize, int nch, int c, uint64_t* lo,
                                          uint64_t* len) {
  uint64_t align = 64 / elemSize;
  if (align == 0) align = 1;
  uint64_t per = (count + static_cast<uint64_t>(nch) - 1) / static_cast<uint64_t>(nch);
  per = (per + align - 1) / align * align;
  uint64_t l = per * static_cast<uint64_t>(c);
  *lo = l < count ? l : count;
  uint64_t end = *lo + per < count ? *lo + per : count;
  *len = end - *lo;
}

}  // namespace braid::device
