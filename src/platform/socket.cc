#include "platform/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"

namespace braid {
namespace {

StringParam paramSocketIfname("SOCKET_IFNAME", "",
                              "Network interfaces for bootstrap and sockets: comma list of name "
                              "prefixes; '^' in front excludes them, '=' in front matches exact names "
                              "(default, as NCCL: ib*, else the interface on NCCL_COMM_ID's subnet, else "
                              "any but docker*, virbr* and lo, then docker*, then lo; a value of one "
                              "character counts as unset)");
StringParam paramCommId("COMM_ID", "",
                        "host:port of the bootstrap root; every process may then create the unique id "
                        "itself and rank 0's init hosts the root (the job secret is derived from this "
                        "value, so only use it on a trusted network)");
StringParam paramSocketFamily("SOCKET_FAMILY", "", "Address family to use: AF_INET or AF_INET6 (default: either)",
                              {"", "AF_INET", "AF_INET6"});

constexpr int kPollSliceMs = 100;

Status abortedError(const char* what) { return invalidUsage(what, " was aborted (ncclCommAbort, ncclCommRevoke or ncclCommShrink with NCCL_SHRINK_ABORT)"); }

int remainingMs(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, kPollSliceMs));
}

Status setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errnoError("fcntl(O_NONBLOCK)", errno);
  return okStatus();
}

void tuneStream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A parsed NCCL_SOCKET_IFNAME.
struct IfFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  bool matches(const std::string& name) const {
    bool hit = false;
    for (const std::string& n : names) {
      if (exact ? name == n : name.compare(0, n.size(), n) == 0) hit = true;
    }
    return exclude ? !hit : hit;
  }
};

IfFilter parseIfFilter(std::string text) {
  IfFilter f;
  if (!text.empty() && text[0] == '^') {
    f.exclude = true;
    text.erase(0, 1);
  }
  if (!text.empty() && text[0] == '=') {
    f.exact = true;
    text.erase(0, 1);
  }
  for (const std::string& part : splitString(text, ',')) {
    std::string t = trim(part);
    if (!t.empty()) f.names.push_back(t);
  }
  return f;
}

// Up and physically attached (a carrier), as NCCL requires: an unplugged
// port listed first must not be chosen over the cabled one.
bool usable(const ifaddrs* it) {
  return it->ifa_addr != nullptr && (it->ifa_flags & IFF_UP) && (it->ifa_flags & IFF_RUNNING);
}

Status listInterfaces(const IfFilter& filter, int family, bool allowLoopback, std::vector<NetInterface>* out) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoError("getifaddrs", errno);
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (!usable(it)) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (family != AF_UNSPEC && fam != family) continue;
    bool loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    if (loopback && !allowLoopback) continue;
    std::string name = it->ifa_name;
    if (!filter.matches(name)) continue;
    if (fam == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) continue;  // needs a scope id; skip
    }
    bool dup = false;
    for (const NetInterface& have : *out) dup |= have.name == name;
    if (dup) continue;  // one device per interface, its first address, as NCCL's
    NetInterface ni;
    ni.name = name;
    ni.address = SocketAddress::fromSockaddr(it->ifa_addr,
                                             fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    out->push_back(ni);
  }
  freeifaddrs(list);
  return okStatus();
}

int wantedFamily() {
  std::string f = paramSocketFamily.get();
  if (f == "AF_INET") return AF_INET;
  if (f == "AF_INET6") return AF_INET6;
  return AF_UNSPEC;
}

// Whether `addr` (with `mask`) is on the subnet of `remote`.
bool onSubnet(const sockaddr* addr, const sockaddr* mask, const SocketAddress& remote) {
  if (remote.family() == AF_INET) {
    const uint32_t m = reinterpret_cast<const sockaddr_in*>(mask)->sin_addr.s_addr;
    const uint32_t mine = reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr;
    const uint32_t theirs = reinterpret_cast<const sockaddr_in*>(&remote.storage)->sin_addr.s_addr;
    return (mine & m) == (theirs & m);
  }
  const uint8_t* m = reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr;
  const uint8_t* mine = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr.s6_addr;
  const uint8_t* theirs = reinterpret_cast<const sockaddr_in6*>(&remote.storage)->sin6_addr.s6_addr;
  for (int i = 0; i < 16; ++i) {
    if ((mine[i] & m[i]) != (theirs[i] & m[i])) return false;
  }
  return true;
}

