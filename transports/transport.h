// Connectors: the one protocol every transport speaks (DESIGN.md §4).
//
// A connector is a FIFO of kSteps slots from one sender to one receiver on
// one channel. The sender of step s waits until head + kSteps > s, writes
// slot s % kSteps (payload and its byte count), then publishes tail = s + 1
// with a release store. The receiver of step s waits until tail > s (acquire),
// consumes the slot, then publishes head = s + 1 (release). Each side owns
// the counter it writes; the memory lives wherever the transport put it
// (shared memory for the shm transport) and both sides map it.
//
// Two protocols share the counters and the step numbering (DESIGN.md §4):
// - Simple: a step writes a slot of the Simple region (header + payload),
//   then publishes tail with a release store; the receiver acquires tail.
// - LL (low latency): a step writes a slot of the LL region as 8-byte units,
//   each {4 data bytes, 4 flag bytes} in one atomic store, with flag =
//   low 32 bits of step + 1; the first unit carries the step's byte count.
//   The receiver polls the units' flags, not tail, so the data is visible
//   the moment it lands. A slot's flag changes every time it is reused, and
//   the region holds nothing but LL units, so a stale unit never matches.
//   (The sender still publishes tail, so counters read the same for both.)
// Head (credits: a slot is free again) works the same for both.
//
// This header is plain data: transports fill it, primitives drive it, and
// neither knows the other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "platform/host_device.h"

namespace braid {

constexpr int kConnectorSteps = 8;

// How a step's data is made visible (see above). LL128 is a GPU protocol
// (128-byte stores delivered atomically over NVLink); the host has no such
// guarantee and never uses it.
enum class Protocol { Simple, LL, LL128 };
inline const char* protocolName(Protocol p) {
  switch (p) {
    case Protocol::Simple: return "Simple";
    case Protocol::LL: return "LL";
    default: return "LL128";
  }
}
// Bytes of one host LL slot: an 8-byte header unit (flag = step + 1 in the
// high half, the byte count in the low half), then the data, packed: in the
// header's cache line when it fits there (up to 56 bytes), else from the
// next line on, so that larger steps are copied line-aligned. A slot
// carries kLLSlotBytes - 64 data bytes.
constexpr size_t kLLSlotBytes = 16384;
constexpr size_t llDataOffset(size_t bytes) {
  return bytes <= 56 ? 8 : 64;
}
// Host LL steps a connector holds at once: more than Simple's
// kConnectorSteps, so that a stream of small collectives runs further
// ahead before a rank waits. Where ranks take turns on the cores, every
// wait hands the core over (a context switch), and the depth sets how
// many collectives a rank does per turn.
constexpr int kHostLLSteps = 32;

struct alignas(64) ConnectorCounters {
  std::atomic<uint64_t> tail{0};  // written by the sender
  char pad0[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> head{0};  // written by the receiver
  char pad1[64 - sizeof(std::atomic<uint64_t>)];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8,
              "LL units need lock-free 8-byte atomics");

struct alignas(64) SlotHeader {
  uint64_t bytes;  // payload bytes in this slot
  uint64_t step;   // the step that filled it (checked by the receiver)
};

// The shared layout: counters, kConnectorSteps Simple slots of
// sizeof(SlotHeader) + slotBytes each, then kHostLLSteps LL slots. Both
// protocols count steps on the same counters: a step of either protocol
// waits until the slot it fills was released (the step one depth of its
// protocol earlier), whatever protocol the steps in between used.
struct ConnectorMemory {
  static size_t simpleBytes(size_t slotBytes) { return kConnectorSteps * (sizeof(SlotHeader) + slotBytes); }
  static size_t sizeFor(size_t slotBytes) {
    return sizeof(ConnectorCounters) + simpleBytes(slotBytes) + kHostLLSteps * kLLSlotBytes;
  }
};

// One end's view of a connector.
struct Connector {
  ConnectorCounters* counters = nullptr;
  char* slots = nullptr;  // first slot header
  char* llSlots = nullptr;  // first LL slot
  size_t slotBytes = 0;   // payload capacity of a slot
  uint64_t step = 0;      // next step this end will use
  uint64_t seenHead = 0;  // sender: the receiver's head when last read (head only grows, so
                          // reading it again is needed only when the FIFO looks full)

  bool valid() const { return counters != nullptr; }
  // Sender: whether slot `step` of a FIFO `depth` steps deep (Simple's or
  // LL's) is free. The receiver's head lives in a cache line it writes
  // every step, so it is read again only when the last value seen says the
  // FIFO is full.
  bool sendSlotFree(uint64_t depth = kConnectorSteps) {
    if (seenHead + depth > step) return true;
    seenHead = counters->head.load(std::memory_order_acquire);
    return seenHead + depth > step;
  }
  SlotHeader* header(uint64_t s) const {
    return reinterpret_cast<SlotHeader*>(slots + (s % kConnectorSteps) * (sizeof(SlotHeader) + slotBytes));
  }
  char* payload(uint64_t s) const { return reinterpret_cast<char*>(header(s)) + sizeof(SlotHeader); }
  // LL slot of step s: the header unit, stored last with release, and
  // where a step of `bytes` data bytes puts them.
  std::atomic<uint64_t>* llHeader(uint64_t s) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(llSlots + (s % kHostLLSteps) * kLLSlotBytes);
  }
  char* llData(uint64_t s, size_t bytes) const {
    return llSlots + (s % kHostLLSteps) * kLLSlotBytes + llDataOffset(bytes);
  }

