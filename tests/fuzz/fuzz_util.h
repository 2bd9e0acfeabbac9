// Helpers shared by the libFuzzer targets in this folder.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "bootstrap/wire.h"

namespace braid::fuzz {

// Aborts the run (libFuzzer records the input) when a property fails.
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

// A heap copy of exactly `size` bytes, so ASan flags any read past its end.
struct HeapBytes {
  HeapBytes(const uint8_t* data, size_t n) : bytes(new uint8_t[n]), size(n) {
    if (n > 0) std::memcpy(bytes.get(), data, n);
  }
  const uint8_t* data() const { return bytes.get(); }
  std::unique_ptr<uint8_t[]> bytes;
  size_t size;
};

// A decoder that fails must say why, as ncclInvalidArgument.
inline void checkRejected(const Status& s) {
  check(!s.ok());
  check(s.code() == ncclInvalidArgument);
  check(!s.message().empty());
}

// Same family, port and address bytes (what the wire carries).
inline bool sameAddress(const SocketAddress& a, const SocketAddress& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_UNSPEC) return true;
  if (a.port() != b.port()) return false;
  if (a.family() == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b.storage)->sin_addr, 4) == 0;
  }
  if (a.family() == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b.storage)->sin6_addr, 16) == 0;
  }
  return false;  // the decoders only produce AF_UNSPEC, AF_INET or AF_INET6
}

}  // namespace braid::fuzz
