#include "core/lsa_space.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/comm.h"
#include "core/dev_resources.h"
#include "platform/gpu_runtime.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {

namespace {
constexpr size_t k4G = size_t(1) << 32;
constexpr int kTableEntries = 32;  // per ncclDevCommWindowTable block

// What a rank tells the others about one window (all-gathered).
struct TeamRecord {
  GpuExport exp;           // its allocation (kDescriptor where mappable)
  uint64_t allocBase = 0;  // the allocation's address in its process
  uint64_t allocBytes = 0;
  uint64_t offset = 0;  // the window's offset in the allocation
  int32_t mappable = 0;
  int32_t ok = 0;  // second round: mapped everything
};
}  // namespace

LsaSpace::~LsaSpace() {
  (void)hipSetDevice(device_);
  (void)hipDeviceSynchronize();  // user kernels may still read what goes here
  for (auto& [win, w] : windows_) {
    gpuFlatUnmap(&w.flat);
    gpuUnexport(w.exp);
    (void)hipFree(win);
  }
  for (auto& [win, r] : devComms_) (void)gpuFreeShareable(r.memory, r.mapped);
  for (ncclDevCommWindowTable* t : tables_) (void)hipFree(t);
  if (stream_ != nullptr) (void)hipStreamDestroy(static_cast<hipStream_t>(stream_));
  (void)hipGetLastError();
}

Status LsaSpace::stream() {
  if (stream_ != nullptr) return okStatus();
  hipStream_t s = nullptr;
  BRAID_CHECK(
      gpuCheck(hipStreamCreateWithFlags(&s, hipStreamNonBlocking), "creating the device API's stream"));
  stream_ = s;
  return okStatus();
}

Status LsaSpace::upload(void* dst, const void* src, size_t bytes, const char* what) {
  BRAID_CHECK(stream());
  auto s = static_cast<hipStream_t>(stream_);
  if (src == nullptr) {
    BRAID_CHECK(gpuCheck(hipMemsetAsync(dst, 0, bytes, s), what));
  } else {
    BRAID_CHECK(gpuCheck(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, s), what));
  }
  return gpuCheck(hipStreamSynchronize(s), what);
}

Status LsaSpace::mapTeam(void* buff, size_t size, Window* w, ncclWindow_vidmem* desc, std::string* why) {
  const int n = comm_->nranks(), me = comm_->rank(), team = comm_->lsaSize();
  const int first = me - me % team;
  std::vector<TeamRecord> records(static_cast<size_t>(n));
  TeamRecord& mine = records[static_cast<size_t>(me)];
  void* base = nullptr;
  size_t allocBytes = 0;
  std::string local;
  Status s = gpuAllocationRange(buff, &base, &allocBytes);
  if (s.ok()) s = gpuExport(base, allocBytes, &w->exp);
  if (s.ok() && w->exp.kind == GpuExport::kDescriptor) {
    mine.exp = w->exp;
    mine.allocBase = reinterpret_cast<uint64_t>(base);
    mine.allocBytes = allocBytes;
    mine.offset = static_cast<uint64_t>(static_cast<char*>(buff) - static_cast<char*>(base));
    mine.mappable = 1;
  } else if (s.ok()) {
    gpuUnexport(w->exp);
    w->exp = GpuExport{};
  }
  BRAID_CHECK(
      comm_->bootstrap()->allGather(records.data(), sizeof(TeamRecord)).withContext("mapping a window"));

  // Decided alike on every rank of the team, from what all of them sent.
  size_t granularity = 0;
  s = gpuVmmGranularity(&granularity);
  if (!s.ok()) *why = s.message();
  size_t maxHead = 0, residue = 0;
  for (int i = 0; i < team && why->empty(); ++i) {
    const TeamRecord& r = records[static_cast<size_t>(first + i)];
    if (r.mappable == 0) {
      *why =
          strCat("rank ", first + i, "'s window is not in a virtual-memory allocation (ncclMemAlloc, cuMem)");
    } else if (i > 0 && r.offset % granularity != residue) {
      *why = strCat("the windows start at different offsets within their ", granularity, "-byte pages (rank ",
                    first, ": ", residue, ", rank ", first + i, ": ", r.offset % granularity, ")");
    } else {
      residue = r.offset % granularity;
      maxHead = std::max<size_t>(maxHead, r.offset - residue);
    }
  }
  size_t stride = k4G;
  std::vector<GpuFlatPart> parts;
  for (int i = 0; i < team && why->empty(); ++i) {
    const TeamRecord& r = records[static_cast<size_t>(first + i)];
    stride = std::max(stride, roundUp(maxHead - (r.offset - residue) + r.allocBytes, k4G));
  }
  for (int i = 0; i < team && why->empty(); ++i) {
    const int rank = first + i;
    const TeamRecord& r = records[static_cast<size_t>(rank)];
    GpuFlatPart part;
    if (rank == me || comm_->sameProcess(rank)) {
      part.local = reinterpret_cast<const void*>(r.allocBase);
    } else {
      part.exp = r.exp;
    }
    part.bytes = r.allocBytes;
    part.offset = static_cast<size_t>(i) * stride + maxHead - (r.offset - residue);
    parts.push_back(part);
  }
  if (why->empty()) {
    s = gpuFlatMap(parts, static_cast<size_t>(team) * stride, kGpuImportTimeoutMs, &w->flat);
    if (!s.ok()) *why = s.message();
  }
  // Flat only if every member mapped every window.
  for (TeamRecord& r : records) r.ok = 0;
  mine.ok = why->empty() ? 1 : 0;
  s = comm_->bootstrap()->allGather(records.data(), sizeof(TeamRecord)).withContext("mapping a window");
  for (int i = 0; i < team && s.ok() && why->empty(); ++i) {
    if (records[static_cast<size_t>(first + i)].ok == 0)
      *why = strCat("rank ", first + i, " could not map it");
  }
  if (!s.ok() || !why->empty()) gpuFlatUnmap(&w->flat);
  BRAID_CHECK(s);

  *desc = ncclWindow_vidmem{};
  desc->lsaFlatBase = why->empty() ? w->flat.base + maxHead + residue : nullptr;
  desc->lsaRank = me - first;
  desc->worldRank = me;
  desc->stride4G = static_cast<uint32_t>(stride / k4G);
  return okStatus();
}

