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
// This header is plain data: transports fill it, primitives drive it, and
// neither knows the other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid {

constexpr int kConnectorSteps = 8;

struct alignas(64) ConnectorCounters {
  std::atomic<uint64_t> tail{0};  // written by the sender
  char pad0[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> head{0};  // written by the receiver
  char pad1[64 - sizeof(std::atomic<uint64_t>)];
};

struct alignas(64) SlotHeader {
  uint64_t bytes;  // payload bytes in this slot
  uint64_t step;   // the step that filled it (checked by the receiver)
};

// The shared layout: counters, then kConnectorSteps slots of
// sizeof(SlotHeader) + slotBytes each.
struct ConnectorMemory {
  static size_t sizeFor(size_t slotBytes) {
    return sizeof(ConnectorCounters) + kConnectorSteps * (sizeof(SlotHeader) + slotBytes);
  }
};

// One end's view of a connector.
struct Connector {
  ConnectorCounters* counters = nullptr;
  char* slots = nullptr;  // first slot header
  size_t slotBytes = 0;   // payload capacity of a slot
  uint64_t step = 0;      // next step this end will use

  bool valid() const { return counters != nullptr; }
  SlotHeader* header(uint64_t s) const {
    return reinterpret_cast<SlotHeader*>(slots + (s % kConnectorSteps) * (sizeof(SlotHeader) + slotBytes));
  }
  char* payload(uint64_t s) const { return reinterpret_cast<char*>(header(s)) + sizeof(SlotHeader); }

  static Connector over(void* memory, size_t slotBytes) {
    Connector c;
    c.counters = static_cast<ConnectorCounters*>(memory);
    c.slots = static_cast<char*>(memory) + sizeof(ConnectorCounters);
    c.slotBytes = slotBytes;
    return c;
  }
};

}  // namespace braid
