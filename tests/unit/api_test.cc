// The C API's behaviour on bad input and on features not built yet: every
// case returns the right code, never crashes, and leaves a last-error text
// naming the argument.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "braid.h"
#include "core/dev_resources.h"
#include "core/nccl_device_abi.h"
#include "nccl.h"
#include "platform/shared_memory.h"

namespace {

// The C API's checks and the host engine; the GPU backend has tests/gpu/.
// BRAID_BACKEND set by the caller still wins.
const bool kHostBackend = (setenv("BRAID_BACKEND", "host", /*overwrite=*/0), true);

// C callers may pass any int where nccl.h declares an enum; a C++ enum cannot
// hold such values without undefined behaviour, so these call the entry
// points through int-typed pointers, as a C caller's code does at the ABI.
using AllReduceRaw = ncclResult_t (*)(const void*, void*, size_t, int, int, ncclComm_t, braidStream_t);
using ErrorStringRaw = const char* (*)(int);
AllReduceRaw allReduceRaw() { return reinterpret_cast<AllReduceRaw>(&ncclAllReduce); }
ErrorStringRaw errorStringRaw() { return reinterpret_cast<ErrorStringRaw>(&ncclGetErrorString); }

ncclComm_t fakeComm() { return reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x10)); }

// A live single-rank communicator for the argument checks.
ncclComm_t liveComm() {
  static ncclComm_t comm = [] {
    ncclUniqueId id;
    ncclComm_t c = nullptr;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&c, 1, id, 0) != ncclSuccess) return c;
    return c;
  }();
  return comm;
}

struct Case {
  const char* name;
  std::function<ncclResult_t()> call;
  ncclResult_t expected;
  const char* mentions;  // text the last error must contain
};

