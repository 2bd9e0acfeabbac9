#include "transports/p2p/p2p_transport.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>

#include "platform/gpu_runtime.h"
#include "platform/shared_memory.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid {
namespace {

constexpr uint64_t kHandleMagic = 0x4252414944503250ull;  // "BRAIDP2P"

// What one end tells the other about its block.
struct Handle {
  uint64_t magic = kHandleMagic;
  int32_t pid = 0;
  int32_t onHost = 0;    // host memory both GPUs map (no peer access, or NCCL_P2P_DISABLE)
  int32_t read = 0;      // read mode: the Simple slots are in the sender's block
  uint64_t pointer = 0;  // valid in this process (in-process peers)
  uint64_t bytes = 0;
  int32_t fd = -1;  // host memory for another process: the memory file it opens
  hipIpcMemHandle_t ipc;
};

uint32_t handleTag(uint32_t tag, bool fromSender) { return tag + (fromSender ? 1u : 0u); }

size_t roundToPages(size_t bytes) {
  return (bytes + pageBytes() - 1) / pageBytes() * pageBytes();
}

// The GPU's view of host memory registered or allocated mapped.
Status devicePointer(void* host, char** out) {
  void* d = nullptr;
  BRAID_CHECK(gpuCheck(hipHostGetDevicePointer(&d, host, 0), "finding the GPU's view of a host connector"));
  *out = static_cast<char*>(d);
  return okStatus();
}

}  // namespace

bool p2pEnablePeerAccess(int device, int peer) {
  if (device == peer) return true;
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard<std::mutex> lock(mutex);
  if (enabled.count({device, peer}) != 0) return true;
  int can = 0;
  if (hipDeviceCanAccessPeer(&can, device, peer) != hipSuccess || can == 0) return false;
  int saved = -1;
  (void)hipGetDevice(&saved);
  (void)hipSetDevice(device);
  hipError_t e = hipDeviceEnablePeerAccess(peer, 0);
  if (e != hipSuccess) (void)hipGetLastError();  // "already enabled" is fine
  (void)hipSetDevice(saved);
  enabled.insert({device, peer});
  return true;
}

P2pEnd::~P2pEnd() {
  if (opened_ != nullptr) (void)hipIpcCloseMemHandle(opened_);
  if (peerShared_ != nullptr) {
    if (peerPinned_) (void)hipHostUnregister(peerShared_);
    sharedMemoryUnmap(peerShared_, peerSharedBytes_);
  }
  if (local_ != nullptr && localFd_ >= 0) {
    if (localPinned_) (void)hipHostUnregister(local_);
    sharedMemoryDestroy(localFd_, local_, localBytes_);
  } else if (local_ != nullptr) {
    (void)(localOnHost_ ? hipHostFree(local_) : hipFree(local_));
  }
}

Status P2pEnd::allocate(size_t bytes, bool onHost, bool shared, void* setupStream) {
  localOnHost_ = onHost;
  localBytes_ = bytes;
  void* p = nullptr;
  if (!onHost) {
    BRAID_CHECK(gpuCheck(hipMalloc(&p, bytes), "allocating a connector block"));
    local_ = localDev_ = static_cast<char*>(p);
    return gpuCheck(hipMemsetAsync(p, 0, bytes, static_cast<hipStream_t>(setupStream)),
                    "zeroing a connector block");
  }
  if (!shared) {  // a thread of this process maps it too
    BRAID_CHECK(gpuCheck(hipHostMalloc(&p, bytes, hipHostMallocMapped | hipHostMallocPortable),
                         "allocating a pinned host connector block"));
    std::memset(p, 0, bytes);
    local_ = static_cast<char*>(p);
    return devicePointer(p, &localDev_);
  }
  // Another process maps it: a memory file (zeroed), pinned for every GPU.
  localBytes_ = roundToPages(bytes);
  int fd = -1;
  BRAID_CHECK(sharedMemoryCreate(localBytes_, &fd, &p));
  localFd_ = fd;
  local_ = static_cast<char*>(p);
  BRAID_CHECK(gpuCheck(hipHostRegister(p, localBytes_, hipHostRegisterMapped | hipHostRegisterPortable),
                       "pinning a shared host connector block"));
  localPinned_ = true;
  return devicePointer(p, &localDev_);
}

Status P2pEnd::mapPeerShared(int pid, int fd, size_t bytes, char** out) {
  const size_t whole = roundToPages(bytes);
  void* p = nullptr;
  BRAID_CHECK(sharedMemoryMapPeer(static_cast<pid_t>(pid), fd, 0, whole, &p));
  peerShared_ = static_cast<char*>(p);
  peerSharedBytes_ = whole;
  BRAID_CHECK(gpuCheck(hipHostRegister(p, whole, hipHostRegisterMapped | hipHostRegisterPortable),
                       "pinning a peer's shared host connector block"));
  peerPinned_ = true;
  return devicePointer(p, out);
}

