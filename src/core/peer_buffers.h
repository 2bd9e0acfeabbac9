// Registered buffers (ncclCommRegister) of a GPU rank, shared with the ranks
// of other processes on its host so that their kernels may write them
// directly (docs/gpu.md, "Direct writes"). Registration is local in NCCL's
// API, so no peer takes part in it; instead each rank keeps a table in a
// memory file its host's peers map (platform/shared_memory.h):
//
//   - the owner publishes each registration in a slot (the allocation
//     holding it and that allocation's export: an IPC handle, or a lent
//     descriptor of a virtual-memory allocation, platform/gpu.h) and
//     withdraws it at deregistration;
//   - a peer, whenever it enqueues GPU work, imports the registrations it
//     has not seen (its open callback maps the export) and writes back,
//     in the owner's table, where its process mapped each one, and closes
//     what was withdrawn;
//   - the owner then hands the peer's kernels that address (viewOf).
//
// A registration a peer has not imported yet is simply not written
// directly: the owner posts null in the mailbox and both ends take the
// FIFO. A peer that never enqueues never imports.
// Slots are read seqlock-style (serial, words, serial again), so an owner
// reusing a slot while a peer reads it is seen and retried.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "platform/gpu.h"
#include "util/status.h"

namespace braid {

constexpr int kSharedSlots = 128;  // registrations of one rank shared at once
constexpr int kSharedPeers = 16;   // ranks of one host that share them (local index below this)

// What an owner publishes about one registration.
struct SharedRegistration {
  uint64_t allocBase = 0;  // the allocation holding it, in the owner's process
  uint64_t allocBytes = 0;
  GpuExport exp;  // how another process maps the allocation
};

class PeerBuffers {
 public:
  // This rank's table (zeroed shared memory), marked as rank `rank`'s of
  // the communicator `commHash`: a peer checks the mark before it trusts
  // what it mapped.
  static Status create(uint64_t commHash, int rank, std::unique_ptr<PeerBuffers>* out);
  ~PeerBuffers();
  PeerBuffers(const PeerBuffers&) = delete;
  PeerBuffers& operator=(const PeerBuffers&) = delete;

  int fd() const { return fd_; }  // what peers map (PeerInfo)

  // --- owner side ---
  // Shares registration `key` ([buff, buff + bytes) of allocation `reg`);
  // false if every slot is taken. Once published, the table owns reg.exp:
  // withdrawing the registration, or destroying the table, ends the export
  // (gpuUnexport).
  bool publish(const void* key, const void* buff, size_t bytes, const SharedRegistration& reg);
  // Stops sharing `key` (no-op if it was not shared).
  void withdraw(const void* key);
  // [p, p + bytes) as the process of the rank with local index `peerLocal`
  // addresses it, if it lies in a registration that rank imported; else null.
  char* viewOf(int peerLocal, const void* p, size_t bytes) const;

  // --- peer side ---
  using OpenFn = std::function<Status(const SharedRegistration& reg, char** mapped)>;
  using CloseFn = std::function<void(const SharedRegistration& reg)>;
  // Imports what the rank `owner` (its process `pid`, its table `fd`)
  // published since the last call and closes what it withdrew; this rank's
  // local index is `myLocal`. A registration `open` fails to map is logged
  // and not retried.
  Status refresh(int owner, pid_t pid, int fd, int myLocal, const OpenFn& open, const CloseFn& close);
  // Tells every owner that this rank's imports are gone (at destroy; the
  // caller closes the mappings themselves).
  void forgetImports();

 private:
  PeerBuffers() = default;
  struct Table;
  struct Published {
    int slot;
    uint64_t serial;
    const char* buff;
    size_t bytes;
    uint64_t allocBase;
    GpuExport exp;
  };
  struct Imported {
    uint64_t serial = 0;
    SharedRegistration reg;
  };
  struct Owner {
    Table* table = nullptr;
    int myLocal = -1;         // this rank's row of the owner's imports
    uint64_t generation = 0;  // the owner's generation last imported in full
    Imported slots[kSharedSlots];
  };

  int fd_ = -1;
  uint64_t commHash_ = 0;
  Table* table_ = nullptr;
  mutable std::mutex mu_;  // published_ and the serials (owner side)
  std::map<const void*, Published> published_;
  uint64_t nextSerial_ = 0;
  std::map<int, Owner> owners_;  // peer side: by owner rank
};

}  // namespace braid
