#include "bootstrap/wire.h"

#include <arpa/inet.h>

#include <cstring>

namespace braid::bootstrap {
namespace {

constexpr char kIdMagic[8] = {'B', 'R', 'A', 'I', 'D', 'U', 'I', 'D'};

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u16(uint16_t v) { for (int i = 0; i < 2; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  void address(const SocketAddress& a) {
    uint8_t raw[16] = {};
    uint16_t family = 0;
    if (a.family() == AF_INET) {
      family = 4;
      std::memcpy(raw, &reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr, 4);
    } else if (a.family() == AF_INET6) {
      family = 6;
      std::memcpy(raw, &reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr, 16);
    }
    u16(family);
    u16(a.port());
    bytes(raw, 16);
  }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t len) : p_(data), left_(len) {}
  bool u16(uint16_t* v) {
    if (left_ < 2) return false;
    *v = static_cast<uint16_t>(p_[0] | (p_[1] << 8));
    advance(2);
    return true;
  }
  bool u32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
         (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
    advance(4);
    return true;
  }
  bool bytes(void* out, size_t n) {
    if (left_ < n) return false;
    std::memcpy(out, p_, n);
    advance(n);
    return true;
  }
  // A wire address; `allowEmpty` accepts family 0 (no address).
  bool address(SocketAddress* a, bool allowEmpty) {
    uint16_t family = 0, port = 0;
    uint8_t raw[16];
    if (!u16(&family) || !u16(&port) || !bytes(raw, 16)) return false;
    *a = SocketAddress();
    if (family == 0) return allowEmpty;
    if (port == 0) return false;
    if (family == 4) {
      sockaddr_in sin{};
      sin.sin_family = AF_INET;
      std::memcpy(&sin.sin_addr, raw, 4);
      *a = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    } else if (family == 6) {
      sockaddr_in6 sin6{};
      sin6.sin6_family = AF_INET6;
      std::memcpy(&sin6.sin6_addr, raw, 16);
      *a = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&sin6), sizeof(sin6));
    } else {
      return false;
    }
    a->setPort(port);
    return true;
  }
  size_t left() const { return left_; }

 private:
  void advance(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

Status malformed(const char* what, const char* why) { return invalidArgument("malformed ", what, ": ", why); }

}  // namespace

bool secretsEqual(const Secret& a, const Secret& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

// ---------------------------------------------------------------- unique id

void encodeUniqueId(const UniqueIdData& data, ncclUniqueId* id) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  w.bytes(kIdMagic, sizeof(kIdMagic));
  w.u32(kUniqueIdLayout);
  w.u32(data.flags);
  w.address(data.root);
  w.bytes(data.secret.data(), data.secret.size());
  // A link-local root ("[fe80::1%eth0]:port" in NCCL_COMM_ID) needs its
  // scope, which every process that parses the variable finds on its host.
  w.u32(data.root.family() == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&data.root.storage)->sin6_scope_id
                                       : 0);
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, buf.data(), buf.size());
}

Status decodeUniqueId(const ncclUniqueId& id, UniqueIdData* out) {
  Reader r(reinterpret_cast<const uint8_t*>(id.internal), sizeof(id.internal));
  char magic[8];
  uint32_t layout = 0;
  r.bytes(magic, sizeof(magic));
  if (std::memcmp(magic, kIdMagic, sizeof(magic)) != 0) {
    return invalidArgument("the unique id was not made by Braid's ncclGetUniqueId (wrong magic); every rank "
                           "must receive the id from the one process that created it");
  }
  if (!r.u32(&layout) || layout != kUniqueIdLayout) {
    return invalidArgument("the unique id has layout ", layout, ", this Braid reads layout ", kUniqueIdLayout,
                           " (mixed Braid versions?)");
  }
  UniqueIdData d;
  if (!r.u32(&d.flags) || (d.flags & ~kIdFlagRootOnRank0) != 0) {
    return malformed("unique id", "unknown flags");
  }
  if (!r.address(&d.root, false)) return malformed("unique id", "no valid root address");
  if (!r.bytes(d.secret.data(), d.secret.size())) return malformed("unique id", "truncated secret");
  uint32_t scope = 0;
  if (r.u32(&scope) && scope != 0) {
    if (d.root.family() != AF_INET6) return malformed("unique id", "a scope on an IPv4 root address");
    reinterpret_cast<sockaddr_in6*>(&d.root.storage)->sin6_scope_id = scope;
  }
  bool emptySecret = true;
  for (uint8_t b : d.secret) emptySecret &= b == 0;
  if (emptySecret) return malformed("unique id", "empty secret");
  *out = d;
  return okStatus();
}

// ---------------------------------------------------------------- hello

std::vector<uint8_t> encodeHello(const Hello& hello) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  w.u32(kHelloMagic);
  w.u32(kWireVersion);
  w.bytes(hello.secret.data(), hello.secret.size());
  w.u32(hello.nranks);
  w.u32(hello.nIds);
  w.u32(hello.idIndex);
  w.u32(static_cast<uint32_t>(hello.ranks.size()));
  w.address(hello.firstRoot);
  w.bytes(hello.firstSecret.data(), hello.firstSecret.size());
  for (const RankAddress& ra : hello.ranks) {
    w.u32(ra.rank);
    w.address(ra.address);
  }
  return buf;
}