Status p2pConnect(bootstrap::Bootstrap* bs, int device, void* setupStream, size_t slotBytes,
                  const std::vector<P2pRequest>& reqs) {
  BRAID_CHECK(gpuCheck(hipSetDevice(device), "selecting the GPU"));
  hipStream_t setup = static_cast<hipStream_t>(setupStream);
  // 1. Allocate, zero and post every block.
  for (const P2pRequest& r : reqs) {
    P2pEnd* e = r.end;
    const size_t bytes = r.send ? DevConnLayout::sendBytes(slotBytes, r.read)
                                : DevConnLayout::recvBytes(slotBytes, r.ll128, r.read);
    // Can the peer's GPU reach memory on ours? (Asked from the peer's side:
    // the answer need not be symmetric.) Unknown devices try IPC.
    // Host memory when asked (NCCL_P2P_DISABLE on either rank) or when it cannot.
    bool direct = false;
    if (!r.throughHost) {
      int can = 0;
      direct = r.peerDevice < 0 || r.peerDevice == device ||
               (hipDeviceCanAccessPeer(&can, r.peerDevice, device) == hipSuccess && can != 0);
      if (direct && r.peerInProcess && r.peerDevice >= 0) direct = p2pEnablePeerAccess(r.peerDevice, device);
    }
    BRAID_CHECK(e->allocate(bytes, !direct, !r.peerInProcess, setup)
                    .withContext(strCat("connector ", r.send ? "to" : "from", " rank ", r.peer)));
    Handle h;
    h.pid = static_cast<int32_t>(getpid());
    h.onHost = direct ? 0 : 1;
    h.read = r.read ? 1 : 0;
    h.pointer = reinterpret_cast<uint64_t>(e->local_);
    h.bytes = bytes;
    h.fd = e->localFd_;
    std::memset(&h.ipc, 0, sizeof(h.ipc));
    if (direct && !r.peerInProcess) {
      BRAID_CHECK(gpuCheck(hipIpcGetMemHandle(&h.ipc, e->local_), "making an IPC handle"));
    }
    BRAID_CHECK(bs->send(r.peer, handleTag(r.tag, r.send), &h, sizeof(h)));
  }
  BRAID_CHECK(gpuCheck(hipStreamSynchronize(setup), "zeroing connector blocks"));
  // 2. Receive and map the peers' blocks.
  for (const P2pRequest& r : reqs) {
    Handle h;
    BRAID_CHECK(bs->recv(r.peer, handleTag(r.tag, !r.send), &h, sizeof(h)));
    const size_t want = r.send ? DevConnLayout::recvBytes(slotBytes, r.ll128, r.read)
                               : DevConnLayout::sendBytes(slotBytes, r.read);
    if (h.magic == kHandleMagic && h.read != (r.read ? 1 : 0)) {
      return internalError("rank ", r.peer, " placed a connector's Simple slots in the ",
                           h.read != 0 ? "sender's" : "receiver's", " memory and this rank in the ",
                           r.read ? "sender's" : "receiver's",
                           " (do both ranks set NCCL_P2P_READ_ENABLE alike?)");
    }
    if (h.magic != kHandleMagic || h.bytes != want) {
      return internalError("rank ", r.peer, " sent a malformed connector handle (", h.bytes, " bytes where ",
                           want, " were expected: do both ranks use the same BRAID_BUFFSIZE?)");
    }
    char* peer = nullptr;
    if (h.onHost != 0 && !r.peerInProcess) {
      BRAID_CHECK(r.end->mapPeerShared(h.pid, h.fd, h.bytes, &peer)
                      .withContext(strCat("mapping rank ", r.peer, "'s connector in host memory")));
    } else if (h.onHost != 0) {
      BRAID_CHECK(devicePointer(reinterpret_cast<void*>(h.pointer), &peer));
    } else if (r.peerInProcess) {
      peer = reinterpret_cast<char*>(h.pointer);
    } else {
      void* opened = nullptr;
      BRAID_CHECK(gpuCheck(hipIpcOpenMemHandle(&opened, h.ipc, hipIpcMemLazyEnablePeerAccess),
                           strCat("opening rank ", r.peer, "'s connector memory (IPC)").c_str()));
      r.end->opened_ = opened;
      peer = static_cast<char*>(opened);
    }
    char* local = r.end->localDev_;
    DevConn& c = r.end->conn;
    char* recvBlock = r.send ? peer : local;
    char* sendBlock = r.send ? local : peer;
    c.simple = (r.read ? sendBlock : recvBlock) + DevConnLayout::simpleOffset();
    c.ll = recvBlock + DevConnLayout::llOffset(slotBytes, r.read);
    c.ll128 = r.ll128 ? recvBlock + DevConnLayout::ll128Offset(slotBytes, r.read) : nullptr;
    c.tail = reinterpret_cast<uint64_t*>(recvBlock + DevConnLayout::kCounter);
    c.head = reinterpret_cast<uint64_t*>(sendBlock + DevConnLayout::kCounter);
    c.step = reinterpret_cast<uint64_t*>(local + DevConnLayout::kStep);
    c.slotBytes = slotBytes;
    c.sizes = reinterpret_cast<uint64_t*>(recvBlock + DevConnLayout::kSizes);
    // Direct writes into the receiver's buffer: peers whose blocks are both
    // GPU memory (each GPU reaches the other's; another process's buffers
    // only where they are mapped, which the receiver tells with each post).
    // Both ends see the same two blocks, so they agree.
    const bool writesDirect = h.onHost == 0 && !r.end->localOnHost_;
    c.box = writesDirect ? reinterpret_cast<uint64_t*>(sendBlock + DevConnLayout::kBox) : nullptr;
    BRAID_TRACE(kLogP2p, "%s rank %d tag %#x: %s%s%s", r.send ? "send to" : "recv from", r.peer, r.tag,
                h.onHost || r.end->localOnHost_ ? "host memory"
                : r.peerInProcess               ? "direct pointer"
                                                : "IPC",
                writesDirect ? ", direct writes" : "", r.read ? ", read mode" : "");
  }
  return okStatus();
}

}  // namespace braid
