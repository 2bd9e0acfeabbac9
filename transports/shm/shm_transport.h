// The shared-memory transport: connectors between ranks of one host.
//
// Each rank creates the segment it receives into, tells the sending peer its
// name over the bootstrap, maps the peer's segment for sending, and unlinks
// its own name once the peer confirms it mapped it. Called by all ranks of a
// communicator together (it exchanges bootstrap messages), from one thread
// per rank.
#pragma once

#include "bootstrap/bootstrap.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

namespace braid {

struct ShmLink {
  ShmSegment recvSegment;  // ours: the previous rank writes here
  ShmSegment sendSegment;  // the next rank's: we write there
  Connector recv;
  Connector send;
};

// Connects channel `channel` of the ring rank -> rank+1 (mod nranks).
Status shmConnectRing(bootstrap::Bootstrap* bootstrap, int channel, size_t slotBytes, ShmLink* out);

}  // namespace braid
