// A communicator's windows (ncclCommWindowRegister) mapped into every rank,
// and, on the host backend, the slots its ranks meet through in zero-copy
// collectives (exec/host/host_sym.h). On the GPU backend the GPU engine maps
// the windows (IPC handles of ncclMemAlloc memory) and its own barrier
// memory; this table keeps where each rank's window is.
//
// Registering a window is collective: every rank passes its buffer, the
// ranks all-gather where it is (process, memory file, offset), and each
// maps the others'. A window is zero-copy when every rank could map every
// peer's: all ranks on one host, every buffer from ncclMemAlloc (or the
// ranks threads of one process), and the same user. Otherwise it is an
// ordinary registration and collectives on it take the FIFOs; the reason is
// logged. Windows are numbered in registration order, which every rank
// shares, so a collective tells its peers "window 3, offset 4096". A
// zero-copy window also knows where each peer's process mapped it, so a
// GPU rank can hand another process an address of its buffer that process
// may write (direct writes, docs/gpu.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/host/host_sym.h"
#include "util/status.h"

namespace braid {

class Communicator;

// Most ranks a GPU zero-copy collective runs on (device::kDevMaxSymRanks).
constexpr int kMaxGpuSymRanks = 8;

struct SlotPage;

class SymmetricWindows final : public SymWindowMap {
 public:
  SymmetricWindows() = default;
  ~SymmetricWindows();
  SymmetricWindows(const SymmetricWindows&) = delete;
  SymmetricWindows& operator=(const SymmetricWindows&) = delete;

  // Collective over `comm` (host backend): maps window `handle` of every
  // rank. A window that cannot be zero-copy is recorded as such, not an error.
  Status add(Communicator& comm, void* handle, void* buff, size_t size);
  // Local: unmaps the peers' part of window `handle` (no-op if unknown).
  void remove(Communicator& comm, void* handle);

  // The zero-copy window holding [p, p + bytes): its number and the offset.
  bool find(const void* p, size_t bytes, uint64_t* window, uint64_t* offset) const;
  bool any() const { return zeroCopy_.load(std::memory_order_relaxed) > 0; }
  char* base(int rank, uint64_t window) const override;
  // [p, p + bytes) of this rank, as rank `peer`'s process addresses it (its
  // mapping of the zero-copy window holding it); null if no such window.
  char* peerView(int peer, const void* p, size_t bytes) const;
  // Every rank's base of `window` into out[0 .. nranks) under one lock; false if unknown.
  bool bases(uint64_t window, char** out) const;
  // Every rank's slot of `channel`, in rank order.
  SymSlot* const* slots(int channel) const { return slots_[static_cast<size_t>(channel)].data(); }

 private:
  struct Mapping {
    void* addr;
    size_t bytes;
  };
  struct Window {
    uint64_t number;
    void* handle;
    const char* buff;
    size_t size;
    std::vector<char*> bases;  // by rank; this rank's is buff
    std::vector<char*> views;  // by rank: where that rank's process mapped buff
    std::vector<Mapping> mappings;
    bool gpu;  // mapped by the GPU engine (which releases its mappings)
  };
  // Host backend: maps every rank's buffer (shared memory) into `w`, or
  // leaves `why` set.
  Status mapHostWindow(Communicator& comm, void* buff, size_t size, Window* w, std::string* why);
  Status mapSlots(Communicator& comm, const std::vector<struct WindowRecord>& records);
  // The window holding [p, p + bytes), or null; mu_ held.
  const Window* holding(const void* p, size_t bytes) const;

  mutable std::mutex mu_;
  std::vector<Window> windows_;  // zero-copy windows only
  std::atomic<int> zeroCopy_{0};
  uint64_t registered_ = 0;  // windows registered so far (zero-copy or not)
  // This rank's slots (shared memory) and every rank's, per channel. The
  // pages of peers in this process are used at their own addresses and
  // held: a fast rank may leave a collective and destroy its communicator
  // while a slower thread still reads that rank's flags.
  std::shared_ptr<SlotPage> slotPage_;
  std::vector<std::shared_ptr<SlotPage>> peerPages_;
  std::vector<Mapping> slotMappings_;
  std::vector<std::vector<SymSlot*>> slots_;
};

}  // namespace braid