TEST(Api, BadInputTable) {
  ASSERT_NE(liveComm(), nullptr) << ncclGetLastError(nullptr);
  ncclComm_t destroyed = nullptr;
  {
    ncclUniqueId id2;
    ASSERT_EQ(ncclGetUniqueId(&id2), ncclSuccess);
    ASSERT_EQ(ncclCommInitRank(&destroyed, 1, id2, 0), ncclSuccess);
    ASSERT_EQ(ncclCommDestroy(destroyed), ncclSuccess);
  }
  float buf[4] = {};
  ncclComm_t comm = nullptr;
  ncclUniqueId id{};
  ncclConfig_t badMagic = NCCL_CONFIG_INITIALIZER;
  badMagic.magic = 0x1234;
  ncclConfig_t badSize = NCCL_CONFIG_INITIALIZER;
  badSize.size = 8;
  ncclConfig_t badBlocking = NCCL_CONFIG_INITIALIZER;
  badBlocking.blocking = 7;
  int devs[2] = {0, 0};
  const std::vector<Case> cases = {
      {"GetVersion NULL", [&] { return ncclGetVersion(nullptr); }, ncclInvalidArgument, "version"},
      {"GetUniqueId NULL", [&] { return ncclGetUniqueId(nullptr); }, ncclInvalidArgument, "uniqueId"},
      {"InitRank NULL comm", [&] { return ncclCommInitRank(nullptr, 2, id, 0); }, ncclInvalidArgument,
       "comm"},
      {"InitRank nranks 0", [&] { return ncclCommInitRank(&comm, 0, id, 0); }, ncclInvalidArgument, "nranks"},
      {"InitRank rank high", [&] { return ncclCommInitRank(&comm, 2, id, 2); }, ncclInvalidArgument, "rank"},
      {"InitRank rank neg", [&] { return ncclCommInitRank(&comm, 2, id, -1); }, ncclInvalidArgument, "rank"},
      {"InitConfig magic", [&] { return ncclCommInitRankConfig(&comm, 2, id, 0, &badMagic); },
       ncclInvalidArgument, "magic"},
      {"InitConfig size", [&] { return ncclCommInitRankConfig(&comm, 2, id, 0, &badSize); },
       ncclInvalidArgument, "size"},
      {"InitConfig blocking", [&] { return ncclCommInitRankConfig(&comm, 2, id, 0, &badBlocking); },
       ncclInvalidArgument, "blocking"},
      {"InitAll ndev 0", [&] { return ncclCommInitAll(&comm, 0, nullptr); }, ncclInvalidArgument, "ndev"},
      {"InitAll duplicate dev", [&] { return ncclCommInitAll(&comm, 2, devs); }, ncclInvalidArgument,
       "devlist"},
      {"Scalable nId 0", [&] { return ncclCommInitRankScalable(&comm, 2, 0, 0, &id, nullptr); },
       ncclInvalidArgument, "nId"},
      {"Destroy made-up handle", [&] { return ncclCommDestroy(fakeComm()); }, ncclInvalidArgument,
       "not a live"},
      {"Destroy twice", [&] { return ncclCommDestroy(destroyed); }, ncclInvalidArgument, "not a live"},
      {"Count destroyed",
       [&] {
         int n;
         return ncclCommCount(destroyed, &n);
       },
       ncclInvalidArgument, "not a live"},
      {"AllReduce destroyed",
       [&] { return ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, destroyed, nullptr); },
       ncclInvalidArgument, "not a live"},
      {"Count NULL out", [&] { return ncclCommCount(liveComm(), nullptr); }, ncclInvalidArgument, "count"},
      {"Split bad color", [&] { return ncclCommSplit(liveComm(), -5, 0, &comm, nullptr); },
       ncclInvalidArgument, "color"},
      {"Split bad config", [&] { return ncclCommSplit(liveComm(), 0, 0, &comm, &badMagic); },
       ncclInvalidArgument, "magic"},
      {"Init bad unique id",
       [&] {
         ncclUniqueId garbage;
         std::memset(&garbage, 0x5a, sizeof(garbage));
         return ncclCommInitRank(&comm, 1, garbage, 0);
       },
       ncclInvalidArgument, "unique id"},
      {"AllReduce NULL comm",
       [&] { return ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, nullptr, nullptr); }, ncclInvalidArgument,
       "comm"},
      {"AllReduce bad type", [&] { return allReduceRaw()(buf, buf, 4, 12, ncclSum, liveComm(), nullptr); },
       ncclInvalidArgument, "datatype"},
      {"AllReduce bad op", [&] { return allReduceRaw()(buf, buf, 4, ncclFloat, -1, liveComm(), nullptr); },
       ncclInvalidArgument, "op"},
      {"AllReduce NULL send",
       [&] { return ncclAllReduce(nullptr, buf, 4, ncclFloat, ncclSum, liveComm(), nullptr); },
       ncclInvalidArgument, "sendbuff"},
      {"AllGather NULL recv", [&] { return ncclAllGather(buf, nullptr, 1, ncclFloat, liveComm(), nullptr); },
       ncclInvalidArgument, "recvbuff"},
      {"Broadcast bad root", [&] { return ncclBroadcast(buf, buf, 1, ncclFloat, -1, liveComm(), nullptr); },
       ncclInvalidArgument, "root"},
      {"Send bad peer", [&] { return ncclSend(buf, 1, ncclFloat, -3, liveComm(), nullptr); },
       ncclInvalidArgument, "peer"},
      {"InitRank nranks past the bootstrap's limit",
       [&] { return ncclCommInitRank(&comm, (1 << 20) + 1, id, 0); }, ncclInvalidArgument,
       "argument 'nranks'"},
      {"Register wraps the address space",
       [&] {
         void* handle = nullptr;
         return ncclCommRegister(liveComm(), buf, SIZE_MAX, &handle);
       },
       ncclInvalidArgument, "wraps"},
      {"WindowRegister wraps the address space",
       [&] {
         ncclWindow_t win = nullptr;
         return ncclCommWindowRegister(liveComm(), buf, SIZE_MAX - 8, &win, 0);
       },
       ncclInvalidArgument, "wraps"},
      {"AllReduce count past the address space",
       [&] { return ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat, ncclSum, liveComm(), nullptr); },
       ncclInvalidArgument, "argument 'count'"},
      {"Send count past the address space",
       [&] { return ncclSend(buf, SIZE_MAX / 8 + 1, ncclDouble, 0, liveComm(), nullptr); },
       ncclInvalidArgument, "argument 'count'"},
      {"Recv buffer wraps the address space",
       [&] {
         return ncclRecv(reinterpret_cast<void*>(UINTPTR_MAX - 15), 8, ncclFloat, 0, liveComm(), nullptr);
       },
       ncclInvalidArgument, "wraps"},
      {"AllReduce buffers overlap by an element",
       [&] { return ncclAllReduce(buf, buf + 1, 2, ncclFloat, ncclSum, liveComm(), nullptr); },
       ncclInvalidArgument, "overlap"},
      {"AllGather send overlaps recv off its slot",
       [&] { return ncclAllGather(buf + 1, buf, 2, ncclFloat, liveComm(), nullptr); }, ncclInvalidArgument,
       "sendbuff == recvbuff"},
      {"ReduceScatter recv overlaps send off its slot",
       [&] { return ncclReduceScatter(buf, buf + 1, 2, ncclFloat, ncclSum, liveComm(), nullptr); },
       ncclInvalidArgument, "overlap"},
      {"Broadcast root buffers overlap",
       [&] { return ncclBroadcast(buf + 3, buf, 4, ncclFloat, 0, liveComm(), nullptr); }, ncclInvalidArgument,
       "overlap"},
      {"AllToAllv displacement past the address space",
       [&] {
         const size_t counts[1] = {1}, zero[1] = {0}, far[1] = {SIZE_MAX - 1};
         return ncclAllToAllv(buf, counts, far, buf + 2, counts, zero, ncclFloat, liveComm(), nullptr);
       },
       ncclInvalidArgument, "sdispls[0]"},
      {"AllToAllv send and receive blocks overlap",
       [&] {
         const size_t counts[1] = {2}, zero[1] = {0};
         return ncclAllToAllv(buf, counts, zero, buf + 1, counts, zero, ncclFloat, liveComm(), nullptr);
       },
       ncclInvalidArgument, "no in-place form"},
      {"AllToAllv receive block wraps the address space",
       [&] {
         const size_t counts[1] = {8}, zero[1] = {0};
         return ncclAllToAllv(buf, counts, zero, reinterpret_cast<void*>(UINTPTR_MAX - 15), counts, zero,
                              ncclFloat, liveComm(), nullptr);
       },
       ncclInvalidArgument, "recvbuff"},
      {"AllToAllv NULL counts",
       [&] {
         return ncclAllToAllv(buf, nullptr, nullptr, buf, nullptr, nullptr, ncclFloat, liveComm(), nullptr);
       },
       ncclInvalidArgument, "sendcounts"},
      {"PreMulSum NULL scalar",
       [&] {
         ncclRedOp_t op;
         return ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarHostImmediate, liveComm());
       },
       ncclInvalidArgument, "scalar"},
      {"RedOpDestroy builtin", [&] { return ncclRedOpDestroy(ncclSum, liveComm()); }, ncclInvalidArgument,
       "op"},
      {"GroupEnd unmatched", [&] { return ncclGroupEnd(); }, ncclInvalidUsage, "ncclGroupStart"},
      {"SimulateEnd NULL", [&] { return ncclGroupSimulateEnd(nullptr); }, ncclInvalidArgument, "simInfo"},
      {"MemFree foreign", [&] { return ncclMemFree(buf); }, ncclInvalidArgument, "ncclMemAlloc"},
      {"MemAlloc zero",
       [&] {
         void* p = nullptr;
         return ncclMemAlloc(&p, 0);
       },
       ncclInvalidArgument, "size"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.call(), c.expected);
    std::string last = ncclGetLastError(nullptr);
    EXPECT_NE(last.find(c.mentions), std::string::npos) << "last error: " << last;
  }
}

