// TCP sockets for the bootstrap (and later the socket transport).
//
// Every blocking operation takes a Deadline and an optional abort flag and
// waits in poll() slices of at most 100 ms, so nothing blocks past its
// deadline and ncclCommAbort releases any waiter within a fraction of a
// second. A peer that closes its end turns into ncclRemoteError; a deadline
// into ncclSystemError; the abort flag into ncclInvalidUsage ("aborted").
// A Socket is owned by one thread at a time.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace braid {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadlineIn(double seconds) {
  // Capped at about 30 years: a deadline past the clock's range would wrap
  // into the past (every wait then ends at once) or overflow.
  seconds = std::min(seconds, 1e9);
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// An IPv4 or IPv6 address with a port.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return length == 0 ? AF_UNSPEC : storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  std::string toString() const;  // "10.0.0.1:5000" or "[fe80::1]:5000"

  // "host:port", "[v6]:port" or "v4addr:port" (numeric or resolvable names).
  static Status parse(const std::string& text, SocketAddress* out);
  static SocketAddress fromSockaddr(const sockaddr* sa, socklen_t len);
};
bool sameHostAddress(const SocketAddress& a, const SocketAddress& b);

struct NetInterface {
  std::string name;
  SocketAddress address;  // port 0
};

// NCCL_COMM_ID ("host:port" of a fixed bootstrap root), or "".
std::string commIdSetting();

// Interfaces Braid may use, up and with a carrier, chosen by
// NCCL_SOCKET_IFNAME (prefix list; '^' excludes, '=' matches exactly) and
// NCCL_SOCKET_FAMILY (AF_INET or AF_INET6). Without NCCL_SOCKET_IFNAME, as
// NCCL: ib*, else the interface on NCCL_COMM_ID's subnet, else any but
// docker*, virbr* and loopback, then docker*, then loopback. IPv6
// link-local addresses are not used. An empty result is an error that says
// what was looked for.
Status findInterfaces(std::vector<NetInterface>* out);
// The interface whose subnet holds `remote` (or, failing that, the first
// usable one): how a rank picks where to listen when it knows the root.
Status findInterfaceFor(const SocketAddress& remote, NetInterface* out);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool isOpen() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();

  // A listening socket bound to `address` (port 0 picks a free port).
  static Status listen(const SocketAddress& address, Socket* out);
  // Connects, retrying refused or unreachable attempts until the deadline.
  // Ends sooner, with ncclRemoteError, when `gone` is raised (the process
  // listening there ended) or, with refusedLimitSec > 0, once every attempt
  // for that long was refused (nothing listens there any more).
  static Status connect(const SocketAddress& address, Deadline deadline, const std::atomic<bool>* abort,
                        Socket* out, const std::atomic<bool>* gone = nullptr, double refusedLimitSec = 0);
  // Accepts one connection (the listener is non-blocking).
  Status accept(Deadline deadline, const std::atomic<bool>* abort, Socket* out,
                SocketAddress* peer = nullptr) const;
  // Accepts one connection if one is waiting; *out stays closed otherwise.
  Status tryAccept(Socket* out, SocketAddress* peer = nullptr) const;

  Status sendAll(const void* data, size_t size, Deadline deadline, const std::atomic<bool>* abort) const;
  Status recvAll(void* data, size_t size, Deadline deadline, const std::atomic<bool>* abort) const;
  // Reads what is available without blocking: returns the byte count in
  // *got (0 if nothing yet); a closed peer is ncclRemoteError.
  Status recvSome(void* data, size_t size, size_t* got) const;

  Status localAddress(SocketAddress* out) const;

 private:
  // Waits for `events` on the socket; ok when ready.
  Status waitFor(short events, Deadline deadline, const std::atomic<bool>* abort, const char* what) const;
  int fd_ = -1;
};

}  // namespace braid
