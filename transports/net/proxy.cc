#include "transports/net/proxy.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "util/log.h"

namespace braid {
namespace {

// The Net tag of a message says which region of the slot it fills.
constexpr uint32_t kTagSimple = 1, kTagLL = 2;

// An LL step on the wire: its slot from the header unit to the data's end.
size_t llMessageBytes(uint64_t headerUnit) {
  const size_t bytes = headerUnit & 0xffffffffu;
  return llDataOffset(bytes) + bytes;
}

}  // namespace

struct NetProxy::Conn {
  bool isSend = false;
  bool dev = false;  // a GPU connector: `block` instead of `c`
  DevNetBlock block;
  NetSendComm* send = nullptr;
  NetRecvComm* recv = nullptr;
  Connector c;
  Peer peer;
  std::shared_ptr<NetErrorSink> sink;
  uint64_t posted = 0;  // next step to hand to the Net
  uint64_t done = 0;    // next step to complete
  NetRequest* reqs[kConnectorSteps] = {};
  bool failed = false;
  bool saidGoodbye = false;     // receive: the peer closed its comm (kNetClosedTag)
  size_t landingBytes = 0;      // receive: what one step's message may hold
  std::vector<uint64_t> stage;  // receive: landing areas when a Simple slot is smaller than an LL slot

