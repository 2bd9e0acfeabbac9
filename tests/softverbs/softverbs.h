// A software RDMA device for tests: libbraid_softverbs.so implements the
// verbs entry points Braid uses (braid::VerbsApi) over plain TCP, so the
// verbs transport runs, across processes and network namespaces, on machines
// without an RDMA NIC or the rdma_rxe kernel module.
//
// What it is: one device, "softroce0", with one Ethernet (RoCE) port bound to
// a network interface (BRAID_SOFTVERBS_IFNAME, else the first UP non-loopback
// interface with an IPv4 address, else lo). Its GID table looks like a real
// RoCE NIC's: 0 link-local "IB/RoCE v1", 1 link-local "RoCE v2", 2 and 3 the
// interface's IPv4 address as ::ffff:a.b.c.d, v1 and v2.
//
// What it simulates, for real (no mocks): protection domains and memory
// regions with random keys and access checks (local and remote, range, PD);
// completion queues (an overrun puts the CQ in error: pollCq returns -1 from
// then on, like IBV_EVENT_CQ_ERR); reliable-connected QPs with the verbs
// state machine (RESET, INIT, RTR, RTS, ERR) and NCCL's attribute masks;
// RDMA WRITE, RDMA WRITE WITH IMM, RDMA READ, SEND and SEND WITH IMM,
// inline data and several SGEs, IBV_SEND_SIGNALED and sq_sig_all; RNR with
// infinite retry (a message that needs a receive waits until one is posted,
// in order); ACKs and NAKs (a bad rkey completes IBV_WC_REM_ACCESS_ERR at the requester, which
// goes to ERR and flushes the rest); a peer that vanishes (EOF, reset, or
// silence for the QP's timeout: 4.096 us * 2^timeout * (retry_cnt + 1),
// clamped to [2 s, 10 s]) puts the QP in ERR, transmitted sends completing
// IBV_WC_RETRY_EXC_ERR and the rest IBV_WC_WR_FLUSH_ERR. Destroying a QP
// closes its connections, so the peer's QP goes to ERR too.
//
// The wire: each open context runs one progress thread listening on an
// ephemeral TCP port P of the interface's IPv4 address; QP numbers are
// (P << 8) | n, so a GID (::ffff:a.b.c.d) and a QP number reach a QP. At
// INIT->RTR a QP connects to its peer's device and says hello {magic, its
// QPN, the peer's QPN}; requests go on that connection, responses come back.
//
// What it does not do: UD/UC/XRC QPs, SRQs, atomics, memory windows,
// dma-buf registration, completion channels and events, address
// handles, real NIC timing or bandwidth, IPv6-only or link-local destination
// GIDs (the destination must be IPv4-mapped). A process that forks after
// opening a device is not supported (open devices after fork). Closing a
// context destroys its connections but does not free QPs the user leaked.
//
// Environment:
//   BRAID_SOFTVERBS_IFNAME=name       the interface the device is bound to
//   BRAID_SOFTVERBS_DEBUG=1           log to stderr, prefixed "softverbs:"
//   BRAID_SOFTVERBS_FAIL_AFTER=N      after this process's devices have sent N
//                                     RDMA writes, the link "fails": the next
//                                     write and every sent-but-unacknowledged
//                                     one complete IBV_WC_RETRY_EXC_ERR, every
//                                     QP in RTR/RTS (now or later) goes to ERR
//                                     and drops its connections, so the peers'
//                                     QPs go to ERR too
//   BRAID_SOFTVERBS_BAD_RKEY_AFTER=N  the Nth RDMA write this process sends
//                                     carries a corrupted rkey (the responder
//                                     NAKs: IBV_WC_REM_ACCESS_ERR)
// The knobs are read once, when the process first opens a device (the
// counters are per process, over all its devices).
//
// Use: link the library and call
// braid::setVerbsApiForTesting(braid_verbs_table()), or set
// BRAID_IB_VERBS_TABLE=/path/to/libbraid_softverbs.so in a process's
// environment. Verbs calls may come from any thread.
#pragma once

#include "transports/net/ibverbs/verbs_api.h"

extern "C" {
// The device's entry points, origin "software verbs device".
__attribute__((visibility("default"))) const braid::VerbsApi* braid_verbs_table();
}

namespace braid {
namespace softverbs {

// RDMA writes (with or without immediate) this process's devices have sent.
__attribute__((visibility("default"))) uint64_t rdmaWritesSent();

// Re-reads the fault knobs from the environment and resets the write count
// and the "link failed" state (tests that set the knobs with setenv).
__attribute__((visibility("default"))) void resetFaultsForTesting();

}  // namespace softverbs
}  // namespace braid
