#include "transports/shm/shm_transport.h"

#include <cstring>
#include <new>

#include "util/log.h"

namespace braid {
namespace {
constexpr uint32_t kTagName = 0x53480000u;  // + 2 * channel
constexpr uint32_t kTagMapped = 0x53480001u;
constexpr size_t kNameBytes = 64;
}  // namespace

Status shmConnectRing(bootstrap::Bootstrap* bs, int channel, size_t slotBytes, ShmLink* out) {
  int n = bs->nranks(), rank = bs->rank();
  int prev = (rank - 1 + n) % n, next = (rank + 1) % n;
  size_t bytes = ConnectorMemory::sizeFor(slotBytes);
  uint32_t tagName = kTagName + 2u * static_cast<uint32_t>(channel);
  uint32_t tagMapped = kTagMapped + 2u * static_cast<uint32_t>(channel);

  BRAID_CHECK(ShmSegment::create(bytes, &out->recvSegment));
  new (out->recvSegment.data()) ConnectorCounters();
  char name[kNameBytes] = {};
  std::strncpy(name, out->recvSegment.name().c_str(), sizeof(name) - 1);
  BRAID_CHECK(bs->send(prev, tagName, name, sizeof(name)));

  char peerName[kNameBytes] = {};
  BRAID_CHECK(bs->recv(next, tagName, peerName, sizeof(peerName)));
  peerName[kNameBytes - 1] = '\0';
  BRAID_CHECK(ShmSegment::open(peerName, bytes, &out->sendSegment).withContext(strCat("rank ", next, "'s segment")));
  uint8_t ok = 1;
  BRAID_CHECK(bs->send(next, tagMapped, &ok, 1));
  BRAID_CHECK(bs->recv(prev, tagMapped, &ok, 1));
  out->recvSegment.unlink();  // both ends mapped: nothing is left to leak

  out->recv = Connector::over(out->recvSegment.data(), slotBytes);
  out->send = Connector::over(out->sendSegment.data(), slotBytes);
  BRAID_INFO(kLogShm, "channel %d: ring %d -> %d -> %d over shared memory (%zu-byte slots)", channel, prev, rank,
             next, slotBytes);
  return okStatus();
}

}  // namespace braid