// The usable interface address on `remote`'s subnet, of an interface named
// in `among` (any when null), in NCCL_SOCKET_FAMILY.
bool findOnSubnet(const SocketAddress& remote, const std::vector<NetInterface>* among, NetInterface* out) {
  const int family = wantedFamily();
  if (family != AF_UNSPEC && remote.family() != family) return false;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* it = list; it != nullptr && !found; it = it->ifa_next) {
    if (!usable(it) || it->ifa_netmask == nullptr || it->ifa_addr->sa_family != remote.family()) continue;
    if (among != nullptr &&
        std::none_of(among->begin(), among->end(), [&](const NetInterface& ni) { return ni.name == it->ifa_name; })) {
      continue;
    }
    if (remote.family() == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr)) {
      continue;  // peers could not reach it without a scope of their own
    }
    if (!onSubnet(it->ifa_addr, it->ifa_netmask, remote)) continue;
    out->name = it->ifa_name;
    out->address = SocketAddress::fromSockaddr(
        it->ifa_addr, remote.family() == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    out->address.setPort(0);
    found = true;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

// ---------------------------------------------------------------- addresses

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SocketAddress::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
    return strCat(host, ":", port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof(host));
    return strCat("[", host, "]:", port());
  }
  return "<no address>";
}

SocketAddress SocketAddress::fromSockaddr(const sockaddr* sa, socklen_t len) {
  SocketAddress a;
  len = std::min<socklen_t>(len, sizeof(a.storage));
  std::memcpy(&a.storage, sa, len);
  a.length = len;
  return a;
}

Status SocketAddress::parse(const std::string& text, SocketAddress* out) {
  std::string host, port;
  std::string t = trim(text);
  if (!t.empty() && t[0] == '[') {
    size_t close = t.find(']');
    if (close == std::string::npos || close + 1 >= t.size() || t[close + 1] != ':') {
      return invalidArgument("address '", text, "' is not of the form [ipv6]:port");
    }
    host = t.substr(1, close - 1);
    port = t.substr(close + 2);
  } else {
    size_t colon = t.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return invalidArgument("address '", text, "' is not of the form host:port");
    }
    host = t.substr(0, colon);
    port = t.substr(colon + 1);
  }
  int64_t portValue = 0;
  if (!parseInt(port, &portValue).ok() || portValue < 1 || portValue > 65535) {
    return invalidArgument("address '", text, "' has no valid port (1..65535)");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return invalidArgument("cannot resolve host '", host, "' in '", text, "': ", gai_strerror(rc));
  }
  *out = fromSockaddr(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  out->setPort(static_cast<uint16_t>(portValue));
  return okStatus();
}

bool sameHostAddress(const SocketAddress& a, const SocketAddress& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b.storage)->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b.storage)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

// ---------------------------------------------------------------- interfaces

std::string commIdSetting() { return paramCommId.get(); }

Status findInterfaces(std::vector<NetInterface>* out) {
  out->clear();
  std::string spec = paramSocketIfname.get();
  if (trim(spec).size() <= 1) spec.clear();  // "^" or "=" alone: unset, as NCCL
  int family = wantedFamily();
  if (!spec.empty()) {
    IfFilter filter = parseIfFilter(spec);
    BRAID_CHECK(listInterfaces(filter, family, /*allowLoopback=*/true, out));
  } else {
    // NCCL's order: IPoIB; the interface on NCCL_COMM_ID's subnet (the
    // network the job named); any but containers' and VMs' bridges and
    // loopback; containers' bridges; loopback.
    BRAID_CHECK(listInterfaces(parseIfFilter("ib"), family, false, out));
    SocketAddress root;
    NetInterface near;
    const std::string commId = paramCommId.get();
    if (out->empty() && !commId.empty() && SocketAddress::parse(commId, &root).ok() &&
        findOnSubnet(root, nullptr, &near)) {
      out->push_back(near);
    }
    if (out->empty()) BRAID_CHECK(listInterfaces(parseIfFilter("^docker,virbr"), family, false, out));
    if (out->empty()) BRAID_CHECK(listInterfaces(parseIfFilter("docker"), family, false, out));
    if (out->empty()) BRAID_CHECK(listInterfaces(parseIfFilter("lo"), family, true, out));
  }
  if (out->empty()) {
    return systemError("no usable network interface found (NCCL_SOCKET_IFNAME='", spec,
                       "', NCCL_SOCKET_FAMILY='", paramSocketFamily.get(),
                       "'); an interface must be up with a carrier (RUNNING in `ip link`) and have an "
                       "address that is not IPv6 link-local; check `ip addr` and set NCCL_SOCKET_IFNAME");
  }
  return okStatus();
}

Status findInterfaceFor(const SocketAddress& remote, NetInterface* out) {
  std::vector<NetInterface> all;
  BRAID_CHECK(findInterfaces(&all));
  // Prefer the interface on the same subnet as the remote address.
  if (findOnSubnet(remote, &all, out)) return okStatus();
  for (const NetInterface& ni : all) {
    if (ni.address.family() == remote.family()) {
      *out = ni;
      return okStatus();
    }
  }
  *out = all.front();
  return okStatus();
}