// NCCL's device API: PyTorch links it; a host communicator has no device
// to run user kernels on and says so.
TEST(Api, DeviceApiNeedsTheGpuBackend) {
  ASSERT_NE(liveComm(), nullptr);
  ncclDevCommRequirements reqs{};
  ncclDevComm devComm{};
  EXPECT_EQ(ncclDevCommCreate(liveComm(), &reqs, &devComm), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("device API"), std::string::npos);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("GPU backend"), std::string::npos);
  // The communicator keeps its own last error too.
  EXPECT_NE(std::string(ncclGetLastError(liveComm())).find("ncclDevCommCreate"), std::string::npos);
  EXPECT_EQ(ncclDevCommCreate(liveComm(), nullptr, &devComm), ncclInvalidArgument);
  EXPECT_EQ(ncclDevCommCreate(liveComm(), &reqs, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclDevCommCreate(nullptr, &reqs, &devComm), ncclInvalidArgument);
  EXPECT_EQ(ncclDevCommDestroy(liveComm(), &devComm), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("devComm"), std::string::npos);
  EXPECT_EQ(ncclDevCommDestroy(liveComm(), nullptr), ncclInvalidArgument);
}

// The resource window's layout, as ncclDevCommCreate computes it before
// allocating: LSA barriers first, then each buffer on its alignment (at
// least 128 bytes), handles in 128-byte units.
TEST(DevResources, LaysOutBarriersThenBuffersOnTheirAlignment) {
  ncclLsaBarrierHandle barrier{};
  ncclDevResourceRequirements barrierReq{};
  ASSERT_EQ(ncclLsaBarrierCreateRequirement(ncclTeam{4, 1, 1}, 3, &barrier, &barrierReq), ncclSuccess);
  EXPECT_EQ(barrier.nBarriers, 3);
  EXPECT_EQ(barrierReq.bufferSize, (3u + 4u) * 3u * 4u);
  EXPECT_EQ(barrierReq.outBufferHandle, &barrier.bufHandle);
  ncclLLA2AHandle a2a{};
  ncclDevResourceRequirements a2aReq{};
  ASSERT_EQ(ncclLLA2ACreateRequirement(2, ncclLLA2ACalcSlots(8, 12), &a2a, &a2aReq), ncclSuccess);
  EXPECT_EQ(a2a.nSlots, 16u);
  EXPECT_EQ(a2aReq.bufferSize, 2u * (1u + 2u * 16u) * 16u);
  ncclDevResourceHandle user = 77;
  ncclDevResourceRequirements userReq{};
  userReq.bufferSize = 1000;
  userReq.bufferAlign = 4096;
  userReq.outBufferHandle = &user;
  barrierReq.next = &a2aReq;
  a2aReq.next = &userReq;

  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = 2;
  reqs.resourceRequirementsList = &barrierReq;
  braid::DevResourceLayout layout;
  ASSERT_TRUE(braid::layoutDevResources(reqs, 4, &layout).ok());
  EXPECT_EQ(layout.lsaBarriers, 2);
  // The communicator's barriers (7 x 2 words), then 84 bytes of the
  // user's barriers at 128, 1056 of the LL all-to-all at 256, 1000 at 4096.
  ASSERT_EQ(layout.handles.size(), 3u);
  EXPECT_EQ(layout.handles[0].first, &barrier.bufHandle);
  EXPECT_EQ(layout.handles[0].second, 1u);
  EXPECT_EQ(layout.handles[1].first, &a2a.bufHandle);
  EXPECT_EQ(layout.handles[1].second, 2u);
  EXPECT_EQ(layout.handles[2].first, &user);
  EXPECT_EQ(layout.handles[2].second, 4096u / 128u);
  EXPECT_EQ(layout.bytes, 4096u + 1024u);
  EXPECT_EQ(user, 77u) << "handles are written by ncclDevCommCreate, not by the layout";

  ncclDevCommRequirements none{};
  ASSERT_TRUE(braid::layoutDevResources(none, 2, &layout).ok());
  EXPECT_EQ(layout.bytes, 128u);
  EXPECT_TRUE(layout.handles.empty());
}