  char* landing(uint64_t s) {
    if (stage.empty()) return dev ? block.simple(s) : reinterpret_cast<char*>(c.header(s));
    return reinterpret_cast<char*>(stage.data()) + (s % kConnectorSteps) * landingBytes;
  }
  // The counters, wherever the connector keeps them. Send side: tail (steps
  // the local sender published), head (slots the proxy gave back). Receive
  // side: head (slots the local receiver freed), tail (steps delivered).
  uint64_t tail() const {
    return dev ? __atomic_load_n(block.tail(), __ATOMIC_ACQUIRE)
               : c.counters->tail.load(std::memory_order_acquire);
  }
  uint64_t head() const {
    return dev ? __atomic_load_n(block.head(), __ATOMIC_ACQUIRE)
               : c.counters->head.load(std::memory_order_acquire);
  }
  void publishTail(uint64_t v) {
    if (dev) {
      __atomic_store_n(block.tail(), v, __ATOMIC_RELEASE);
    } else {
      c.counters->tail.store(v, std::memory_order_release);
    }
  }
  void publishHead(uint64_t v) {
    if (dev) {
      __atomic_store_n(block.head(), v, __ATOMIC_RELEASE);
    } else {
      c.counters->head.store(v, std::memory_order_release);
    }
  }
};

struct NetProxy::Impl {
  std::mutex mu;
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t nextId = 1;
  bool running = false;
  uint64_t generation = 0;  // bumped to stop the running thread (it checks under mu)
  std::thread thread;
  std::atomic<int> waiting{0};  // add/remove calls waiting for the lock
};

NetProxy* NetProxy::get(Net* net, int dev) {
  static std::mutex mu;
  static auto* proxies = new std::map<std::pair<Net*, int>, NetProxy*>();
  std::lock_guard<std::mutex> lock(mu);
  NetProxy*& p = (*proxies)[{net, dev}];
  if (p == nullptr) {
    p = new NetProxy(net, dev);
    p->impl_ = std::make_shared<Impl>();
  }
  return p;
}

uint64_t NetProxy::addSend(NetSendComm* comm, const Connector& local, Peer peer,
                           std::shared_ptr<NetErrorSink> sink) {
  auto c = std::make_unique<Conn>();
  c->isSend = true;
  c->send = comm;
  c->c = local;
  c->peer = std::move(peer);
  c->sink = std::move(sink);
  return add(std::move(c));
}

uint64_t NetProxy::addRecv(NetRecvComm* comm, const Connector& local, Peer peer,
                           std::shared_ptr<NetErrorSink> sink) {
  auto c = std::make_unique<Conn>();
  c->recv = comm;
  c->c = local;
  c->peer = std::move(peer);
  c->sink = std::move(sink);
  const size_t simple = sizeof(SlotHeader) + local.slotBytes;
  c->landingBytes = std::max(simple, kLLSlotBytes);
  if (simple < kLLSlotBytes) c->stage.resize(kConnectorSteps * c->landingBytes / 8);
  return add(std::move(c));
}

uint64_t NetProxy::addDevSend(NetSendComm* comm, const DevNetBlock& block, Peer peer,
                              std::shared_ptr<NetErrorSink> sink) {
  auto c = std::make_unique<Conn>();
  c->isSend = true;
  c->dev = true;
  c->send = comm;
  c->block = block;
  c->peer = std::move(peer);
  c->sink = std::move(sink);
  return add(std::move(c));
}

uint64_t NetProxy::addDevRecv(NetRecvComm* comm, const DevNetBlock& block, Peer peer,
                              std::shared_ptr<NetErrorSink> sink) {
  auto c = std::make_unique<Conn>();
  c->dev = true;
  c->recv = comm;
  c->block = block;
  c->peer = std::move(peer);
  c->sink = std::move(sink);
  // A step lands in its Simple slot (an LL step is then spread over its LL
  // slot), or in a staging area when Simple slots are smaller than LL ones.
  c->landingBytes = std::max(block.slotBytes, kDevLLSlotBytes);
  if (block.slotBytes < kDevLLSlotBytes) c->stage.resize(kConnectorSteps * c->landingBytes / 8);
  return add(std::move(c));
}

uint64_t NetProxy::add(std::unique_ptr<Conn> c) {
  Impl& im = *impl_;
  im.waiting.fetch_add(1);
  std::lock_guard<std::mutex> lock(im.mu);
  im.waiting.fetch_sub(1);
  const uint64_t id = im.nextId++;
  if (!c->isSend) c->sink->openedFrom(c->peer.rank);
  im.conns[id] = std::move(c);
  if (!im.running) {
    im.running = true;
    im.thread = std::thread([this, gen = im.generation] { loop(gen); });
  }
  return id;
}

void NetProxy::remove(uint64_t id) {
  Impl& im = *impl_;
  // A sender's last steps may still sit in its slots (a collective ends once
  // its steps are posted): let the proxy send them first, as long as it keeps
  // making progress (a peer that stopped reading gets 1 s, a dead one none).
  auto lastMove = std::chrono::steady_clock::now();
  uint64_t lastDone = ~uint64_t(0);
  auto flushed = [&]() {  // mu held
    auto it = im.conns.find(id);
    if (it == im.conns.end()) return true;
    Conn* c = it->second.get();
    const uint64_t tail = c->isSend ? c->tail() : 0;
    if (!c->isSend || c->failed || c->done == tail) return true;
    const auto now = std::chrono::steady_clock::now();
    if (c->done != lastDone) lastDone = c->done, lastMove = now;
    if (now - lastMove < std::chrono::seconds(1)) return false;
    BRAID_WARN("proxy: closing the net connection to %s with %llu steps unsent (no progress for 1 s)",
               c->peer.description.c_str(), static_cast<unsigned long long>(tail - c->done));
    return true;
  };
  while (true) {
    im.waiting.fetch_add(1);
    std::unique_lock<std::mutex> lock(im.mu);
    im.waiting.fetch_sub(1);
    if (flushed()) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::thread stopped;
  {
    im.waiting.fetch_add(1);
    std::lock_guard<std::mutex> lock(im.mu);
    im.waiting.fetch_sub(1);
    auto it = im.conns.find(id);
    if (it == im.conns.end()) return;
    Conn* c = it->second.get();
    if (c->isSend) {
      net_->closeSend(c->send);
    } else {
      net_->closeRecv(c->recv);
      if (!c->saidGoodbye) c->sink->closedFrom(c->peer.rank, false, okStatus());
    }
    im.conns.erase(it);
    if (im.conns.empty() && im.running) {
      // The last connector went: stop the thread and join it here, so no
      // finished thread is left behind (the next add starts a new one).
      ++im.generation;
      im.running = false;
      stopped = std::move(im.thread);
    }
  }
  if (stopped.joinable()) stopped.join();
}

void NetProxy::fail(Conn* c, Status s) {
  c->failed = true;
  s.withContext(
      strCat("net connection ", c->isSend ? "to " : "from ", c->peer.description, " (", net_->name(), ")"));
  BRAID_WARN("proxy: %s", s.message().c_str());
  c->sink->record(s);
}

bool NetProxy::progressSend(Conn* c) {
  bool moved = false;
  const uint64_t tail = c->tail();
  while (c->posted < tail && c->posted - c->done < kConnectorSteps) {
    const uint64_t s = c->posted;
    const void* data = nullptr;
    size_t size = 0;
    uint32_t tag = 0;
    Status st = c->dev ? devStepToSend(c, s, &data, &size, &tag) : stepToSend(c, s, &data, &size, &tag);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    NetRequest* r = nullptr;
    st = net_->isend(c->send, data, size, tag, nullptr, &r);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    if (r == nullptr) break;
    c->reqs[s % kConnectorSteps] = r;
    ++c->posted;
    moved = true;
  }
  while (c->done < c->posted) {
    bool done = false;
    Status st = net_->test(c->reqs[c->done % kConnectorSteps], &done, nullptr, nullptr);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    if (!done) break;
    // The bytes left the slot: the local sender may reuse it.
    c->publishHead(++c->done);
    moved = true;
  }
  return moved;
}

bool NetProxy::progressRecv(Conn* c) {
  bool moved = false;
  const uint64_t head = c->head();
  while (c->posted < head + kConnectorSteps && c->posted - c->done < kConnectorSteps) {
    NetRequest* r = nullptr;
    Status st = net_->irecv(c->recv, c->landing(c->posted), c->landingBytes, nullptr, &r);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    if (r == nullptr) break;
    c->reqs[c->posted % kConnectorSteps] = r;
    ++c->posted;
    moved = true;
  }
  while (c->done < c->posted) {
    const uint64_t s = c->done;
    bool done = false;
    size_t size = 0;
    uint32_t tag = 0;
    Status st = net_->test(c->reqs[s % kConnectorSteps], &done, &size, &tag);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    if (!done) break;
    if (tag == kNetClosedTag) {
      // The peer destroyed or aborted its communicator, after everything it
      // sent (delivered above). Not an error unless this rank waits for
      // more from it: the sink lets such waits fail at once.
      BRAID_INFO(kLogProxy, "proxy: %s closed its net connection", c->peer.description.c_str());
      c->failed = true;
      c->saidGoodbye = true;
      c->sink->closedFrom(c->peer.rank, true,
                          remoteError("net connection from ", c->peer.description, " (", net_->name(),
                                      "): rank ", c->peer.rank,
                                      " closed its communicator (destroyed or aborted) while this rank "
                                      "waited for data"));
      return moved;
    }
    st =
        c->dev ? deliverDevStep(c, s, c->landing(s), size, tag) : deliverStep(c, s, c->landing(s), size, tag);
    if (!st.ok()) return fail(c, std::move(st)), moved;
    c->publishTail(++c->done);
    moved = true;
  }
  return moved;
}

// ---- host connectors -----------------------------------------------------------

Status NetProxy::stepToSend(Conn* c, uint64_t s, const void** data, size_t* size, uint32_t* tag) {
  Connector& k = c->c;
  std::atomic<uint64_t>* header = k.llHeader(s);
  const uint64_t u0 = header->load(std::memory_order_acquire);
  if ((u0 >> 32) == ((s + 1) & 0xffffffffu)) {  // an LL step: send its header and data
    *data = header;
    *size = llMessageBytes(u0);
    *tag = kTagLL;
    if (*size > kLLSlotBytes) {
      return internalError("LL step ", s, " claims ", u0 & 0xffffffffu, " bytes, more than a slot holds");
    }
    return okStatus();
  }
  const SlotHeader* h = k.header(s);
  if (h->step != s || h->bytes > k.slotBytes) {
    return internalError("slot of step ", s, " holds step ", h->step, " (", h->bytes, " bytes)");
  }
  *data = h;
  *size = sizeof(SlotHeader) + h->bytes;
  *tag = kTagSimple;
  return okStatus();
}

Status NetProxy::deliverStep(Conn* c, uint64_t s, const char* src, size_t size, uint32_t tag) {
  Connector& k = c->c;
  if (tag == kTagLL) {
    uint64_t u0 = 0;
    if (size >= 8) std::memcpy(&u0, src, 8);
    if (size < 8 || size > kLLSlotBytes || (u0 >> 32) != ((s + 1) & 0xffffffffu) ||
        llMessageBytes(u0) != size) {
      return remoteError("a malformed LL step ", s, " arrived (", size, " bytes)");
    }
    // The data first, the header unit last (release), as a local sender would.
    const size_t bytes = u0 & 0xffffffffu;
    std::memcpy(k.llData(s, bytes), src + llDataOffset(bytes), bytes);
    k.llHeader(s)->store(u0, std::memory_order_release);
    return okStatus();
  }
  if (tag != kTagSimple || size < sizeof(SlotHeader) || size > sizeof(SlotHeader) + k.slotBytes) {
    return remoteError("a malformed step ", s, " arrived (tag ", tag, ", ", size, " bytes)");
  }
  if (src != reinterpret_cast<char*>(k.header(s))) std::memcpy(k.header(s), src, size);
  const SlotHeader* h = k.header(s);
  if (h->step != s || sizeof(SlotHeader) + h->bytes != size) {
    return remoteError("step ", s, " arrived holding step ", h->step, " and ", h->bytes, " bytes in a ", size,
                       "-byte message");
  }
  return okStatus();
}

// ---- GPU connectors ----------------------------------------------------------

namespace {

uint32_t llFlag(uint64_t step) {
  return static_cast<uint32_t>(step + 1);
}

// Whether every line of an LL step carries the step's flag in both halves.
bool llLinesCarry(const char* lines, size_t bytes, uint64_t step) {
  const uint32_t flag = llFlag(step);
  for (size_t off = 0; off < bytes; off += 16) {
    uint32_t w[4];
    for (int k = 0; k < 4; ++k)
      w[k] = __atomic_load_n(reinterpret_cast<const uint32_t*>(lines + off) + k, __ATOMIC_RELAXED);
    if (w[1] != flag || w[3] != flag) return false;
  }
  return true;
}

}  // namespace

Status NetProxy::devStepToSend(Conn* c, uint64_t s, const void** data, size_t* size, uint32_t* tag) {
  const DevNetBlock& b = c->block;
  // The kernel stored the step word and the data, fenced to system
  // scope, then tail: all of it is visible once tail is.
  const uint64_t word = __atomic_load_n(b.stepWord(s), __ATOMIC_ACQUIRE);
  if (!DevStepWord::matches(word, s)) {
    return internalError("the GPU published step ", s, " of a net connector without its size");
  }
  const uint64_t bytes = DevStepWord::bytes(word);
  if (DevStepWord::ll(word)) {
    *size = 16 * ((bytes + 7) / 8);  // 8 data bytes per 16-byte line
    *data = b.ll(s);
    *tag = kTagLL;
    if (*size > kDevLLSlotBytes)
      return internalError("LL step ", s, " claims ", bytes, " bytes, more than a slot holds");
    if (!llLinesCarry(b.ll(s), *size, s))
      return internalError("LL step ", s, " was published before its lines");
    return okStatus();
  }
  *size = bytes;
  *data = b.simple(s);
  *tag = kTagSimple;
  if (*size > b.slotBytes)
    return internalError("step ", s, " claims ", bytes, " bytes, more than a slot holds");
  return okStatus();
}

Status NetProxy::deliverDevStep(Conn* c, uint64_t s, const char* src, size_t size, uint32_t tag) {
  const DevNetBlock& b = c->block;
  if (tag == kTagLL) {
    if (size % 16 != 0 || size > kDevLLSlotBytes || !llLinesCarry(src, size, s)) {
      return remoteError("a malformed LL step ", s, " arrived (", size, " bytes)");
    }
    // 8-byte stores, each half of a line with its flag: the kernel takes
    // a line only once both halves carry the step's flag.
    uint64_t* dst = reinterpret_cast<uint64_t*>(b.ll(s));
    for (size_t u = 0; u < size / 8; ++u) {
      uint64_t v;
      std::memcpy(&v, src + 8 * u, 8);
      __atomic_store_n(dst + u, v, __ATOMIC_RELAXED);
    }
    return okStatus();  // the kernel polls the lines, not tail
  }
  if (tag != kTagSimple || size > b.slotBytes) {
    return remoteError("a malformed step ", s, " arrived (tag ", tag, ", ", size, " bytes)");
  }
  // Simple data and its step word (which point-to-point kernels check) are
  // read once tail is seen (its release orders them first).
  if (src != b.simple(s)) std::memcpy(b.simple(s), src, size);
  __atomic_store_n(b.stepWord(s), DevStepWord::make(s, false, size), __ATOMIC_RELAXED);
  return okStatus();
}

void NetProxy::loop(uint64_t generation) {
  Impl& im = *impl_;
  BRAID_INFO(kLogProxy, "proxy thread for %s device %d started", net_->name(), dev_);
  auto idleSince = std::chrono::steady_clock::now();
  while (true) {
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(im.mu);
      if (im.generation != generation) {
        BRAID_INFO(kLogProxy, "proxy thread for %s device %d stops: no connector left", net_->name(), dev_);
        return;
      }
      for (auto& [id, c] : im.conns) {
        if (c->failed) continue;
        moved |= c->isSend ? progressSend(c.get()) : progressRecv(c.get());
      }
    }
    if (im.waiting.load() > 0) std::this_thread::yield();
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      idleSince = now;
      continue;
    }
    // Idle: give the core away quickly (ranks share few cores), but nap
    // only after a while, to keep small-message latency.
    const auto idle = now - idleSince;
    if (idle < std::chrono::microseconds(100)) {
      sched_yield();
    } else {
      usleep(idle < std::chrono::milliseconds(10) ? 5 : 50);
    }
  }
}

}  // namespace braid
