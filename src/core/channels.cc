#include "core/channels.h"

#include "util/log.h"
#include "util/strings.h"

namespace braid {
namespace {

uint32_t treeTag(int channel, bool up) {
  return 0x54480000u + 4u * static_cast<uint32_t>(channel) + (up ? 0u : 2u);
}
uint32_t ringTag(int channel) { return 0x53480000u + 4u * static_cast<uint32_t>(channel); }

}  // namespace

std::string fifoState(const char* dir, int peer, const ConnectorEnd* end) {
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
    if (algo == Algo::Ring && !ch.ring) BRAID_CHECK(connectRing(&ch));
    if (algo == Algo::Tree && !ch.tree) {
      BRAID_CHECK(connectTree(&ch).withContext(strCat("channel ", c, ": connecting the tree")));
    }
  }
  return okStatus();
}

int RingLink::positionOf(int rank) const {
  for (size_t i = 0; i < rankAt.size(); ++i) {
    if (rankAt[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

Status ChannelSet::connectRing(Channel* ch) {
  const int rank = bs_->rank();
  auto link = std::make_unique<RingLink>();
  link->rankAt = schedule_.rings[static_cast<size_t>(ch->id % schedule_.nChannels())];
  const int n = static_cast<int>(link->rankAt.size());
  link->position = link->positionOf(rank);
  if (n != bs_->nranks() || link->position < 0) {
    return internalError("channel ", ch->id, ": the schedule's ring has ", n, " ranks of ", bs_->nranks(),
                         link->position < 0 ? " and misses this rank" : "");
  }
  const int prev = link->rankAt[static_cast<size_t>((link->position - 1 + n) % n)];
  const int next = link->rankAt[static_cast<size_t>((link->position + 1) % n)];
  link->prev = prev;
  link->next = next;
  const uint32_t tag = ringTag(ch->id);
  // The transports' three steps (core/connectors.h).
  const std::string from = strCat("channel ", ch->id, ": connecting the ring from rank ", prev);
  const std::string to = strCat("channel ", ch->id, ": connecting the ring to rank ", next);
  BRAID_CHECK(factory_->postRecv(prev, tag, slotBytes_, &link->recv).withContext(from));
  BRAID_CHECK(factory_->openSend(next, tag, slotBytes_, &link->send).withContext(to));
  BRAID_CHECK(factory_->finishRecv(prev, tag, link->recv.get()).withContext(from));
  BRAID_INFO(factory_->usesNet(prev) || factory_->usesNet(next) ? kLogNet : kLogShm,
             "channel %d: ring %d -> %d -> %d, from %d over %s, to %d over %s (%zu-byte slots)", ch->id, prev, rank,
             next, prev, factory_->transportName(prev), next, factory_->transportName(next), slotBytes_);
  ch->ring = std::move(link);
  return okStatus();
}

Status ChannelSet::connectTree(Channel* ch) {
  auto t = std::make_unique<TreeConnectors>();
  const TreeNodeLinks& mine =
      schedule_.trees[static_cast<size_t>(ch->id % schedule_.nChannels())][static_cast<size_t>(bs_->rank())];
  if (mine.children.size() > kMaxTreeChildren) {
    return internalError("channel ", ch->id, ": the schedule's tree gives rank ", bs_->rank(), " ",
                         mine.children.size(), " children (at most ", kMaxTreeChildren, ")");
  }
  t->links.up = mine.parent;
  t->links.ndown = static_cast<int>(mine.children.size());
  for (int i = 0; i < t->links.ndown; ++i) t->links.down[i] = mine.children[static_cast<size_t>(i)];
  const TreeLinks& l = t->links;
  const uint32_t up = treeTag(ch->id, true), down = treeTag(ch->id, false);
  // The transport's three steps over every connector (shm_transport.h).
  for (int i = 0; i < l.ndown; ++i) BRAID_CHECK(factory_->postRecv(l.down[i], up, slotBytes_, &t->upRecv[i]));
  if (l.up >= 0) {
    BRAID_CHECK(factory_->postRecv(l.up, down, slotBytes_, &t->downRecv));
    BRAID_CHECK(factory_->openSend(l.up, up, slotBytes_, &t->upSend));
  }
  for (int i = 0; i < l.ndown; ++i) BRAID_CHECK(factory_->openSend(l.down[i], down, slotBytes_, &t->downSend[i]));
  for (int i = 0; i < l.ndown; ++i) BRAID_CHECK(factory_->finishRecv(l.down[i], up, t->upRecv[i].get()));
  if (l.up >= 0) BRAID_CHECK(factory_->finishRecv(l.up, down, t->downRecv.get()));
  std::string children;
  bool net = l.up >= 0 && factory_->usesNet(l.up);
  for (int i = 0; i < l.ndown; ++i) {
    children += strCat(i ? "," : "", l.down[i], " (", factory_->transportName(l.down[i]), ")");
    net |= factory_->usesNet(l.down[i]);
  }
  BRAID_INFO(net ? kLogNet : kLogShm, "channel %d: tree %d, up %d (%s), down %s", ch->id, ch->id % 2, l.up,
             l.up >= 0 ? factory_->transportName(l.up) : "-", children.empty() ? "-" : children.c_str());
  ch->tree = std::move(t);
  return okStatus();
}

void ChannelSet::dump(int stalledChannel) const {
  for (const auto& chp : channels_) {
    const Channel& ch = *chp;
    std::string line =
        strCat("channel ", ch.id, ch.id == stalledChannel ? " (stalled)" : "", ": collectives issued ",
               ch.issued.load(), " completed ", ch.completed.load(), ";");
    if (ch.ring) {
      line += strCat(" ring", fifoState("send to", ch.ring->next, ch.ring->send.get()),
                     fifoState("recv from", ch.ring->prev, ch.ring->recv.get()), ";");
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