// The team arithmetic of nccl_device.h (host and device alike) against
// the definition: team t holds world ranks me + (i - t.rank) * t.stride
// for i in [0, t.nRanks), where me is this rank's world rank.
TEST(DevTeams, ArithmeticMatchesTheDefinition) {
  const int me = 13;
  auto world = [&](ncclTeam t, int i) { return me + (i - t.rank) * t.stride; };
  auto indexOf = [&](ncclTeam t, int w) {
    for (int i = 0; i < t.nRanks; ++i)
      if (world(t, i) == w) return i;
    return -1;
  };
  // A world of 24 ranks as LSA teams of 4: this rank's LSA team, rail, and
  // factors of them.
  const ncclTeam worldTeam{24, me, 1}, lsa{4, me % 4, 1};
  const ncclTeam rail = ncclTeamOuterFactor(worldTeam, 4);
  EXPECT_EQ(rail.nRanks, 6);
  EXPECT_EQ(rail.rank, me / 4);
  EXPECT_EQ(rail.stride, 4);
  const ncclTeam inner = ncclTeamInnerFactor(worldTeam, 4);
  EXPECT_EQ(inner.nRanks, 4);
  EXPECT_EQ(inner.rank, me % 4);
  const ncclTeam teams[] = {worldTeam, lsa, rail, inner, ncclTeamOuterFactor(rail, 2), ncclTeamInnerFactor(rail, 3)};
  for (const ncclTeam& a : teams) {
    for (const ncclTeam& b : teams) {
      std::vector<int> difference;  // b's members not in a, in b's order
      for (int i = 0; i < b.nRanks; ++i) {
        const int inA = indexOf(a, world(b, i));
        EXPECT_EQ(ncclTeamRankIsMember(a, b, i), inA >= 0) << i;
        if (inA >= 0) {
          EXPECT_EQ(ncclTeamRankToTeam(a, b, i), inA) << i;
        } else {
          difference.push_back(i);
        }
      }
      for (size_t k = 0; k < difference.size(); ++k)
        EXPECT_EQ(ncclTeamRankInDifference(b, a, static_cast<int>(k)), difference[k]) << k;
      EXPECT_EQ(ncclTeamRankInDifference(b, a, static_cast<int>(difference.size())), -1);
    }
  }
  ncclDevComm dc{};
  dc.rank = me;
  dc.nRanks = 24;
  dc.lsaRank = me % 4;
  dc.lsaSize = 4;
  EXPECT_EQ(ncclTeamRail(dc).nRanks, rail.nRanks);
  EXPECT_EQ(ncclTeamRail(dc).rank, rail.rank);
  EXPECT_EQ(ncclTeamRankToWorld(dc, rail, 0), me % 4);
  EXPECT_EQ(ncclTeamRankToLsa(dc, ncclTeamLsa(dc), 3), 3);
  EXPECT_EQ(ncclGetResourceBufferOffset(3), 384u);
}

// What Braid does not provide, and nonsense, is refused naming the field.
TEST(DevResources, RefusesGinMultimemAndBadCounts) {
  struct Refusal {
    const char* name;
    std::function<void(ncclDevCommRequirements*)> set;
    ncclResult_t code;
    const char* mentions;
  };
  static ncclDevResourceRequirements cyclic{}, odd{}, ginBuffer{};
  static ncclTeamRequirements multimemTeam{};
  const Refusal cases[] = {
      {"multimem", [](ncclDevCommRequirements* r) { r->lsaMultimem = true; }, ncclInvalidUsage,
       "lsaMultimem"},
      {"GIN forced", [](ncclDevCommRequirements* r) { r->ginForceEnable = true; }, ncclInvalidUsage, "GIN"},
      {"GIN barriers", [](ncclDevCommRequirements* r) { r->railGinBarrierCount = 1; }, ncclInvalidUsage,
       "railGinBarrierCount"},
      {"GIN signals", [](ncclDevCommRequirements* r) { r->ginSignalCount = 4; }, ncclInvalidUsage,
       "ginSignalCount"},
      {"world barriers", [](ncclDevCommRequirements* r) { r->barrierCount = 1; }, ncclInvalidUsage,
       "lsaBarrierCount"},
      {"negative barriers", [](ncclDevCommRequirements* r) { r->lsaBarrierCount = -1; }, ncclInvalidArgument,
       "lsaBarrierCount"},
      {"cyclic list",
       [](ncclDevCommRequirements* r) {
         cyclic.next = &cyclic;
         r->resourceRequirementsList = &cyclic;
       },
       ncclInvalidArgument, "cyclic"},
      {"alignment not a power of two",
       [](ncclDevCommRequirements* r) {
         odd = ncclDevResourceRequirements{};
         odd.bufferSize = 8;
         odd.bufferAlign = 384;
         r->resourceRequirementsList = &odd;
       },
       ncclInvalidArgument, "bufferAlign"},
      {"GIN counters in a buffer",
       [](ncclDevCommRequirements* r) {
         ginBuffer = ncclDevResourceRequirements{};
         ginBuffer.ginCounterCount = 2;
         r->resourceRequirementsList = &ginBuffer;
       },
       ncclInvalidUsage, "GIN"},
      {"multimem team",
       [](ncclDevCommRequirements* r) {
         multimemTeam = ncclTeamRequirements{};
         multimemTeam.multimem = true;
         r->teamRequirementsList = &multimemTeam;
       },
       ncclInvalidUsage, "multimem"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.name);
    ncclDevCommRequirements reqs{};
    c.set(&reqs);
    braid::DevResourceLayout layout;
    braid::Status s = braid::layoutDevResources(reqs, 2, &layout);
    EXPECT_EQ(s.code(), c.code);
    EXPECT_NE(s.message().find(c.mentions), std::string::npos) << s.message();
  }
  ncclLsaBarrierHandle h{};
  ncclDevResourceRequirements r{};
  EXPECT_EQ(ncclLsaBarrierCreateRequirement(ncclTeam{2, 0, 1}, -1, &h, &r), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("nBarriers"), std::string::npos);
  EXPECT_EQ(ncclLsaBarrierCreateRequirement(ncclTeam{2, 0, 1}, 1, nullptr, &r), ncclInvalidArgument);
  ncclLLA2AHandle a{};
  EXPECT_EQ(ncclLLA2ACreateRequirement(1, -3, &a, &r), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("nSlots"), std::string::npos);
}

