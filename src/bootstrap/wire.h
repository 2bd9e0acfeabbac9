// Wire formats of the bootstrap: the unique id and every frame exchanged
// over its TCP connections, with their encoders and strict decoders.
//
// Decoders take untrusted bytes (anything can connect to a listener) and
// never read past the buffer: each returns ncclInvalidArgument with a message
// on any malformed input. They are pure functions, fuzzed by tests/fuzz/.
// All integers are little-endian on the wire, whatever the host.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "platform/socket.h"
#include "util/status.h"

namespace braid::bootstrap {

using Secret = std::array<uint8_t, 32>;
bool secretsEqual(const Secret& a, const Secret& b);  // constant time

// ---- unique id (128 bytes) ------------------------------------------------
constexpr uint32_t kUniqueIdLayout = 1;
constexpr uint32_t kIdFlagRootOnRank0 = 1;  // NCCL_COMM_ID: rank 0's init hosts the root

struct UniqueIdData {
  uint32_t flags = 0;
  SocketAddress root;
  Secret secret{};
};
void encodeUniqueId(const UniqueIdData& data, ncclUniqueId* id);
Status decodeUniqueId(const ncclUniqueId& id, UniqueIdData* out);

// ---- addresses in frames: family u16, port u16, 16 address bytes ----------
constexpr size_t kWireAddressSize = 20;

// ---- hello: rank (or sub-root) -> root --------------------------------------
constexpr uint32_t kHelloMagic = 0x31484252;  // "BRH1"
constexpr uint32_t kWireVersion = 1;
constexpr uint32_t kMaxRanks = 1u << 20;

struct RankAddress {
  uint32_t rank = 0;
  SocketAddress address;  // the rank's bootstrap listener
};

struct Hello {
  Secret secret{};
  uint32_t nranks = 0;
  uint32_t nIds = 1;     // ncclCommInitRankScalable: number of roots
  uint32_t idIndex = 0;  // which root this hello is sent to
  std::vector<RankAddress> ranks;  // one for a rank; a whole slice from a sub-root
  // Only when idIndex > 0: where the first root is, and its secret.
  SocketAddress firstRoot;
  Secret firstSecret{};
};
constexpr size_t kHelloFixedSize = 4 + 4 + 32 + 4 + 4 + 4 + 4 + kWireAddressSize + 32;
std::vector<uint8_t> encodeHello(const Hello& hello);
// How many bytes the hello whose first kHelloFixedSize bytes are `head` has.
Status helloSize(const uint8_t* head, size_t len, size_t* total);
Status decodeHello(const uint8_t* data, size_t len, Hello* out);

// ---- root reply: root -> rank -------------------------------------------------
constexpr uint32_t kReplyMagic = 0x31524252;  // "BRR1"
struct RootReply {
  ncclResult_t result = ncclSuccess;  // not success: the job failed, `message` says why
  std::string message;
  std::vector<SocketAddress> addresses;  // every rank's listener, by rank
};
constexpr size_t kReplyHeaderSize = 4 + 4 + 4 + 4;  // magic, result, message length, nranks
constexpr size_t kMaxMessage = 4096;
std::vector<uint8_t> encodeRootReply(const RootReply& reply);
Status replyBodySize(const uint8_t* header, size_t len, size_t* bodySize);
Status decodeRootReply(const uint8_t* data, size_t len, RootReply* out);

// ---- peer hello: rank -> another rank's listener ------------------------------
constexpr uint32_t kPeerMagic = 0x31504252;  // "BRP1"
constexpr uint32_t kRingTag = 0xffffffffu;
struct PeerHello {
  Secret secret{};
  uint32_t fromRank = 0;
  uint32_t tag = 0;  // kRingTag for the ring connection, else a send/recv tag
};
constexpr size_t kPeerHelloSize = 4 + 32 + 4 + 4;
std::vector<uint8_t> encodePeerHello(const PeerHello& hello);
Status decodePeerHello(const uint8_t* data, size_t len, PeerHello* out);

// ---- message header on an established connection: u64 payload length ------
constexpr size_t kMessageHeaderSize = 8;
void encodeMessageHeader(uint64_t length, uint8_t* out);
// Checks the announced length equals what the receiver expects.
Status decodeMessageHeader(const uint8_t* data, size_t len, uint64_t expected, uint64_t* announced);

}  // namespace braid::bootstrap