// ---------------------------------------------------------------- Socket

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Socket::waitFor(short events, Deadline deadline, const std::atomic<bool>* abort, const char* what) const {
  while (true) {
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) return abortedError(what);
    int ms = remainingMs(deadline);
    if (ms == 0) return systemError(what, ": timed out");
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return okStatus();
    if (rc < 0 && errno != EINTR) return errnoError(strCat(what, ": poll"), errno);
  }
}

Status Socket::listen(const SocketAddress& address, Socket* out) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError("socket", errno);
  Socket s(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
    return errnoError(strCat("bind ", address.toString()), errno);
  }
  if (::listen(fd, 16384) != 0) return errnoError("listen", errno);
  BRAID_CHECK(setNonBlocking(fd));
  *out = std::move(s);
  return okStatus();
}

Status Socket::connect(const SocketAddress& address, Deadline deadline, const std::atomic<bool>* abort,
                       Socket* out, const std::atomic<bool>* gone, double refusedLimitSec) {
  int lastErr = 0;
  int delayMs = 1;
  Deadline refusedSince{};  // the first of the refusals in a row
  while (true) {
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) return abortedError("connect");
    if (gone != nullptr && gone->load(std::memory_order_acquire)) {
      return remoteError("connecting to ", address.toString(), ": the process there ended");
    }
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errnoError("socket", errno);
    Socket s(fd);
    BRAID_CHECK(setNonBlocking(fd));
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length);
    if (rc != 0 && errno == EINPROGRESS) {
      Status w = s.waitFor(POLLOUT, deadline, abort, "connect");
      if (!w.ok()) {
        if (w.code() == ncclInvalidUsage) return w;  // aborted
        return systemError("connecting to ", address.toString(), ": timed out",
                           lastErr != 0 ? strCat(" (the attempts before: ", std::strerror(lastErr), ")")
                                        : std::string());
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      tuneStream(fd);
      *out = std::move(s);
      return okStatus();
    }
    lastErr = errno;
    bool retry = lastErr == ECONNREFUSED || lastErr == ETIMEDOUT || lastErr == ENETUNREACH ||
                 lastErr == EHOSTUNREACH || lastErr == ECONNRESET || lastErr == EAGAIN;
    if (!retry) return errnoError(strCat("connecting to ", address.toString()), lastErr);
    const Deadline now = Clock::now();
    if (lastErr != ECONNREFUSED) {
      refusedSince = Deadline{};
    } else if (refusedSince == Deadline{}) {
      refusedSince = now;
    } else if (refusedLimitSec > 0 && now - refusedSince >= std::chrono::duration<double>(refusedLimitSec)) {
      return remoteError("connecting to ", address.toString(), ": refused for ", refusedLimitSec, " s");
    }
    if (now >= deadline) break;
    ::usleep(static_cast<useconds_t>(delayMs) * 1000);
    delayMs = std::min(delayMs * 2, 100);
    if (Clock::now() >= deadline) break;  // say why the attempts failed, not "timed out"
  }
  return Status(ncclSystemError, strCat("could not connect to ", address.toString(), " before the deadline (",
                                        std::strerror(lastErr), ")"));
}

Status Socket::tryAccept(Socket* out, SocketAddress* peer) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return okStatus();
    return errnoError("accept", errno);
  }
  tuneStream(fd);
  *out = Socket(fd);
  if (peer != nullptr) *peer = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  return okStatus();
}

Status Socket::accept(Deadline deadline, const std::atomic<bool>* abort, Socket* out, SocketAddress* peer) const {
  while (true) {
    BRAID_CHECK(tryAccept(out, peer));
    if (out->isOpen()) return okStatus();
    BRAID_CHECK(waitFor(POLLIN, deadline, abort, "accept"));
  }
}

Status Socket::sendAll(const void* data, size_t size, Deadline deadline, const std::atomic<bool>* abort) const {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      BRAID_CHECK(waitFor(POLLOUT, deadline, abort, "send"));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return remoteError("peer closed the connection");
    return errnoError("send", errno);
  }
  return okStatus();
}

Status Socket::recvSome(void* data, size_t size, size_t* got) const {
  *got = 0;
  if (size == 0) return okStatus();
  ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
  if (n > 0) {
    *got = static_cast<size_t>(n);
    return okStatus();
  }
  if (n == 0) return remoteError("peer closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return okStatus();
  if (errno == ECONNRESET) return remoteError("peer reset the connection");
  return errnoError("recv", errno);
}

Status Socket::recvAll(void* data, size_t size, Deadline deadline, const std::atomic<bool>* abort) const {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    size_t got = 0;
    BRAID_CHECK(recvSome(p, size, &got));
    if (got == 0) {
      BRAID_CHECK(waitFor(POLLIN, deadline, abort, "receive"));
      continue;
    }
    p += got;
    size -= got;
  }
  return okStatus();
}

Status Socket::localAddress(SocketAddress* out) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return errnoError("getsockname", errno);
  *out = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  return okStatus();
}

}  // namespace braid
