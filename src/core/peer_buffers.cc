#include "core/peer_buffers.h"

#include <cstring>
#include <new>

#include "core/memory.h"
#include "platform/shared_memory.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {

namespace {
constexpr int kRegWords = (sizeof(SharedRegistration) + 7) / 8;
static_assert(sizeof(SharedRegistration) == 8 * kRegWords, "a registration is whole words");
}  // namespace

// The memory file's layout. Only the owner writes slots and the
// generation; only peer i writes imports[i].
struct PeerBuffers::Table {
  static constexpr uint64_t kMagic = 0x42524149445232ull;  // "BRAIDR2" (slots hold a GpuExport)
  struct Slot {
    std::atomic<uint64_t> serial;  // 0: empty; else the registration's serial
    std::atomic<uint64_t> words[kRegWords];
  };
  struct Import {
    std::atomic<uint64_t> serial;  // the slot serial `addr` belongs to; 0: none
    std::atomic<uint64_t> addr;    // where the peer's process mapped the allocation
  };
  uint64_t magic, commHash;  // written once, before any peer maps it
  int64_t rank;
  std::atomic<uint64_t> generation;  // bumped after every publish and withdraw
  Slot slots[kSharedSlots];
  Import imports[kSharedPeers][kSharedSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics shared between processes");

Status PeerBuffers::create(uint64_t commHash, int rank, std::unique_ptr<PeerBuffers>* out) {
  std::unique_ptr<PeerBuffers> p(new PeerBuffers());
  void* mem = nullptr;
  BRAID_CHECK(sharedMemoryCreate(sizeof(Table), &p->fd_, &mem).withContext("the registered-buffer table"));
  p->table_ = new (mem) Table();
  p->table_->magic = Table::kMagic;
  p->table_->commHash = commHash;
  p->table_->rank = rank;
  p->commHash_ = commHash;
  *out = std::move(p);
  return okStatus();
}

PeerBuffers::~PeerBuffers() {
  for (auto& [key, pub] : published_) gpuUnexport(pub.exp);
  for (auto& [rank, o] : owners_) sharedMemoryUnmap(o.table, sizeof(Table));
  if (table_ != nullptr) sharedMemoryDestroy(fd_, table_, sizeof(Table));
}

bool PeerBuffers::publish(const void* key, const void* buff, size_t bytes, const SharedRegistration& reg) {
  std::lock_guard<std::mutex> lock(mu_);
  int slot = 0;
  while (slot < kSharedSlots && table_->slots[slot].serial.load(std::memory_order_relaxed) != 0) ++slot;
  if (slot == kSharedSlots) return false;
  Table::Slot& s = table_->slots[slot];
  uint64_t words[kRegWords];
  std::memcpy(words, &reg, sizeof(reg));
  // A peer still reading this slot's previous registration must see the
  // serial change (0 since the withdrawal) if it sees any new word.
  std::atomic_thread_fence(std::memory_order_release);
  for (int i = 0; i < kRegWords; ++i) s.words[i].store(words[i], std::memory_order_relaxed);
  const uint64_t serial = ++nextSerial_;
  s.serial.store(serial, std::memory_order_release);
  table_->generation.fetch_add(1, std::memory_order_release);
  published_[key] = Published{slot, serial, static_cast<const char*>(buff), bytes, reg.allocBase, reg.exp};
  return true;
}

void PeerBuffers::withdraw(const void* key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = published_.find(key);
  if (it == published_.end()) return;
  table_->slots[it->second.slot].serial.store(0, std::memory_order_release);
  table_->generation.fetch_add(1, std::memory_order_release);
  gpuUnexport(it->second.exp);
  published_.erase(it);
}

char* PeerBuffers::viewOf(int peerLocal, const void* p, size_t bytes) const {
  if (peerLocal < 0 || peerLocal >= kSharedPeers) return nullptr;
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, pub] : published_) {
    if (!spanHolds(pub.buff, pub.bytes, c, bytes)) continue;
    const Table::Import& imp = table_->imports[peerLocal][pub.slot];
    if (imp.serial.load(std::memory_order_acquire) != pub.serial) return nullptr;  // not imported (yet)
    const uint64_t addr = imp.addr.load(std::memory_order_relaxed);
    return reinterpret_cast<char*>(addr + (reinterpret_cast<uint64_t>(c) - pub.allocBase));
  }
  return nullptr;
}

