// The host backend's collectives, typed: the primitives, algorithm and
// channel threads of one collective on one datatype. Each datatype's
// instantiation is compiled in its own generated source
// (host_coll_<type>.cc, src/CMakeLists.txt), so the twelve compile in
// parallel; enqueue.cc selects and dispatches.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/comm.h"
#include "core/enqueue.h"
#include "core/redops.h"
#include "exec/datatypes.h"
#include "tuning/tuning.h"

namespace braid {

// What every channel of one collective shares.
struct HostPlan {
  TuneChoice choice;
  uint64_t seq = 0;
  ScalarBits scalar;                // a PreMulSum operator's scalar, read once when the collective starts
  std::atomic<bool> cancel{false};  // raised by the first channel that fails
  size_t ringChunkBytes = 0;        // Simple: bytes of one ring step (BRAID_CHUNK_SIZE, or the default)
  size_t streamBytes = 0;           // outputs of at least this many bytes use streaming stores (0: never)
  // Zero-copy: the windows holding this rank's buffers, and the offsets.
  uint64_t sendWindow = 0, sendOffset = 0, recvWindow = 0, recvOffset = 0;

  // Whether an output of `bytes` is written with streaming stores.
  bool streams(size_t bytes) const { return streamBytes > 0 && bytes >= streamBytes; }
};

// Cache-line alignment of the channels' parts of a buffer.
constexpr size_t kChannelAlignBytes = 64;

// Runs `a` with elements of type T over the plan's algorithm and channels;
// returns when the result is in place (ncclAvg divided). All-gather and
// broadcast run on bytes (T = uint8_t, count in bytes). Instantiated only
// by the generated sources, which see its definition.
template <typename T>
Status runHostCollective(Communicator* comm, const CollArgs& a, HostPlan& plan);

}  // namespace braid