Status LsaSpace::create(void* buff, size_t size, void* host, bool listed, ncclWindow_t* win,
                        ncclWindow_vidmem* desc, std::string* why) {
  Window w;
  w.host = host;
  w.buff = static_cast<const char*>(buff);
  w.size = size;
  Status s = mapTeam(buff, size, &w, desc, why);
  desc->winHost = host;
  void* dev = nullptr;
  if (s.ok()) s = gpuCheck(hipMalloc(&dev, sizeof(ncclWindow_vidmem)), "allocating a window descriptor");
  if (s.ok()) s = upload(dev, desc, sizeof(ncclWindow_vidmem), "writing a window descriptor");
  if (s.ok() && listed) s = list(w, static_cast<ncclWindow_t>(dev), &w.tableSlot);
  if (!s.ok()) {
    if (dev != nullptr) (void)hipFree(dev);
    gpuFlatUnmap(&w.flat);
    gpuUnexport(w.exp);
    return s;
  }
  *win = static_cast<ncclWindow_t>(dev);
  windows_.emplace(*win, std::move(w));
  return okStatus();
}

Status LsaSpace::windowCreate(void* buff, size_t size, void* host, ncclWindow_t* win) {
  ncclWindow_vidmem desc;
  std::string why;
  BRAID_CHECK(create(buff, size, host, /*listed=*/true, win, &desc, &why));
  if (why.empty()) {
    BRAID_INFO(kLogAlloc,
               "window %p (%zu bytes): device descriptor %p, LSA team of %d mapped at %p, %u x 4 GiB apart",
               buff, size, static_cast<void*>(*win), comm_->lsaSize(), static_cast<void*>(desc.lsaFlatBase),
               desc.stride4G);
  } else {
    BRAID_INFO(kLogAlloc,
               "window %p (%zu bytes): device descriptor %p has no flat view, so device code cannot "
               "address peers' windows (ncclGetLsaPointer): %s",
               buff, size, static_cast<void*>(*win), why.c_str());
  }
  return okStatus();
}

bool LsaSpace::hostOf(ncclWindow_t win, void** host) const {
  auto it = windows_.find(win);
  if (it == windows_.end() || it->second.tableSlot < 0) return false;
  *host = it->second.host;
  return true;
}

void LsaSpace::windowDestroy(ncclWindow_t win) {
  auto it = windows_.find(win);
  if (it == windows_.end()) return;
  (void)hipDeviceSynchronize();  // kernels may still address it
  Window& w = it->second;
  if (w.tableSlot >= 0) {
    (void)writeSlot(w.tableSlot, ncclDevCommWindowTable::Entry{});
    slotUsed_[static_cast<size_t>(w.tableSlot)] = false;
  }
  gpuFlatUnmap(&w.flat);
  gpuUnexport(w.exp);
  (void)hipFree(win);
  (void)hipGetLastError();
  windows_.erase(it);
}

// A cleared block of the window table, chained after the last one.
Status LsaSpace::addTableBlock() {
  void* p = nullptr;
  BRAID_CHECK(gpuCheck(hipMalloc(&p, sizeof(ncclDevCommWindowTable)), "allocating the window table"));
  auto* block = static_cast<ncclDevCommWindowTable*>(p);
  Status s = upload(p, nullptr, sizeof(ncclDevCommWindowTable), "clearing the window table");
  if (s.ok() && !tables_.empty())
    s = upload(&tables_.back()->next, &block, sizeof(block), "chaining the window table");
  if (!s.ok()) {
    (void)hipFree(p);
    return s;
  }
  tables_.push_back(block);
  slotUsed_.resize(slotUsed_.size() + kTableEntries, false);
  return okStatus();
}