  static Connector over(void* memory, size_t slotBytes) {
    Connector c;
    c.counters = static_cast<ConnectorCounters*>(memory);
    c.slots = static_cast<char*>(memory) + sizeof(ConnectorCounters);
    c.slotBytes = slotBytes;
    c.llSlots = c.slots + ConnectorMemory::simpleBytes(slotBytes);
    return c;
  }
};

// What a transport hands back for one end of a connector: the connector and
// whatever keeps its memory alive (a shared segment, a proxy registration).
struct ConnectorEnd {
  virtual ~ConnectorEnd() = default;
  Connector conn;
};

}  // namespace braid

// ---- Device connectors (GPU backend) -------------------------------------
//
// The same protocol between GPUs, laid out so that each side polls only its
// own memory: the receiver's block holds tail (stored by the sender over
// NVLink/xGMI/PCIe), the Simple slots and the LL slots; the sender's block
// holds head (stored by the receiver). Each block also keeps its own end's
// next step, so steps carry over from one kernel launch to the next (stream
// order makes the previous launch's store visible). Device LL lines are 16
// bytes {data0, flag, data1, flag}: every 8-byte half carries the flag, so
// the protocol needs 8-byte store atomicity only (AMD included).
//
// LL128 lines are 128 bytes: 120 data bytes and an 8-byte flag (step + 1)
// in the last word. A warp writes a line as 8 lanes' 16-byte stores in one
// instruction, and the receiver trusts the whole line once it sees the
// flag: that needs the line delivered at once, which NVLink does for
// NVIDIA sm_90 (and a GPU's own memory), PCIe and AMD's fabrics do not
// promise. Connectors that may run LL128 carry an LL128 region after the
// LL slots (DevConnLayout: only ring connectors of communicators whose
// GPUs all qualify; core/comm.h, ll128()).
namespace braid {

constexpr size_t kDevLLSlotBytes = 65536;                      // one LL step: 4096 lines
constexpr size_t kDevLLDataBytes = kDevLLSlotBytes / 2;        // 8 data bytes per 16-byte line
constexpr size_t kDevLL128LineBytes = 128;
constexpr size_t kDevLL128LineData = 120;      // the last 8 bytes are the flag
constexpr size_t kDevLL128SlotBytes = 131072;  // one LL128 step: 1024 lines
constexpr size_t kDevLL128DataBytes = kDevLL128SlotBytes / kDevLL128LineBytes * kDevLL128LineData;
constexpr size_t kDevCountersBytes = 256;                      // counter word, own step, padding

// One end as a kernel sees it (trivially copyable; pointers are device
// addresses valid on this rank's GPU).
struct DevConn {
  char* simple = nullptr;     // first Simple slot (the receiver's memory; read mode: the sender's)
  char* ll = nullptr;         // first LL slot (in the receiver's memory)
  char* ll128 = nullptr;      // first LL128 slot (in the receiver's memory), null if the connector has none
  uint64_t* tail = nullptr;   // in the receiver's memory: the sender stores, the receiver polls
  uint64_t* head = nullptr;   // in the sender's memory: the receiver stores, the sender polls
  uint64_t* step = nullptr;   // this end's next step, in its own memory
  uint64_t slotBytes = 0;     // Simple payload per step
  // The step words in the receiver's block (DevStepWord, one per slot),
  // set on both ends of every GPU connector. A sender records a step's size
  // and protocol there before it publishes tail: on a net connector every
  // step (its proxy needs them to send, and the receiving proxy records
  // what it delivers), elsewhere in point-to-point kernels, whose receivers
  // check them, so a send and a receive of different sizes fail instead of
  // shifting every later step.
  uint64_t* sizes = nullptr;
  bool net = false;  // the peer's end is a proxy (transports/net/proxy.h)
  // Both blocks in GPU memory only (null otherwise): the mailbox in the
  // sender's block (DevDirectBox) through which the receiver of a large
  // message hands the sender its buffer, as the sender's process addresses
  // it, which the sender then writes directly instead of through the FIFO
  // (transports/p2p, "direct writes").
  uint64_t* box = nullptr;
};

// The mailbox's words: the receiver stores its buffer and size, then (after
// a system fence) the step the message starts at, plus one; the sender
// polls that word. A null buffer means "through the FIFO after all" (one
// the sender's GPU must not write, such as pool or host memory).
struct DevDirectBox {
  static constexpr int kStep = 0, kBuffer = 1, kBytes = 2;
};

// What a sender records for step s of a net connector: (s + 1) in bits
// 32..62 (checked by the proxy), the protocol in bit 63 (1: LL), the step's
// payload bytes in bits 0..31.
struct DevStepWord {
  static constexpr uint64_t kLL = 1ull << 63;
  BRAID_HOST_DEVICE static uint64_t make(uint64_t step, bool ll, uint64_t bytes) {
    return (((step + 1) & 0x7fffffffull) << 32) | (ll ? kLL : 0) | (bytes & 0xffffffffull);
  }
  static bool matches(uint64_t word, uint64_t step) {
    return ((word >> 32) & 0x7fffffffull) == ((step + 1) & 0x7fffffffull);
  }
  static bool ll(uint64_t word) { return (word & kLL) != 0; }
  static uint64_t bytes(uint64_t word) { return word & 0xffffffffull; }
};

// A GPU connector's two blocks. The Simple slots are in the receiver's
// block (write mode: the sender stores across the link), or with `read` in
// the sender's (read mode: the sender stores locally and the receiver
// loads across the link; transports/p2p). LL and LL128 slots are always
// the receiver's: their flags are polled where they land.
struct DevConnLayout {
  static size_t recvBytes(size_t slotBytes, bool ll128 = false, bool read = false) {
    return kDevCountersBytes +
           kConnectorSteps * ((read ? 0 : slotBytes) + kDevLLSlotBytes + (ll128 ? kDevLL128SlotBytes : 0));
  }
  static size_t sendBytes(size_t slotBytes = 0, bool read = false) {
    return kDevCountersBytes + (read ? kConnectorSteps * slotBytes : 0);
  }
  // Offsets inside a block.
  static constexpr size_t kCounter = 0;  // tail (receiver's block) or head (sender's block)
  static constexpr size_t kStep = 64;
  static constexpr size_t kSizes = 128;  // receiver's block: kConnectorSteps DevStepWords
  static constexpr size_t kBox = 128;    // sender's block: DevDirectBox (both blocks in GPU memory)
  static size_t simpleOffset() { return kDevCountersBytes; }  // in the block that holds them
  static size_t llOffset(size_t slotBytes, bool read = false) {
    return kDevCountersBytes + (read ? 0 : kConnectorSteps * slotBytes);
  }
  static size_t ll128Offset(size_t slotBytes, bool read = false) {
    return llOffset(slotBytes, read) + kConnectorSteps * kDevLLSlotBytes;
  }
};
static_assert(DevConnLayout::kSizes + kConnectorSteps * sizeof(uint64_t) <= kDevCountersBytes,
              "the step words fit in the counters area");
static_assert(DevConnLayout::kBox + 3 * sizeof(uint64_t) <= kDevCountersBytes,
              "the mailbox fits in the counters area");

// A net connector's end (a peer on another host): both blocks in one
// allocation of host memory this rank's GPU maps, the receiver's block
// first. The kernel drives it as if the peer's block were there; the proxy
// (transports/net/proxy.h) plays the peer: it sends what the kernel wrote
// and writes what arrives.
struct DevNetLayout {
  static size_t bytes(size_t slotBytes) {
    return DevConnLayout::recvBytes(slotBytes) + DevConnLayout::sendBytes();
  }
  static size_t sendBlockOffset(size_t slotBytes) { return DevConnLayout::recvBytes(slotBytes); }
};

// A net connector's block as the proxy sees it (host addresses).
struct DevNetBlock {
  char* base = nullptr;  // DevNetLayout
  size_t slotBytes = 0;

