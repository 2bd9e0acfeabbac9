// The verbs Net: RC queue pairs over InfiniBand or RoCE, through the
// VerbsApi table (transports/net/net.h has the contract).
//
// Devices: every ACTIVE port the table reports that NCCL_IB_HCA keeps; each
// has its own context and protection domain, and the GID chosen by
// selectGid (gid.h), logged at INFO.
//
// Connection setup runs over TCP: listen() opens (once per process) a TCP
// listener on the first NCCL_SOCKET_IFNAME interface, as the socket Net
// does, and the handle carries its address, a listen id and a random secret.
// connect() and accept() are non-blocking state machines: the sender
// connects and sends a hello with its queue pairs (qp_num, psn), GID, LID,
// MTU and the address/rkey of its clear-to-send FIFO; the receiver checks
// the magic, id and secret (anything else, or silence for 5 s, is a stray,
// dropped with a warning), brings its queue pairs to RTS, posts its
// receives and answers with its own; the sender brings its queue pairs to
// RTS and acknowledges, and only then may either side write. The TCP stream
// stays open (keepalive, NET_LINK_TIMEOUT) as the liveness channel: a peer
// whose process dies or whose link drops becomes an error naming it.
//
// Data path (as NCCL's): irecv RDMA-writes a FIFO entry {buffer address,
// rkey, size, sequence} into the sender's FIFO, with immediate (so the
// sender learns of it from a completion, never by reading memory the NIC
// may still be writing); isend waits (test() makes progress) for the entry
// with its sequence, then RDMA-writes the payload
// (split over the NCCL_IB_QPS_PER_CONNECTION queue pairs; parts on queue
// pairs other than the first are writes with immediate), then on the first
// queue pair a record {size, tag, sequence} into the receiver's record slot
// as a write with immediate. RC ordering on that queue pair makes the
// record and part 0 visible when its completion arrives; the receiver
// counts the other parts' immediates. A message longer than the posted
// buffer is not written: the sender fails and the record tells the
// receiver, which fails too. closeSend writes a close mark (immediate with
// the close bit), so the receiver's pending and later receives complete with
// kNetClosedTag.
//
// Memory: regMr/deregMr register explicitly (refcounted per range). isend
// and irecv with a null mhandle use the comm's registration cache: ranges
// are registered page-aligned on first use and kept until the comm closes
// (at most kMrCacheEntries entries per comm; unused ones are evicted first).
#pragma once

#include <memory>

#include "transports/net/net.h"

namespace braid {

// The process's verbs Net (created on first success, never destroyed); an
// error says why no device can be used.
Status ibNet(Net** out);

// A new verbs Net of its own, owned by the caller (tests: another
// NCCL_IB_QPS_PER_CONNECTION, or a forked child that must open its devices
// itself). Reads the NCCL_IB_* settings now.
Status newIbNet(std::unique_ptr<Net>* out);

}  // namespace braid
