// A communicator's channels: the connectors one collective's share runs
// over (DESIGN.md §3). Channel c follows the communicator's schedule
// (topology/search.h, commSchedule): its ring (each node's ranks
// contiguous) and, once a tree algorithm ran, its tree links (tree c % 2 of
// the double binary tree over the ring's chains) with an up and a down
// connector per tree neighbour. Connectors are set up
// on first use, which every rank reaches in the same collective, so all
// ranks connect the same channels together. Each channel also counts the
// collectives issued to it and completed, so a stuck rank can be found.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "core/connectors.h"
#include "topology/search.h"
#include "topology/trees.h"
#include "tuning/tuning.h"

namespace braid {

struct TreeConnectors {
  TreeLinks links;
  std::unique_ptr<ConnectorEnd> upSend, downRecv;                                      // with the parent
  std::unique_ptr<ConnectorEnd> upRecv[kMaxTreeChildren], downSend[kMaxTreeChildren];  // with each child
};

struct RingLink {
  std::unique_ptr<ConnectorEnd> recv;  // the previous rank writes here
  std::unique_ptr<ConnectorEnd> send;  // we write into the next rank's
  int prev = -1, next = -1;            // ranks
  int position = 0;                    // this rank's place in the ring
  std::vector<int> rankAt;             // rank at each ring position
  int positionOf(int rank) const;
};

struct Channel {
  int id = 0;
  std::unique_ptr<RingLink> ring;
  std::unique_ptr<TreeConnectors> tree;
  std::atomic<uint64_t> issued{0}, completed{0};
};

// " send to rank 3 [tail 17 head 17]": one connector's FIFO state for
// stall dumps ("" for a missing end).
std::string fifoState(const char* dir, int peer, const ConnectorEnd* end);

class ChannelSet {
 public:
  // `schedule`: rings and trees over ranks (channel c uses entry c modulo
  // its channel count); `factory` picks each peer's transport (shm on this
  // host, net across).
  ChannelSet(bootstrap::Bootstrap* bs, Schedule schedule, ConnectorFactory* factory, size_t slotBytes)
      : bs_(bs), schedule_(std::move(schedule)), factory_(factory), slotBytes_(slotBytes) {}

  // Connects what `algo` needs on channels 0..n-1 (collective: every rank
  // calls it with the same arguments). Direct needs only the channels'
  // counters (it runs over the point-to-point connectors).
  Status ensure(Algo algo, int n);
  Channel& operator[](int c) { return *channels_[static_cast<size_t>(c)]; }
  int connected() const { return static_cast<int>(channels_.size()); }

  // Every channel's counters and FIFO state, one log line per connector (WARN).
  void dump(int stalledChannel) const;

 private:
  Status connectRing(Channel* ch);
  Status connectTree(Channel* ch);

  bootstrap::Bootstrap* bs_;
  Schedule schedule_;
  ConnectorFactory* factory_;
  size_t slotBytes_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

}  // namespace braid
