// The peer-to-peer transport: device connectors between GPUs of one host
// (DESIGN.md §4, transports/transport.h's DevConn).
//
// Each end allocates its own block on its own GPU (the receiver: tail and
// the slots; the sender: head), zeroes it and hands the peer a way to reach
// it: a thread of this process gets the pointer (peer access enabled), another
// process an IPC handle it opens. Where the peer's GPU cannot reach this GPU
// (no peer access), or either rank set NCCL_P2P_DISABLE, the block goes to
// host memory both GPUs map: pinned memory for a thread of this process, a
// memory file (platform/shared_memory.h) that another process maps through
// /proc and pins for its GPU. Each end decides for its own block from the
// peer's point of view and says what it chose in its handle, so both ends
// always agree on where the memory is. Kernels fence to system scope before
// publishing a step, so the same code runs over either memory.
//
// Write mode (the default) keeps the Simple slots in the receiver's block:
// the sender's stores cross the link, the receiver loads locally. Read mode
// moves them to the sender's block: the sender stores locally and the
// receiver loads across the link (NCCL's P2P read, its default between
// sm_80 GPUs over NVLink). LL and LL128 slots stay with the receiver, which
// polls their flags. Both ends of a connector pass the same mode and say it
// in their handles.
//
// Connecting is collective between the two ranks of each connector: both
// pass matching requests (same tag, `send` reversed). Every rank posts all
// its handles before it waits for any, so any set of requests connects
// without deadlock.
#pragma once

#include <cstdint>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "transports/transport.h"

namespace braid {

class P2pEnd {
 public:
  P2pEnd() = default;
  ~P2pEnd();
  P2pEnd(const P2pEnd&) = delete;
  P2pEnd& operator=(const P2pEnd&) = delete;

  DevConn conn;  // valid once connected

 private:
  friend Status p2pConnect(bootstrap::Bootstrap*, int, void*, size_t, const std::vector<struct P2pRequest>&);
  // This end's block: GPU memory, or host memory (`shared`: another process
  // maps it).
  Status allocate(size_t bytes, bool onHost, bool shared, void* setupStream);
  // Maps and pins another process's host block; `out`: the GPU's view.
  Status mapPeerShared(int pid, int fd, size_t bytes, char** out);

  char* local_ = nullptr;     // this end's block, as this process addresses it
  char* localDev_ = nullptr;  // the same, as the GPU addresses it
  size_t localBytes_ = 0;
  bool localOnHost_ = false;
  int localFd_ = -1;            // a host block shared with another process: its memory file
  bool localPinned_ = false;    // ... registered with the GPU runtime
  void* opened_ = nullptr;      // the peer's block, opened from an IPC handle
  char* peerShared_ = nullptr;  // the peer's host block, mapped from its memory file
  size_t peerSharedBytes_ = 0;
  bool peerPinned_ = false;
};

struct P2pRequest {
  int peer;
  bool send;           // this end sends to `peer`
  uint32_t tag;        // tells apart connectors between the same ranks; multiple of 2
  bool peerInProcess;  // the peer is a thread of this process
  int peerDevice;      // the peer's GPU in this process's numbering, -1 if not visible
  P2pEnd* end;
  bool ll128 = false;  // the receiver's block carries LL128 slots (both ends pass the same)
  bool throughHost = false;  // this end's block in host memory (peer-to-peer off: NCCL_P2P_DISABLE or _LEVEL)
  bool read = false;         // read mode: the Simple slots in the sender's block (both ends pass the same)
};

// `device`: this rank's GPU. `setupStream`: a non-blocking stream of that GPU
// that is never captured; the blocks are zeroed on it and p2pConnect waits
// for it alone, so connecting works while another stream is being captured
// into a graph. `slotBytes`: Simple payload per step.
Status p2pConnect(bootstrap::Bootstrap* bs, int device, void* setupStream, size_t slotBytes,
                  const std::vector<P2pRequest>& reqs);

// Lets `device` reach `peer`'s memory directly (idempotent); false where the
// hardware cannot.
bool p2pEnablePeerAccess(int device, int peer);

}  // namespace braid
