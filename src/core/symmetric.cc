#include "core/symmetric.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "core/comm.h"
#include "core/gpu_engine.h"
#include "core/memory.h"
#include "platform/shared_memory.h"
#include "tuning/tuning.h"
#include "util/log.h"

namespace braid {

// What each rank tells the others about one window (all-gathered).
struct WindowRecord {
  int32_t fd = -1;         // memory file of the allocation holding the buffer; -1: none
  int32_t slotFd = -1;     // memory file of the rank's slots
  uint64_t buff = 0;       // the buffer's address in its process
  uint64_t mapOffset = 0;  // page-aligned offset of the buffer's first page in the file
  uint64_t mapBytes = 0;   // whole pages holding the buffer
  uint64_t slots = 0;      // the slots' address in its process
};

namespace {
constexpr size_t kSlotBytes = sizeof(SymSlot) * kMaxChannels;

// The slot pages of this process's communicators by address, so that a
// peer in the same process can hold one (SymmetricWindows::peerPages_).
std::mutex gPagesMutex;
std::map<const void*, std::weak_ptr<SlotPage>>& pages() {
  static auto* map = new std::map<const void*, std::weak_ptr<SlotPage>>();
  return *map;
}
}  // namespace

struct SlotPage {
  int fd = -1;
  void* memory = nullptr;
  ~SlotPage() {
    {
      std::lock_guard<std::mutex> lock(gPagesMutex);
      auto it = pages().find(memory);
      if (it != pages().end() && it->second.expired()) pages().erase(it);
    }
    sharedMemoryDestroy(fd, memory, kSlotBytes);
  }
};

SymmetricWindows::~SymmetricWindows() {
  for (Window& w : windows_) {
    for (const Mapping& m : w.mappings) sharedMemoryUnmap(m.addr, m.bytes);
  }
  for (const Mapping& m : slotMappings_) sharedMemoryUnmap(m.addr, m.bytes);
}

Status SymmetricWindows::mapSlots(Communicator& comm, const std::vector<WindowRecord>& records) {
  if (!slots_.empty()) return okStatus();
  std::vector<std::vector<SymSlot*>> slots(kMaxChannels, std::vector<SymSlot*>(records.size()));
  for (size_t r = 0; r < records.size(); ++r) {
    void* base = reinterpret_cast<void*>(records[r].slots);
    if (static_cast<int>(r) != comm.rank() && comm.sameProcess(static_cast<int>(r))) {
      std::lock_guard<std::mutex> lock(gPagesMutex);
      auto it = pages().find(base);
      std::shared_ptr<SlotPage> page = it == pages().end() ? nullptr : it->second.lock();
      if (page == nullptr) return internalError("rank ", r, "'s zero-copy slots are gone from this process");
      peerPages_.push_back(std::move(page));
    } else if (static_cast<int>(r) != comm.rank()) {
      BRAID_CHECK(sharedMemoryMapPeer(comm.peers()[r].pid, records[r].slotFd, 0, kSlotBytes, &base));
      slotMappings_.push_back({base, kSlotBytes});
    }
    for (int c = 0; c < kMaxChannels; ++c) slots[static_cast<size_t>(c)][r] = static_cast<SymSlot*>(base) + c;
  }
  slots_ = std::move(slots);
  return okStatus();
}

Status SymmetricWindows::add(Communicator& comm, void* handle, void* buff, size_t size) {
  const uint64_t number = ++registered_;
  const int n = comm.nranks(), me = comm.rank();
  const bool gpu = comm.backend() == Backend::Gpu;
  // Decided alike on every rank, without an exchange.
  if (n == 1 || n > (gpu ? kMaxGpuSymRanks : kMaxSymRanks) || comm.nnodes() > 1) {
    BRAID_INFO(kLogAlloc, "window %llu: not zero-copy (%s)", static_cast<unsigned long long>(number),
               n == 1              ? "one rank"
               : comm.nnodes() > 1 ? "ranks on several hosts"
                                   : "too many ranks");
    return okStatus();
  }
  Window w{
      number, handle, static_cast<const char*>(buff), size, std::vector<char*>(static_cast<size_t>(n)), {},
      {},     gpu};
  std::string why;
  GpuEngine* engine = nullptr;
  if (gpu) {
    BRAID_CHECK(comm.gpuEngine(&engine));
    BRAID_CHECK(engine->mapWindow(number, buff, size, &w.bases, &why));
  } else {
    BRAID_CHECK(mapHostWindow(comm, buff, size, &w, &why));
  }
  auto release = [&] {
    for (const Mapping& m : w.mappings) sharedMemoryUnmap(m.addr, m.bytes);
    if (engine != nullptr) engine->unmapWindow(number);
  };
  // Zero-copy only if every rank mapped everything.
  std::vector<int32_t> ok(static_cast<size_t>(n));
  ok[static_cast<size_t>(me)] = why.empty() ? 1 : 0;
  Status s = comm.bootstrap()->allGather(ok.data(), sizeof(int32_t)).withContext("ncclCommWindowRegister");
  const bool all = s.ok() && std::all_of(ok.begin(), ok.end(), [](int32_t v) { return v == 1; });
  if (!all) {
    release();
    BRAID_CHECK(s);
    if (why.empty()) {
      for (int r = 0; r < n && why.empty(); ++r) {
        if (ok[static_cast<size_t>(r)] == 0) why = strCat("rank ", r, " could not map every peer's buffer");
      }
    }
    BRAID_INFO(kLogAlloc, "window %llu (%p, %zu bytes): not zero-copy: %s",
               static_cast<unsigned long long>(number), buff, size, why.c_str());
    return okStatus();
  }
  // Where every rank mapped this rank's buffer, so that it can hand a peer
  // an address the peer's process may use (direct writes).
  std::vector<uint64_t> where(static_cast<size_t>(n) * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    where[static_cast<size_t>(me * n + r)] = reinterpret_cast<uint64_t>(w.bases[static_cast<size_t>(r)]);
  s = comm.bootstrap()
          ->allGather(where.data(), sizeof(uint64_t) * static_cast<size_t>(n))
          .withContext("ncclCommWindowRegister");
  if (!s.ok()) {
    release();
    return s;
  }
  w.views.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    w.views[static_cast<size_t>(r)] = reinterpret_cast<char*>(where[static_cast<size_t>(r * n + me)]);
  BRAID_INFO(kLogAlloc, "window %llu (%p, %zu bytes): zero-copy, mapped from all %d ranks%s",
             static_cast<unsigned long long>(number), buff, size, n, gpu ? " into this GPU" : "");
  std::lock_guard<std::mutex> lock(mu_);
  windows_.push_back(std::move(w));
  zeroCopy_.store(static_cast<int>(windows_.size()), std::memory_order_relaxed);
  return okStatus();
}

Status SymmetricWindows::mapHostWindow(Communicator& comm, void* buff, size_t size, Window* w,
                                       std::string* why) {
  const int n = comm.nranks(), me = comm.rank();
  if (slotPage_ == nullptr) {
    auto page = std::make_shared<SlotPage>();
    BRAID_CHECK(sharedMemoryCreate(kSlotBytes, &page->fd, &page->memory));
    for (int c = 0; c < kMaxChannels; ++c) new (static_cast<SymSlot*>(page->memory) + c) SymSlot();
    std::lock_guard<std::mutex> lock(gPagesMutex);
    pages()[page->memory] = page;
    slotPage_ = std::move(page);
  }
  std::vector<WindowRecord> records(static_cast<size_t>(n));
  WindowRecord& mine = records[static_cast<size_t>(me)];
  mine.slotFd = slotPage_->fd;
  mine.slots = reinterpret_cast<uint64_t>(slotPage_->memory);
  mine.buff = reinterpret_cast<uint64_t>(buff);
  SharedAllocation alloc;
  if (findSharedAllocation(buff, size, &alloc)) {
    const size_t offset = static_cast<size_t>(static_cast<char*>(buff) - static_cast<char*>(alloc.base));
    mine.fd = alloc.fd;
    mine.mapOffset = offset / pageBytes() * pageBytes();
    mine.mapBytes = (offset - mine.mapOffset + size + pageBytes() - 1) / pageBytes() * pageBytes();
  }
  BRAID_CHECK(comm.bootstrap()
                  ->allGather(records.data(), sizeof(WindowRecord))
                  .withContext("ncclCommWindowRegister"));
  for (int r = 0; r < n && why->empty(); ++r) {
    const WindowRecord& rec = records[static_cast<size_t>(r)];
    if (r == me || comm.sameProcess(r)) {
      w->bases[static_cast<size_t>(r)] = reinterpret_cast<char*>(rec.buff);
      continue;
    }
    if (rec.fd < 0) {
      *why = strCat("rank ", r, "'s buffer is not memory from ncclMemAlloc");
      continue;
    }
    void* addr = nullptr;
    Status s = sharedMemoryMapPeer(comm.peers()[static_cast<size_t>(r)].pid, rec.fd, rec.mapOffset,
                                   rec.mapBytes, &addr);
    if (!s.ok()) {
      *why = s.message();
      continue;
    }
    w->mappings.push_back({addr, rec.mapBytes});
    w->bases[static_cast<size_t>(r)] = static_cast<char*>(addr) + (rec.buff % pageBytes());
  }
  if (why->empty()) {
    Status s = mapSlots(comm, records);
    if (!s.ok()) *why = s.message();
  }
  return okStatus();
}

void SymmetricWindows::remove(Communicator& comm, void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it =
      std::find_if(windows_.begin(), windows_.end(), [&](const Window& w) { return w.handle == handle; });
  if (it == windows_.end()) return;
  for (const Mapping& m : it->mappings) sharedMemoryUnmap(m.addr, m.bytes);
  GpuEngine* engine = nullptr;
  if (it->gpu && comm.gpuEngine(&engine).ok()) engine->unmapWindow(it->number);
  windows_.erase(it);
  zeroCopy_.store(static_cast<int>(windows_.size()), std::memory_order_relaxed);
}

const SymmetricWindows::Window* SymmetricWindows::holding(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  for (const Window& w : windows_) {
    if (spanHolds(w.buff, w.size, c, bytes)) return &w;
  }
  return nullptr;
}

bool SymmetricWindows::find(const void* p, size_t bytes, uint64_t* window, uint64_t* offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Window* w = holding(p, bytes);
  if (w == nullptr) return false;
  *window = w->number;
  *offset = static_cast<uint64_t>(static_cast<const char*>(p) - w->buff);
  return true;
}

char* SymmetricWindows::peerView(int peer, const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Window* w = holding(p, bytes);
  return w == nullptr ? nullptr
                      : w->views[static_cast<size_t>(peer)] + (static_cast<const char*>(p) - w->buff);
}

char* SymmetricWindows::base(int rank, uint64_t window) const {
  // Called while the collective runs; the window cannot go away then.
  std::lock_guard<std::mutex> lock(mu_);
  for (const Window& w : windows_) {
    if (w.number == window) return w.bases[static_cast<size_t>(rank)];
  }
  return nullptr;
}

bool SymmetricWindows::bases(uint64_t window, char** out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Window& w : windows_) {
    if (w.number != window) continue;
    std::copy(w.bases.begin(), w.bases.end(), out);
    return true;
  }
  return false;
}

}  // namespace braid
