// libFuzzer target: the frames between ranks -- decodePeerHello on the whole
// input, and decodeMessageHeader on the bytes after the first 8, which give
// the length the receiver expects (little-endian).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bootstrap/wire.h"
#include "fuzz_util.h"

using namespace braid;
using namespace braid::bootstrap;
using braid::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    fuzz::HeapBytes whole(data, size);
    PeerHello h;
    Status s = decodePeerHello(whole.data(), whole.size, &h);
    if (s.ok()) {
      // Every byte of a peer hello is meaningful: re-encoding gives the input back.
      check(size == kPeerHelloSize);
      std::vector<uint8_t> again = encodePeerHello(h);
      check(again.size() == size && std::memcmp(again.data(), data, size) == 0);
      PeerHello h2;
      check(decodePeerHello(again.data(), again.size(), &h2).ok());
      check(h2.secret == h.secret && h2.fromRank == h.fromRank && h2.tag == h.tag);
    } else {
      fuzz::checkRejected(s);
    }
  }

  if (size >= 8) {
    uint64_t expected = 0;
    for (int i = 0; i < 8; ++i) expected |= static_cast<uint64_t>(data[i]) << (8 * i);
    fuzz::HeapBytes header(data + 8, size - 8);
    uint64_t announced = 0;
    Status s = decodeMessageHeader(header.data(), header.size, expected, &announced);
    if (s.ok()) {
      check(header.size == kMessageHeaderSize && announced == expected);
      uint8_t again[kMessageHeaderSize];
      encodeMessageHeader(announced, again);
      check(std::memcmp(again, header.data(), kMessageHeaderSize) == 0);
      uint64_t announced2 = 0;
      check(decodeMessageHeader(again, sizeof(again), expected, &announced2).ok() && announced2 == announced);
    } else {
      fuzz::checkRejected(s);
      if (header.size == kMessageHeaderSize) {
        // Well-formed but not what was expected: the announced length is still reported.
        check(announced != expected);
        uint8_t again[kMessageHeaderSize];
        encodeMessageHeader(announced, again);
        check(std::memcmp(again, header.data(), kMessageHeaderSize) == 0);
      }
    }
  }
  return 0;
}
