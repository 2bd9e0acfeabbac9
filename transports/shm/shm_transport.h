// The shared-memory transport: connectors between ranks of one host.
//
// The receiving end creates the segment the sender writes into
// (shm_segment.h), tells the sender how to open it over the bootstrap, and
// withdraws that once the sender confirms it mapped it. Setting up a
// connector takes the three steps below on the two ranks, in this order
// across all the connectors being set up together; step 1 never waits, so
// any set of connectors can be set up at once without deadlock:
//   1. receiver: shmPostRecv     (create, send the name)
//   2. sender:   shmOpenSend     (receive the name, map, confirm)
//   3. receiver: shmFinishRecv   (wait for the confirmation, withdraw)
// Called by one thread per rank.
#pragma once

#include <cstdint>

#include "bootstrap/bootstrap.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

namespace braid {

struct ShmEnd : ConnectorEnd {
  ShmSegment segment;
};

// `tag` tells apart connectors between the same two ranks (ring channels,
// point-to-point); both ends pass the same one. `peerInProcess`: the peer is
// a thread of this process, so plain memory serves. `peerSeesOurPid`: the
// peer runs in this process's PID namespace, so it can open the segment
// through /proc (ShmShare::Descriptor) unless BRAID_SHM_NAMED is set.
Status shmPostRecv(bootstrap::Bootstrap* bs, int peer, uint32_t tag, size_t slotBytes, bool peerInProcess,
                   bool peerSeesOurPid, ShmEnd* out);
Status shmOpenSend(bootstrap::Bootstrap* bs, int peer, uint32_t tag, size_t slotBytes, ShmEnd* out);
Status shmFinishRecv(bootstrap::Bootstrap* bs, int peer, uint32_t tag, ShmEnd* io);

// The tag of point-to-point connectors.
constexpr uint32_t kShmP2pTag = 0x53500000u;

}  // namespace braid
