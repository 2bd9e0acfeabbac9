// The socket Net: TCP between hosts (transports/net/net.h has the contract).
//
// A connection is NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD TCP streams
// (at least one). Every message starts with a 16-byte frame (magic, tag,
// length) on stream 0; its payload is cut into contiguous parts of at least
// 64 KiB, part i on stream i, so large messages use every stream at once.
// With NCCL_SOCKET_NTHREADS=0 the caller of test() (the proxy) moves the
// bytes itself; otherwise each helper thread of the connection serves its
// NCCL_NSOCKS_PERTHREAD streams.
//
// Each device (a network interface chosen by NCCL_SOCKET_IFNAME) has one
// listening socket per process. A connecting rank introduces every stream
// with a hello carrying the listen's id and a random secret; a connection
// that sends anything else, or nothing for 5 s, is a stray and is dropped
// with a warning. Streams use TCP keepalive and TCP_USER_TIMEOUT
// (BRAID_NET_LINK_TIMEOUT), so a downed link or dead host becomes an error
// naming the peer's address instead of a hang.
#pragma once

#include "transports/net/net.h"

namespace braid {

// The process's socket Net (created on first use, never destroyed).
Status socketNet(Net** out);

// TCP keepalive and TCP_USER_TIMEOUT from BRAID_NET_LINK_TIMEOUT on `fd`:
// what the socket Net's streams use, and the verbs Net's liveness stream.
void tuneNetLinkSocket(int fd);

}  // namespace braid