Status LsaSpace::ensureTable() {
  return tables_.empty() ? addTableBlock() : okStatus();
}

Status LsaSpace::writeSlot(int slot, const ncclDevCommWindowTable::Entry& e) {
  ncclDevCommWindowTable* block = tables_[static_cast<size_t>(slot / kTableEntries)];
  return upload(&block->entries[slot % kTableEntries], &e, sizeof(e), "writing the window table");
}

Status LsaSpace::list(const Window& w, ncclWindow_t win, int* slot) {
  BRAID_CHECK(ensureTable());
  auto free = std::find(slotUsed_.begin(), slotUsed_.end(), false);
  if (free == slotUsed_.end()) {
    BRAID_CHECK(addTableBlock());
    free = std::find(slotUsed_.begin(), slotUsed_.end(), false);
  }
  const int i = static_cast<int>(free - slotUsed_.begin());
  BRAID_CHECK(writeSlot(i, {reinterpret_cast<uintptr_t>(w.buff), w.size, win}));
  slotUsed_[static_cast<size_t>(i)] = true;
  *slot = i;
  return okStatus();
}

Status LsaSpace::devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out) {
  const int n = comm_->nranks(), me = comm_->rank(), team = comm_->lsaSize();
  DevResourceLayout layout;
  const Status valid = layoutDevResources(reqs, team, &layout);
  // Every rank learns whether the others' requirements were accepted and
  // agree, so a bad one fails every rank instead of leaving them waiting.
  struct Agreement {
    int32_t ok;
    int32_t barriers;
    uint64_t bytes;
  };
  std::vector<Agreement> all(static_cast<size_t>(n));
  all[static_cast<size_t>(me)] = {valid.ok() ? 1 : 0, layout.lsaBarriers, layout.bytes};
  BRAID_CHECK(comm_->bootstrap()->allGather(all.data(), sizeof(Agreement)).withContext("ncclDevCommCreate"));
  BRAID_CHECK(valid);
  for (int r = 0; r < n; ++r) {
    const Agreement& a = all[static_cast<size_t>(r)];
    if (a.ok == 0)
      return invalidUsage("rank ", r, " passed requirements ncclDevCommCreate refused (its log says why)");
    if (a.bytes != layout.bytes || a.barriers != layout.lsaBarriers) {
      return invalidUsage("rank ", r, " asked for ", a.barriers, " LSA barriers and ", a.bytes,
                          " bytes of resources, rank ", me, " for ", layout.lsaBarriers, " and ",
                          layout.bytes, "; every rank must pass the same requirements");
    }
  }
  BRAID_CHECK(ensureTable());
  Resources res;
  BRAID_CHECK(gpuMallocShareable(layout.bytes, &res.memory, &res.mapped).withContext("ncclDevCommCreate"));
  Status s = upload(res.memory, nullptr, res.mapped, "clearing a device communicator's resources");
  ncclWindow_t win = nullptr;
  ncclWindow_vidmem desc{};
  std::string why;
  if (s.ok()) s = create(res.memory, res.mapped, nullptr, /*listed=*/false, &win, &desc, &why);
  if (s.ok() && !why.empty()) {
    windowDestroy(win);
    s = systemError("ncclDevCommCreate: the LSA team's resource windows could not be mapped side by side: ",
                    why);
  }
  if (!s.ok()) {
    (void)gpuFreeShareable(res.memory, res.mapped);
    return s;
  }
  devComms_.emplace(win, res);
  for (const auto& [where, handle] : layout.handles) *where = handle;
  std::memset(out, 0, sizeof(*out));
  out->rank = me;
  out->nRanks = n;
  out->nRanks_rcp32 = ncclDivisorReciprocal(static_cast<uint32_t>(n));
  out->lsaRank = me % team;
  out->lsaSize = team;
  out->lsaSize_rcp32 = ncclDivisorReciprocal(static_cast<uint32_t>(team));
  out->windowTable = tables_.front();
  out->resourceWindow = win;
  out->resourceWindow_inlined = desc;
  out->lsaBarrier = ncclLsaBarrierHandle{0, layout.lsaBarriers};
  BRAID_INFO(kLogAlloc,
             "ncclDevCommCreate: rank %d of %d, LSA team of %d, %d LSA barriers, %zu bytes of resources", me,
             n, team, layout.lsaBarriers, layout.bytes);
  return okStatus();
}

Status LsaSpace::devCommDestroy(const ncclDevComm& devComm) {
  auto it = devComms_.find(devComm.resourceWindow);
  if (it == devComms_.end()) {
    return invalidArgument(
        "argument 'devComm' is no live device communicator of this communicator "
        "(destroyed already, or made by another)");
  }
  windowDestroy(it->first);
  Status s = gpuFreeShareable(it->second.memory, it->second.mapped);
  devComms_.erase(it);
  return s;
}

}  // namespace braid