// ncclCommRegister on a host communicator: handles are checked, a foreign,
// stale or twice-deregistered one is an error naming the argument, and a
// collective on a registered buffer runs as on any other.
TEST(Api, RegisterAndDeregisterBuffers) {
  ASSERT_NE(liveComm(), nullptr);
  float in[8], out[8];
  for (int i = 0; i < 8; ++i) in[i] = static_cast<float>(i);
  void* hin = nullptr;
  void* hout = nullptr;
  ASSERT_EQ(ncclCommRegister(liveComm(), in, sizeof(in), &hin), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(liveComm(), out, sizeof(out), &hout), ncclSuccess);
  EXPECT_NE(hin, nullptr);
  EXPECT_NE(hin, hout);
  ASSERT_EQ(ncclAllReduce(in, out, 8, ncclFloat, ncclSum, liveComm(), nullptr), ncclSuccess);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], static_cast<float>(i));  // one rank
  EXPECT_EQ(ncclCommDeregister(liveComm(), hin), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(liveComm(), hin), ncclInvalidArgument);  // twice
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("'handle'"), std::string::npos);
  int notAHandle = 0;
  EXPECT_EQ(ncclCommDeregister(liveComm(), &notAHandle), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(liveComm(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(liveComm(), nullptr, 16, &hin), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(liveComm(), in, 16, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(nullptr, in, 16, &hin), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(liveComm(), hout), ncclSuccess);
}

// Windows (ncclCommWindowRegister) on one rank: a collective on one runs
// as on any buffer (zero-copy needs peers: coll_windows_test), and a buffer
// handle is not a window (nor the reverse).
TEST(Api, RegisterAndDeregisterWindows) {
  ASSERT_NE(liveComm(), nullptr);
  void* mem = nullptr;
  ASSERT_EQ(ncclMemAlloc(&mem, 4096), ncclSuccess);  // page-aligned: fit for a symmetric window
  float* in = static_cast<float*>(mem);
  float out[8] = {};
  for (int i = 0; i < 8; ++i) in[i] = static_cast<float>(i);
  ncclWindow_t win = nullptr, plain = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(liveComm(), mem, 4096, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  ASSERT_EQ(ncclCommWindowRegister(liveComm(), out, sizeof(out), &plain, NCCL_WIN_DEFAULT), ncclSuccess);
  EXPECT_NE(win, nullptr);
  EXPECT_NE(win, plain);
  ASSERT_EQ(ncclAllReduce(in, out, 8, ncclFloat, ncclSum, liveComm(), nullptr), ncclSuccess);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], static_cast<float>(i));  // one rank

  // Bad arguments: named, and *win cleared.
  ncclWindow_t w = win;
  EXPECT_EQ(ncclCommWindowRegister(liveComm(), in + 1, 16, &w, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_WIN_REQUIRED_ALIGNMENT"), std::string::npos);
  EXPECT_EQ(w, nullptr);
  EXPECT_EQ(ncclCommWindowRegister(liveComm(), in, 16, &w, 0x10), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("'winFlags'"), std::string::npos);
  EXPECT_EQ(ncclCommWindowRegister(liveComm(), nullptr, 16, &w, NCCL_WIN_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowRegister(liveComm(), in, 16, nullptr, NCCL_WIN_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowRegister(nullptr, in, 16, &w, NCCL_WIN_DEFAULT), ncclInvalidArgument);

  // Kinds do not mix: a window is not a buffer handle, nor the reverse.
  void* handle = nullptr;
  ASSERT_EQ(ncclCommRegister(liveComm(), in, 16, &handle), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(liveComm(), reinterpret_cast<ncclWindow_t>(handle)),
            ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(liveComm(), win), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(liveComm(), handle), ncclSuccess);

  EXPECT_EQ(ncclCommWindowDeregister(liveComm(), win), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(liveComm(), win), ncclInvalidArgument);  // twice
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("'win'"), std::string::npos);
  EXPECT_EQ(ncclCommWindowDeregister(liveComm(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowDeregister(liveComm(), plain), ncclSuccess);
  EXPECT_EQ(ncclMemFree(mem), ncclSuccess);
}

TEST(Api, PreMulSumOperators) {
  float in[3] = {1, 2, 3}, out[3] = {};
  float immediate = 2, pointed = 3;
  ncclRedOp_t byValue, byPointer;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&byValue, &immediate, ncclFloat, ncclScalarHostImmediate, liveComm()),
            ncclSuccess);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&byPointer, &pointed, ncclFloat, ncclScalarDevice, liveComm()), ncclSuccess);
  EXPECT_GE(static_cast<int>(byValue), static_cast<int>(ncclNumOps));
  EXPECT_NE(byValue, byPointer);
  immediate = 100;  // copied at creation: no effect
  ASSERT_EQ(ncclAllReduce(in, out, 3, ncclFloat, byValue, liveComm(), nullptr), ncclSuccess);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], 2 * in[i]);
  pointed = 5;  // read when the collective runs
  ASSERT_EQ(ncclAllReduce(in, out, 3, ncclFloat, byPointer, liveComm(), nullptr), ncclSuccess);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], 5 * in[i]);
  // Made for float: another datatype is refused, naming both.
  double d[3] = {};
  EXPECT_EQ(ncclAllReduce(d, d, 3, ncclDouble, byValue, liveComm(), nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclFloat32"), std::string::npos);
  ASSERT_EQ(ncclRedOpDestroy(byValue, liveComm()), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(byValue, liveComm()), ncclInvalidArgument);  // twice
  EXPECT_EQ(ncclAllReduce(in, out, 3, ncclFloat, byValue, liveComm(), nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("live operator"), std::string::npos);
  EXPECT_EQ(ncclRedOpDestroy(byPointer, liveComm()), ncclSuccess);
  ncclRedOp_t op;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &immediate, ncclFloat, static_cast<ncclScalarResidence_t>(7), liveComm()),
            ncclInvalidArgument);
}