Status helloSize(const uint8_t* head, size_t len, size_t* total) {
  Reader r(head, len);
  uint32_t magic = 0, version = 0, nranks = 0, nIds = 0, idIndex = 0, count = 0;
  Secret secret;
  if (!r.u32(&magic) || magic != kHelloMagic) return malformed("hello", "not a Braid bootstrap frame");
  if (!r.u32(&version) || version != kWireVersion) {
    return invalidArgument("bootstrap protocol version ", version, " is not ", kWireVersion,
                           " (mixed Braid versions?)");
  }
  if (!r.bytes(secret.data(), secret.size()) || !r.u32(&nranks) || !r.u32(&nIds) || !r.u32(&idIndex) ||
      !r.u32(&count)) {
    return malformed("hello", "truncated header");
  }
  if (nranks == 0 || nranks > kMaxRanks) return malformed("hello", "rank count out of range");
  if (count == 0 || count > nranks) return malformed("hello", "entry count out of range");
  *total = kHelloFixedSize + static_cast<size_t>(count) * (4 + kWireAddressSize);
  return okStatus();
}

Status decodeHello(const uint8_t* data, size_t len, Hello* out) {
  size_t total = 0;
  BRAID_CHECK(helloSize(data, len, &total));
  if (len != total) return malformed("hello", "length does not match its entry count");
  Reader r(data, len);
  uint32_t magic = 0, version = 0, count = 0;
  Hello h;
  r.u32(&magic);
  r.u32(&version);
  r.bytes(h.secret.data(), h.secret.size());
  r.u32(&h.nranks);
  r.u32(&h.nIds);
  r.u32(&h.idIndex);
  r.u32(&count);
  if (h.nIds == 0 || h.nIds > h.nranks || h.idIndex >= h.nIds) return malformed("hello", "root index out of range");
  if (!r.address(&h.firstRoot, /*allowEmpty=*/h.idIndex == 0)) return malformed("hello", "bad first-root address");
  if (h.idIndex > 0 && !h.firstRoot.valid()) return malformed("hello", "missing first-root address");
  r.bytes(h.firstSecret.data(), h.firstSecret.size());
  h.ranks.resize(count);
  for (RankAddress& ra : h.ranks) {
    if (!r.u32(&ra.rank) || !r.address(&ra.address, false)) return malformed("hello", "bad rank entry");
    if (ra.rank >= h.nranks) return malformed("hello", "rank out of range");
  }
  *out = std::move(h);
  return okStatus();
}

// ---------------------------------------------------------------- root reply

std::vector<uint8_t> encodeRootReply(const RootReply& reply) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  std::string msg = reply.message.substr(0, kMaxMessage);
  w.u32(kReplyMagic);
  w.u32(static_cast<uint32_t>(reply.result));
  w.u32(static_cast<uint32_t>(msg.size()));
  w.u32(static_cast<uint32_t>(reply.addresses.size()));
  w.bytes(msg.data(), msg.size());
  for (const SocketAddress& a : reply.addresses) w.address(a);
  return buf;
}

Status replyBodySize(const uint8_t* header, size_t len, size_t* bodySize) {
  Reader r(header, len);
  uint32_t magic = 0, result = 0, msgLen = 0, n = 0;
  if (!r.u32(&magic) || magic != kReplyMagic) return malformed("root reply", "not a Braid bootstrap frame");
  if (!r.u32(&result) || !r.u32(&msgLen) || !r.u32(&n)) return malformed("root reply", "truncated header");
  if (result >= ncclNumResults) return malformed("root reply", "unknown result code");
  if (msgLen > kMaxMessage) return malformed("root reply", "message too long");
  if (n > kMaxRanks) return malformed("root reply", "rank count out of range");
  *bodySize = msgLen + static_cast<size_t>(n) * kWireAddressSize;
  return okStatus();
}

Status decodeRootReply(const uint8_t* data, size_t len, RootReply* out) {
  size_t body = 0;
  BRAID_CHECK(replyBodySize(data, len, &body));
  if (len != kReplyHeaderSize + body) return malformed("root reply", "length does not match its header");
  Reader r(data, len);
  uint32_t magic = 0, result = 0, msgLen = 0, n = 0;
  r.u32(&magic);
  r.u32(&result);
  r.u32(&msgLen);
  r.u32(&n);
  RootReply reply;
  reply.result = static_cast<ncclResult_t>(result);
  reply.message.resize(msgLen);
  r.bytes(reply.message.data(), msgLen);
  reply.addresses.resize(n);
  for (SocketAddress& a : reply.addresses) {
    if (!r.address(&a, false)) return malformed("root reply", "bad address");
  }
  *out = std::move(reply);
  return okStatus();
}

// ---------------------------------------------------------------- peer hello

std::vector<uint8_t> encodePeerHello(const PeerHello& hello) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  w.u32(kPeerMagic);
  w.bytes(hello.secret.data(), hello.secret.size());
  w.u32(hello.fromRank);
  w.u32(hello.tag);
  return buf;
}

Status decodePeerHello(const uint8_t* data, size_t len, PeerHello* out) {
  if (len != kPeerHelloSize) return malformed("peer hello", "wrong length");
  Reader r(data, len);
  uint32_t magic = 0;
  PeerHello h;
  r.u32(&magic);
  if (magic != kPeerMagic) return malformed("peer hello", "not a Braid bootstrap frame");
  r.bytes(h.secret.data(), h.secret.size());
  r.u32(&h.fromRank);
  r.u32(&h.tag);
  *out = h;
  return okStatus();
}

// ---------------------------------------------------------------- messages

void encodeMessageHeader(uint64_t length, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(length >> (8 * i));
}

Status decodeMessageHeader(const uint8_t* data, size_t len, uint64_t expected, uint64_t* announced) {
  if (len != kMessageHeaderSize) return malformed("message header", "wrong length");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(data[i]) << (8 * i);
  *announced = v;
  if (v != expected) {
    return invalidArgument("message of ", v, " bytes where ", expected,
                           " were expected (ranks disagree on the operation, or a garbled frame)");
  }
  return okStatus();
}

}  // namespace braid::bootstrap