  uint64_t* tail() const { return reinterpret_cast<uint64_t*>(base + DevConnLayout::kCounter); }
  uint64_t* head() const {
    return reinterpret_cast<uint64_t*>(base + DevNetLayout::sendBlockOffset(slotBytes) +
                                       DevConnLayout::kCounter);
  }
  uint64_t* stepWord(uint64_t s) const {
    return reinterpret_cast<uint64_t*>(base + DevConnLayout::kSizes) + s % kConnectorSteps;
  }
  char* simple(uint64_t s) const {
    return base + DevConnLayout::simpleOffset() + (s % kConnectorSteps) * slotBytes;
  }
  char* ll(uint64_t s) const {
    return base + DevConnLayout::llOffset(slotBytes) + (s % kConnectorSteps) * kDevLLSlotBytes;
  }
  // The connector a kernel gets for this end, with `device` the GPU's
  // address of `base` and `send` the end's direction.
  DevConn conn(char* device, bool send) const {
    DevConn c;
    c.simple = device + DevConnLayout::simpleOffset();
    c.ll = device + DevConnLayout::llOffset(slotBytes);
    c.tail = reinterpret_cast<uint64_t*>(device + DevConnLayout::kCounter);
    char* sendBlock = device + DevNetLayout::sendBlockOffset(slotBytes);
    c.head = reinterpret_cast<uint64_t*>(sendBlock + DevConnLayout::kCounter);
    c.step = reinterpret_cast<uint64_t*>((send ? sendBlock : device) + DevConnLayout::kStep);
    c.slotBytes = slotBytes;
    c.sizes = reinterpret_cast<uint64_t*>(device + DevConnLayout::kSizes);
    c.net = true;
    return c;
  }
};

}  // namespace braid
