#include "transports/shm/shm_transport.h"

#include <cstring>
#include <new>

#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {
BoolParam paramShmNamed(
    "SHM_NAMED", false,
    "Share connector memory with the processes of this host by a /dev/shm name, removed once "
    "the peer has mapped it, instead of an unnamed file the peer opens through /proc/<pid>/fd "
    "(the default where peers share a PID namespace). A process killed during connection "
    "setup can then leave the name behind; for hosts where /proc/<pid>/fd of a peer of the "
    "same user cannot be opened.");
constexpr size_t kNameBytes = 64;
// Sub-tags of one connector's setup messages.
constexpr uint32_t kName = 0, kMapped = 1;
}  // namespace

Status shmPostRecv(bootstrap::Bootstrap* bs, int peer, uint32_t tag, size_t slotBytes, bool peerInProcess,
                   bool peerSeesOurPid, ShmEnd* out) {
  const ShmShare how = peerInProcess                            ? ShmShare::ProcessLocal
                       : peerSeesOurPid && !paramShmNamed.get() ? ShmShare::Descriptor
                                                                : ShmShare::Name;
  BRAID_CHECK(ShmSegment::create(ConnectorMemory::sizeFor(slotBytes), how, &out->segment));
  new (out->segment.data()) ConnectorCounters();
  out->conn = Connector::over(out->segment.data(), slotBytes);
  char name[kNameBytes] = {};
  std::strncpy(name, out->segment.name().c_str(), sizeof(name) - 1);
  return bs->send(peer, tag + kName, name, sizeof(name));
}

Status shmOpenSend(bootstrap::Bootstrap* bs, int peer, uint32_t tag, size_t slotBytes, ShmEnd* out) {
  char name[kNameBytes] = {};
  BRAID_CHECK(bs->recv(peer, tag + kName, name, sizeof(name)));
  name[kNameBytes - 1] = '\0';
  BRAID_CHECK(ShmSegment::open(name, ConnectorMemory::sizeFor(slotBytes), &out->segment)
                  .withContext(strCat("rank ", peer, "'s segment")));
  out->conn = Connector::over(out->segment.data(), slotBytes);
  uint8_t ok = 1;
  return bs->send(peer, tag + kMapped, &ok, 1);
}

Status shmFinishRecv(bootstrap::Bootstrap* bs, int peer, uint32_t tag, ShmEnd* io) {
  uint8_t ok = 0;
  BRAID_CHECK(bs->recv(peer, tag + kMapped, &ok, 1));
  io->segment.withdraw();  // both ends mapped: nothing is left to leak
  return okStatus();
}

}  // namespace braid
