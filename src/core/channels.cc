#include "core/channels.h"

#include "util/log.h"
#include "util/strings.h"

namespace braid {
namespace {

uint32_t treeTag(int channel, bool up) {
  return 0x54480000u + 4u * static_cast<uint32_t>(channel) + (up ? 0u : 2u);
}

}  // namespace

std::string fifoState(const char* dir, int peer, const ShmEnd* end) {
  if (end == nullptr) return "";
  const ConnectorCounters* c = end->conn.counters;
  return strCat(" ", dir, " rank ", peer, " [tail ", c->tail.load(), " head ", c->head.load(), "]");
}

Status ChannelSet::ensure(Algo algo, int n) {
  while (connected() < n) {
    auto ch = std::make_unique<Channel>();
    ch->id = connected();
    channels_.push_back(std::move(ch));
  }
  for (int c = 0; c < n; ++c) {
    Channel& ch = *channels_[static_cast<size_t>(c)];
    if (algo == Algo::Ring && !ch.ring) {
      auto link = std::make_unique<ShmLink>();
      const int prev = (bs_->rank() - 1 + bs_->nranks()) % bs_->nranks();
      BRAID_CHECK(shmConnectRing(bs_, c, slotBytes_, inProcess_[static_cast<size_t>(prev)], link.get()));
      ch.ring = std::move(link);
    }
    if (algo == Algo::Tree && !ch.tree) BRAID_CHECK(connectTree(&ch));
  }
  return okStatus();
}

Status ChannelSet::connectTree(Channel* ch) {
  auto t = std::make_unique<TreeConnectors>();
  t->links = buildDoubleTree(nodeOf_, bs_->rank())[static_cast<size_t>(ch->id % 2)];
  const TreeLinks& l = t->links;
  const uint32_t up = treeTag(ch->id, true), down = treeTag(ch->id, false);
  // The transport's three steps over every connector (shm_transport.h).
  for (int i = 0; i < l.ndown; ++i) {
    t->upRecv[i] = std::make_unique<ShmEnd>();
    BRAID_CHECK(shmPostRecv(bs_, l.down[i], up, slotBytes_, inProcess_[static_cast<size_t>(l.down[i])],
                            t->upRecv[i].get()));
  }
  if (l.up >= 0) {
    t->downRecv = std::make_unique<ShmEnd>();
    BRAID_CHECK(
        shmPostRecv(bs_, l.up, down, slotBytes_, inProcess_[static_cast<size_t>(l.up)], t->downRecv.get()));
    t->upSend = std::make_unique<ShmEnd>();
    BRAID_CHECK(shmOpenSend(bs_, l.up, up, slotBytes_, t->upSend.get()));
  }
  for (int i = 0; i < l.ndown; ++i) {
    t->downSend[i] = std::make_unique<ShmEnd>();
    BRAID_CHECK(shmOpenSend(bs_, l.down[i], down, slotBytes_, t->downSend[i].get()));
  }
  for (int i = 0; i < l.ndown; ++i) BRAID_CHECK(shmFinishRecv(bs_, l.down[i], up, t->upRecv[i].get()));
  if (l.up >= 0) BRAID_CHECK(shmFinishRecv(bs_, l.up, down, t->downRecv.get()));
  std::string children;
  for (int i = 0; i < l.ndown; ++i) children += strCat(i ? "," : "", l.down[i]);
  BRAID_INFO(kLogShm, "channel %d: tree %d, up %d, down %s, over shared memory", ch->id, ch->id % 2, l.up,
             children.empty() ? "-" : children.c_str());
  ch->tree = std::move(t);
  return okStatus();
}

void ChannelSet::dump(int stalledChannel) const {
  const int rank = bs_->rank(), n = bs_->nranks();
  for (const auto& chp : channels_) {
    const Channel& ch = *chp;
    std::string line =
        strCat("channel ", ch.id, ch.id == stalledChannel ? " (stalled)" : "", ": collectives issued ",
               ch.issued.load(), " completed ", ch.completed.load(), ";");
    if (ch.ring) {
      line += strCat(" ring", fifoState("send to", (rank + 1) % n, &ch.ring->send),
                     fifoState("recv from", (rank - 1 + n) % n, &ch.ring->recv), ";");
    }
    if (ch.tree) {
      const TreeLinks& l = ch.tree->links;
      line += " tree";
      line += fifoState("up-send to", l.up, ch.tree->upSend.get()) +
              fifoState("down-recv from", l.up, ch.tree->downRecv.get());
      for (int i = 0; i < l.ndown; ++i) {
        line += fifoState("up-recv from", l.down[i], ch.tree->upRecv[i].get()) +
                fifoState("down-send to", l.down[i], ch.tree->downSend[i].get());
      }
    }
    BRAID_WARN("%s", line.c_str());
  }
}

}  // namespace braid