Status PeerBuffers::refresh(int owner, pid_t pid, int fd, int myLocal, const OpenFn& open,
                            const CloseFn& close) {
  if (myLocal < 0 || myLocal >= kSharedPeers || fd < 0) return okStatus();
  Owner& o = owners_[owner];
  if (o.table == nullptr) {
    void* mem = nullptr;
    BRAID_CHECK(sharedMemoryMapPeer(pid, fd, 0, sizeof(Table), &mem)
                    .withContext(strCat("mapping rank ", owner, "'s registered-buffer table")));
    const Table* t = static_cast<Table*>(mem);
    if (t->magic != Table::kMagic || t->commHash != commHash_ || t->rank != owner) {
      sharedMemoryUnmap(mem, sizeof(Table));
      owners_.erase(owner);
      return systemError("process ", pid, "'s memory file ", fd, " is not rank ", owner,
                         "'s registered-buffer table of this communicator (did that rank leave?)");
    }
    o.table = static_cast<Table*>(mem);
    o.myLocal = myLocal;
  }
  const uint64_t generation = o.table->generation.load(std::memory_order_acquire);
  if (generation == o.generation) return okStatus();
  bool whole = true;  // every slot read consistently
  for (int k = 0; k < kSharedSlots; ++k) {
    Table::Slot& s = o.table->slots[k];
    Imported& mine = o.slots[k];
    const uint64_t serial = s.serial.load(std::memory_order_acquire);
    if (serial == mine.serial) continue;
    Table::Import& imp = o.table->imports[myLocal][k];
    if (mine.serial != 0) {  // withdrawn, or the slot reused
      imp.serial.store(0, std::memory_order_release);
      if (mine.reg.allocBase != 0) close(mine.reg);
      mine = Imported{};
    }
    if (serial == 0) continue;
    uint64_t words[kRegWords];
    for (int i = 0; i < kRegWords; ++i) words[i] = s.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.serial.load(std::memory_order_relaxed) != serial) {
      whole = false;  // changed while read: next time
      continue;
    }
    SharedRegistration reg;
    std::memcpy(&reg, words, sizeof(reg));
    char* mapped = nullptr;
    Status st = open(reg, &mapped);
    mine.serial = serial;
    if (!st.ok()) {
      BRAID_INFO(kLogAlloc,
                 "rank %d's registered buffer (allocation %#llx, %llu bytes) stays on the FIFO: %s", owner,
                 static_cast<unsigned long long>(reg.allocBase),
                 static_cast<unsigned long long>(reg.allocBytes), st.message().c_str());
      continue;  // mine.reg stays empty: nothing to close
    }
    mine.reg = reg;
    imp.addr.store(reinterpret_cast<uint64_t>(mapped), std::memory_order_relaxed);
    imp.serial.store(serial, std::memory_order_release);
    BRAID_INFO(kLogAlloc, "rank %d's registered buffer (allocation %#llx, %llu bytes) mapped here at %p",
               owner, static_cast<unsigned long long>(reg.allocBase),
               static_cast<unsigned long long>(reg.allocBytes), static_cast<void*>(mapped));
  }
  if (whole) o.generation = generation;
  return okStatus();
}

void PeerBuffers::forgetImports() {
  for (auto& [rank, o] : owners_) {
    for (int k = 0; k < kSharedSlots; ++k) {
      if (o.slots[k].serial == 0) continue;
      o.table->imports[o.myLocal][k].serial.store(0, std::memory_order_release);
      o.slots[k] = Imported{};
    }
    o.generation = 0;
  }
}

}  // namespace braid