// An operator destroyed after the grouped calls that use it returned, before
// the group runs them, as NCCL allows: the group uses the operator as it
// was (a pointed-to scalar is still read when the collective runs).
TEST(Api, PreMulSumDestroyedBeforeItsGroupRuns) {
  float in[3] = {1, 2, 3}, byValueOut[3] = {}, byPointerOut[3] = {};
  float immediate = 2, pointed = 3;
  ncclRedOp_t byValue, byPointer;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&byValue, &immediate, ncclFloat, ncclScalarHostImmediate, liveComm()),
            ncclSuccess);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&byPointer, &pointed, ncclFloat, ncclScalarDevice, liveComm()),
            ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(in, byValueOut, 3, ncclFloat, byValue, liveComm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(in, byPointerOut, 3, ncclFloat, byPointer, liveComm(), nullptr), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(byValue, liveComm()), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(byPointer, liveComm()), ncclSuccess);
  pointed = 5;
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(byValueOut[i], 2 * in[i]);
    EXPECT_EQ(byPointerOut[i], 5 * in[i]);
  }
  ncclResult_t state = ncclInternalError;
  ASSERT_EQ(ncclCommGetAsyncError(liveComm(), &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
}

// Operators made and destroyed one per collective (as PyTorch does) reuse
// their slots: the table stays bounded by the operators live at once, and a
// destroyed operator's handle stays an error after its slot is reused.
TEST(Api, PreMulSumSlotsAreReusedButStaleHandlesAreNot) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  float two = 2, in[2] = {1, 2}, out[2] = {};
  ncclRedOp_t first, op;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&first, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
  ASSERT_EQ(ncclRedOpDestroy(first, comm), ncclSuccess);
  for (int i = 0; i < 100000; ++i) {  // unbounded growth would be 100000 entries
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
    if (i < 32766) {  // then the slot's generation comes round
      ASSERT_NE(op, first) << i;
    }
    ASSERT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
  }
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
  ASSERT_NE(op, first);
  EXPECT_EQ(ncclAllReduce(in, out, 2, ncclFloat, first, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(first, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(in, out, 2, ncclFloat, op, comm, nullptr), ncclSuccess);
  EXPECT_EQ(out[1], 4.0f);
  // The live operators are bounded (65536 at once), and a destroyed one
  // makes room again.
  std::vector<ncclRedOp_t> live(1, op);
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && live.size() <= 70000) {
    r = ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm);
    if (r == ncclSuccess) live.push_back(op);
  }
  EXPECT_EQ(r, ncclInvalidUsage);
  EXPECT_EQ(live.size(), 65536u);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclRedOpDestroy"), std::string::npos);
  ASSERT_EQ(ncclRedOpDestroy(live[7], comm), ncclSuccess);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// After a group fails at ncclGroupEnd, ncclGetLastError(comm) gives that
// failure rather than an earlier call's, and so do the refusals that follow
// while the communicator is in error.
TEST(Api, LastErrorOfACommIsTheCauseOfItsError) {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  float send[8] = {}, recv[4] = {};
  EXPECT_EQ(allReduceRaw()(send, send, 1, 99, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("datatype"), std::string::npos);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(send, 8, ncclFloat, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(recv, 4, ncclFloat, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  const std::string cause = ncclGetLastError(comm);
  EXPECT_NE(cause.find("meets a receive"), std::string::npos) << cause;
  EXPECT_EQ(ncclAllReduce(send, send, 1, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);
  const std::string later = ncclGetLastError(comm);
  EXPECT_NE(later.find("in error"), std::string::npos) << later;
  EXPECT_NE(later.find("meets a receive"), std::string::npos) << later;
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// All-to-allv's blocks: receive blocks overlapping each other are refused
// (the BadInputTable has a receive block on a send block); send blocks may
// share bytes, and disjoint blocks may interleave in one buffer.
TEST(Api, AllToAllvBlocksMustNotOverlap) {
  ncclComm_t comms[2] = {};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  float data[2][6];
  const size_t two[2] = {2, 2}, sameSend[2] = {0, 0}, recvOverlap[2] = {2, 3}, recvApart[2] = {2, 4};
  EXPECT_EQ(ncclAllToAllv(data[0], two, sameSend, data[0], two, recvOverlap, ncclFloat, comms[0], nullptr),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("same bytes"), std::string::npos)
      << ncclGetLastError(nullptr);
  // Rank r's buffer: [its one send block | from rank 0 | from rank 1].
  for (int r = 0; r < 2; ++r) {
    std::fill(std::begin(data[r]), std::end(data[r]), -1.0f);
    data[r][0] = 10.0f * r + 1;
    data[r][1] = 10.0f * r + 2;
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclAllToAllv(data[r], two, sameSend, data[r], two, recvApart, ncclFloat, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < 2; ++r) {
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(data[r][2 + 2 * p], 10.0f * p + 1) << "rank " << r << " from " << p;
      EXPECT_EQ(data[r][3 + 2 * p], 10.0f * p + 2) << "rank " << r << " from " << p;
    }
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(Api, SingleRankCollectivesCopy) {
  float in[5] = {1, 2, 3, 4, 5}, out[5] = {};
  ASSERT_EQ(ncclAllReduce(in, out, 5, ncclFloat, ncclSum, liveComm(), nullptr), ncclSuccess);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], in[i]);
  EXPECT_EQ(ncclBroadcast(in, out, 5, ncclFloat, 1, liveComm(), nullptr), ncclInvalidArgument);  // root 1 of 1
  // A send to oneself pairs with a receive from oneself in the same group.
  float back[5] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(in, 5, ncclFloat, 0, liveComm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(back, 5, ncclFloat, 0, liveComm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], in[i]);
}

// Copies of more than one piece (copyBytes copies in 512 KiB pieces), with a
// ragged end, aligned and misaligned to each other; a send to oneself into
// an overlapping range moves the bytes as memmove would.
TEST(Api, SingleRankLargeAndOverlappingCopies) {
  const size_t n = (size_t(3) << 20) + 5;  // bytes
  std::vector<uint8_t> in(n + 64), out(n + 64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  for (size_t skew : {size_t(0), size_t(3)}) {
    std::fill(out.begin(), out.end(), uint8_t(0));
    ASSERT_EQ(ncclAllReduce(in.data(), out.data() + skew, n, ncclUint8, ncclSum, liveComm(), nullptr), ncclSuccess);
    EXPECT_TRUE(std::equal(in.begin(), in.begin() + static_cast<long>(n), out.begin() + static_cast<long>(skew)))
        << "skew " << skew;
    EXPECT_EQ(out[n + skew], 0) << "a byte past the output was written, skew " << skew;
  }
  // Overlapping: the message moves 4 bytes up within one buffer.
  std::vector<uint8_t> buf(in.begin(), in.begin() + static_cast<long>(n + 4));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(buf.data(), n, ncclUint8, 0, liveComm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(buf.data() + 4, n, ncclUint8, 0, liveComm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_TRUE(std::equal(in.begin(), in.begin() + static_cast<long>(n), buf.begin() + 4));
}

// ncclCommShrink's arguments on a one-rank communicator: the caller may not
// exclude itself, ranks must exist and appear once, and excluding nobody
// gives a communicator of the same ranks.
TEST(Api, ShrinkChecksItsArguments) {
  ASSERT_NE(liveComm(), nullptr);
  ncclComm_t small = reinterpret_cast<ncclComm_t>(1);
  int self[] = {0}, missing[] = {1}, twice[] = {1, 1};
  EXPECT_EQ(ncclCommShrink(liveComm(), self, 1, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("excludeRanksList"), std::string::npos);
  EXPECT_EQ(small, nullptr);
  EXPECT_EQ(ncclCommShrink(liveComm(), missing, 1, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(liveComm(), twice, 2, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(liveComm(), nullptr, 1, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(liveComm(), nullptr, -1, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(liveComm(), nullptr, 0, &small, nullptr, 7), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(liveComm(), nullptr, 0, nullptr, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(nullptr, nullptr, 0, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  ASSERT_EQ(ncclCommShrink(liveComm(), nullptr, 0, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(small, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  float in[3] = {1, 2, 3}, out[3] = {};
  EXPECT_EQ(ncclAllReduce(in, out, 3, ncclFloat, ncclSum, small, nullptr), ncclSuccess);
  EXPECT_EQ(out[2], 3.0f);
  EXPECT_EQ(ncclCommDestroy(small), ncclSuccess);
}

// A rejected init or split leaves no stale handle behind (as NCCL): code that
// tests the handle, or destroys it on the error path, must not see garbage.
// (ncclCommInitAll's array is left as it was when its arguments are
// rejected: its size is then not known to be ndev.)
TEST(Api, RejectedInitOrSplitClearsTheHandle) {
  ASSERT_NE(liveComm(), nullptr);
  ncclUniqueId id{};
  ncclConfig_t badMagic = NCCL_CONFIG_INITIALIZER;
  badMagic.magic = 0x1234;
  const std::vector<std::pair<const char*, std::function<ncclResult_t(ncclComm_t*)>>> calls = {
      {"InitRank", [&](ncclComm_t* c) { return ncclCommInitRank(c, 2, id, 5); }},
      {"InitRankConfig", [&](ncclComm_t* c) { return ncclCommInitRankConfig(c, 2, id, 0, &badMagic); }},
      {"Scalable", [&](ncclComm_t* c) { return ncclCommInitRankScalable(c, 2, 0, 3, &id, nullptr); }},
      {"Split", [&](ncclComm_t* c) { return ncclCommSplit(liveComm(), -7, 0, c, nullptr); }},
      {"Split of a bad parent", [&](ncclComm_t* c) { return ncclCommSplit(fakeComm(), 0, 0, c, nullptr); }},
      {"Shrink", [&](ncclComm_t* c) { return ncclCommShrink(liveComm(), nullptr, 0, c, nullptr, 9); }},
  };
  for (const auto& [name, call] : calls) {
    ncclComm_t handle = fakeComm();
    EXPECT_NE(call(&handle), ncclSuccess) << name;
    EXPECT_EQ(handle, nullptr) << name;
  }
}

// A communicator used before its non-blocking init completed: NCCL's code
// (ncclInvalidArgument, from ncclCommEnsureReady), saying why. Here the
// second rank never comes, so init cannot complete under the call.
TEST(Api, UseBeforeNonBlockingInitCompletesIsRefused) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);
  ASSERT_NE(comm, nullptr);
  float one = 1;
  EXPECT_EQ(ncclAllReduce(&one, &one, 1, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("still initializing"), std::string::npos)
      << ncclGetLastError(comm);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

TEST(Api, NullHandlesToDestroyAndAbortAreNoOps) {
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);  // as NCCL
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

TEST(Api, ErrorStringsNeverNull) {
  for (int r = -5; r < 20; ++r) {
    const char* s = errorStringRaw()(r);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 0u);
  }
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_NE(std::string(ncclGetErrorString(ncclRemoteError)).find("remote"), std::string::npos);
}

TEST(Api, ProfilingTwinsAreTheSameFunctions) {
  int a = 0, b = 0;
  EXPECT_EQ(pncclGetVersion(&a), ncclSuccess);
  EXPECT_EQ(ncclGetVersion(&b), ncclSuccess);
  EXPECT_EQ(a, b);
  EXPECT_STREQ(pncclGetErrorString(ncclInvalidUsage), ncclGetErrorString(ncclInvalidUsage));
}

TEST(Api, GroupsNestAndSimulate) {
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_EQ(sim.estimatedTime, 0.0f);  // an empty group takes no time
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 1;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  // The bad call ended the group, as NCCL's does: left open, the next
  // calls would be queued in it and "succeed" without running.
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  float in = 3, out = -1;
  for (ncclSimInfo_t* info : {&bad, static_cast<ncclSimInfo_t*>(nullptr)}) {
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
    EXPECT_EQ(ncclGroupSimulateEnd(info), ncclInvalidArgument);
    EXPECT_EQ(out, -1.0f);  // not run, as a simulated group's operations are not
    EXPECT_EQ(ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
    EXPECT_EQ(out, 3.0f);  // outside any group: runs at once
    out = -1;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A simulated group reports the selector's estimate of its collectives (more
// for more bytes), runs nothing, and leaves sends and receives unestimated.
TEST(Api, SimulatedGroupsEstimateTheirCollectives) {
  ncclComm_t comms[2] = {};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<float> buf(1 << 20, 1.0f);
  auto simulate = [&](size_t count) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    for (ncclComm_t c : comms) {
      EXPECT_EQ(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, c, nullptr), ncclSuccess);
    }
    EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
    return sim.estimatedTime;
  };
  const float small = simulate(1024), large = simulate(buf.size());
  EXPECT_GT(small, 0.0f);
  EXPECT_GT(large, small);
  EXPECT_LT(large, 1e7f);
  EXPECT_EQ(buf[0], 1.0f);  // nothing ran
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(buf.data(), 16, ncclFloat, 1, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclRecv(buf.data(), 16, ncclFloat, 0, comms[1], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_EQ(sim.estimatedTime, NCCL_UNDEF_FLOAT);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(Api, MemAllocRoundTrip) {
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(p), ncclInvalidArgument);  // double free is caught
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
}

// Memory under a live window or registration is not freed: the next
// ncclMemAlloc would return it at the same address, and the stale window's
// zero-copy collectives would use the peers' mappings of the old memory
// (wrong results with ncclSuccess). Deregistering, or destroying the
// communicator, lets it go.
TEST(Api, MemFreeRefusesMemoryThatIsStillRegistered) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  void* mem = nullptr;
  ASSERT_EQ(ncclMemAlloc(&mem, 8192), ncclSuccess);
  ncclWindow_t win = nullptr;
  void* handle = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(comm, mem, 8192, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(comm, static_cast<char*>(mem) + 4096, 64, &handle), ncclSuccess);
  EXPECT_EQ(ncclMemFree(mem), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("2 registration(s)"), std::string::npos)
      << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclCommWindowDeregister(comm, win), ncclSuccess);
  EXPECT_EQ(ncclMemFree(mem), ncclInvalidUsage);  // the buffer registration still holds it
  ASSERT_EQ(ncclCommDeregister(comm, handle), ncclSuccess);
  EXPECT_EQ(ncclMemFree(mem), ncclSuccess);

  // Left registered at destroy: released with the communicator.
  ASSERT_EQ(ncclMemAlloc(&mem, 8192), ncclSuccess);
  ASSERT_EQ(ncclCommWindowRegister(comm, mem, 8192, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclMemFree(mem), ncclSuccess);
}

// Shared memory beyond what the host can give is refused before any of it
// is reserved: reserving it would have the kernel kill processes, the
// caller's neighbours first, instead of failing the call.
TEST(Api, MemAllocBeyondTheHostsMemoryIsRefused) {
  const size_t huge = size_t(1) << 60;
  // The guard first: were it to let this size through, the call below would
  // reserve it for real.
  ASSERT_FALSE(braid::checkMemoryAvailable(huge, "a test").ok());
  EXPECT_TRUE(braid::checkMemoryAvailable(4096, "a test").ok());
  void* p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, huge), ncclSystemError);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("bytes are left"), std::string::npos)
      << ncclGetLastError(nullptr);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit
TEST(Api, BadEnvironmentFailsStartup) {
  setenv("NCCL_DEBUG_SUBSYS", "NOPE", 1);
  ncclResetDebugInit();
  ncclUniqueId id{};
  EXPECT_EQ(ncclGetUniqueId(&id), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_DEBUG_SUBSYS"), std::string::npos);
  unsetenv("NCCL_DEBUG_SUBSYS");
  ncclResetDebugInit();
}
#pragma GCC diagnostic pop

}  // namespace

// Exported by NCCL 2.28 and Braid, declared by no header.
extern "C" void ncclResetDebugInitInternal(void);

namespace {

// After NCCL_DEBUG_FILE changes, ncclResetDebugInitInternal makes the next
// WARN line go to the new file; unset again, lines leave it.
TEST(Api, ResetDebugInitInternalRereadsTheLogSettings) {
  char path[] = "/tmp/braid-log-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  setenv("NCCL_DEBUG_FILE", path, 1);
  ncclResetDebugInitInternal();
  int count = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &count), ncclInvalidArgument);  // a WARN line naming 'comm'
  unsetenv("NCCL_DEBUG_FILE");
  ncclResetDebugInitInternal();
  EXPECT_EQ(ncclCommCount(nullptr, &count), ncclInvalidArgument);  // to stderr now
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  EXPECT_NE(text.find("WARN"), std::string::npos) << text;
  EXPECT_NE(text.find("comm"), std::string::npos) << text;
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 1u) << text;
}

}  // namespace
