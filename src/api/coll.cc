// Collectives and point-to-point: arguments are validated here, then the
// call goes to the enqueue layer (core/enqueue.h, core/p2p.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "api/api.h"
#include "braid.h"
#include "core/enqueue.h"
#include "core/p2p.h"

using namespace braid;

namespace {

// Checks shared by every data-moving call. `count` elements are read from
// `send` and written to `recv` (either may be unused: pass a non-null dummy).
// With `out`, also returns the communicator.
Status checkData(CommUse* use, ncclComm_t comm, const void* send, const char* sendName, const void* recv,
                 const char* recvName, size_t count, int type, Communicator** out) {
  Communicator* c = nullptr;
  BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, use));
  BRAID_CHECK(c->refuseIfRevoked());
  if (out != nullptr) *out = c;
  BRAID_CHECK(api::checkDatatype(type));
  if (count > 0) {
    BRAID_CHECK(api::checkNotNull(send, sendName));
    BRAID_CHECK(api::checkNotNull(recv, recvName));
  }
  return okStatus();
}

// The buffers one rank's call touches: `sendBlocks` blocks of `count`
// elements from `send`, `recvBlocks` into `recv` (0: that buffer is not
// touched on this rank). Their sizes must fit an address space, and the two
// must not overlap unless the send buffer starts exactly `inPlaceBlocks`
// blocks into the receive buffer (negative: the receive buffer that far into
// the send buffer), the collective's in-place form; any other overlap would
// read data the same call overwrites.
Status checkBuffers(size_t count, int type, const void* send, int sendBlocks, const void* recv,
                    int recvBlocks, int inPlaceBlocks) {
  if (count == 0) return okStatus();
  const size_t es = datatypeSize(static_cast<ncclDataType_t>(type));
  const size_t blocks = static_cast<size_t>(std::max(sendBlocks, recvBlocks));
  if (count > static_cast<size_t>(PTRDIFF_MAX) / es / std::max<size_t>(blocks, 1)) {
    return invalidArgument("argument 'count' is ", count, ": ",
                           blocks > 1 ? strCat(blocks, " blocks (one per rank) of ") : std::string(), count,
                           " elements of ", es, " bytes do not fit an address space");
  }
  const size_t block = count * es, sendBytes = sendBlocks * block, recvBytes = recvBlocks * block;
  const uintptr_t s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  BRAID_CHECK(api::checkRange(send, sendBytes, "sendbuff"));
  BRAID_CHECK(api::checkRange(recv, recvBytes, "recvbuff"));
  if (sendBytes == 0 || recvBytes == 0 || s + sendBytes <= r || r + recvBytes <= s) return okStatus();
  const ptrdiff_t inPlace = static_cast<ptrdiff_t>(inPlaceBlocks) * static_cast<ptrdiff_t>(block);
  if (static_cast<ptrdiff_t>(s - r) == inPlace) return okStatus();
  return invalidArgument("arguments 'sendbuff' (", send, ", ", sendBytes, " bytes) and 'recvbuff' (", recv,
                         ", ", recvBytes, " bytes) overlap but are not this call's in-place form (",
                         inPlace == 0  ? std::string("sendbuff == recvbuff")
                         : inPlace > 0 ? strCat("sendbuff == recvbuff + ", inPlace, " bytes")
                                       : strCat("recvbuff == sendbuff + ", -inPlace, " bytes"),
                         "); pass that or disjoint buffers");
}

// Element `displ` to `displ + count` of a buffer (all-to-allv's block for
// peer p) must fit an address space.
Status checkExtent(const char* countsName, const char* displsName, int p, size_t count, size_t displ,
                   int type) {
  const size_t maxElems = static_cast<size_t>(PTRDIFF_MAX) / datatypeSize(static_cast<ncclDataType_t>(type));
  if (count > 0 && (displ > maxElems || count > maxElems - displ)) {
    return invalidArgument("arguments '", countsName, "[", p, "]' (", count, ") and '", displsName, "[", p,
                           "]' (", displ, ") reach past what an address space holds");
  }
  return okStatus();
}

// All-to-allv's blocks, one per peer and direction: none may reach past
// the top of the address space, and a receive block may overlap neither a
// send block (all-to-allv has no in-place form: the call would send bytes
// it has overwritten) nor another receive block (two ranks' data would land
// on the same bytes). Send blocks may share bytes: they are only read.
Status checkAllToAllvBlocks(const void* send, const size_t* sendCounts, const size_t* sdispls,
                            const void* recv, const size_t* recvCounts, const size_t* rdispls, int nranks,
                            size_t es) {
  struct Block {
    uintptr_t begin, end;
    int peer;
    bool isRecv;
  };
  std::vector<Block> blocks;
  for (int p = 0; p < nranks; ++p) {
    for (const bool isRecv : {false, true}) {
      const size_t count = isRecv ? recvCounts[p] : sendCounts[p], displ = isRecv ? rdispls[p] : sdispls[p];
      if (count == 0) continue;
      // checkExtent bounded (displ + count) * es by PTRDIFF_MAX: no overflow.
      const uintptr_t base = reinterpret_cast<uintptr_t>(isRecv ? recv : send);
      if (displ * es > UINTPTR_MAX - base || count * es > UINTPTR_MAX - base - displ * es) {
        return invalidArgument("arguments '", isRecv ? "recvbuff" : "sendbuff", "' (", isRecv ? recv : send,
                               "), '", isRecv ? "rdispls[" : "sdispls[", p, "]' (", displ, ") and '",
                               isRecv ? "recvcounts[" : "sendcounts[", p, "]' (", count,
                               ") reach past the top of the address space");
      }
      blocks.push_back({base + displ * es, base + displ * es + count * es, p, isRecv});
    }
  }
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.begin < b.begin; });
  auto describe = [](const Block& b) {
    return strCat(b.isRecv ? "receive block from rank " : "send block to rank ", b.peer, " (",
                  reinterpret_cast<const void*>(b.begin), ", ", b.end - b.begin, " bytes)");
  };
  // Among the blocks before each one, the send and the receive block that
  // reach farthest: one of them overlaps it if any does.
  const Block* farthest[2] = {nullptr, nullptr};
  for (const Block& b : blocks) {
    for (const bool isRecv : {false, true}) {
      const Block* a = farthest[isRecv];
      if (a != nullptr && a->end > b.begin && (isRecv || b.isRecv)) {
        return invalidArgument(
            "all-to-allv's ", describe(*a), " and ", describe(b), " overlap: ",
            isRecv && b.isRecv ? "two ranks' data would land on the same bytes" : "it has no in-place form",
            "; pass disjoint blocks");
      }
    }
    if (farthest[b.isRecv] == nullptr || b.end > farthest[b.isRecv]->end) farthest[b.isRecv] = &b;
  }
  return okStatus();
}

Status checkRoot(int root, const Communicator* c = nullptr) {
  if (root < 0 || (c != nullptr && root >= c->nranks())) {
    return invalidArgument("argument 'root' is ", root, "; it must be a rank of the communicator");
  }
  return okStatus();
}

Status checkPeer(int peer, const Communicator* c) {
  if (peer < 0 || peer >= c->nranks()) {
    return invalidArgument("argument 'peer' is ", peer, "; it must be a rank of the communicator (0..",
                           c->nranks() - 1, ")");
  }
  return okStatus();
}
}  // namespace

BRAID_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclAllReduce", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, 1, recvbuff, 1, 0));
    BRAID_CHECK(api::checkRedOp(api::rawEnum(op)));
    return enqueueCollective(c, {CollType::AllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclReduce", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", sendbuff, "sendbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(api::checkRedOp(api::rawEnum(op)));
    BRAID_CHECK(checkRoot(root));
    if (count > 0 && c->rank() == root) BRAID_CHECK(api::checkNotNull(recvbuff, "recvbuff"));  // root only
    BRAID_CHECK(
        checkBuffers(count, api::rawEnum(datatype), sendbuff, 1, recvbuff, c->rank() == root ? 1 : 0, 0));
    return enqueueCollective(c, {CollType::Reduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclBroadcast", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, recvbuff, "recvbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkRoot(root));
    if (count > 0 && c->rank() == root) BRAID_CHECK(api::checkNotNull(sendbuff, "sendbuff"));  // root only
    BRAID_CHECK(
        checkBuffers(count, api::rawEnum(datatype), sendbuff, c->rank() == root ? 1 : 0, recvbuff, 1, 0));
    return enqueueCollective(c, {CollType::Broadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
          ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclBcast", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, buff, "buff", buff, "buff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), buff, 1, buff, 1, 0));
    BRAID_CHECK(checkRoot(root));
    return enqueueCollective(c, {CollType::Broadcast, "ncclBcast", buff, buff, count, datatype, ncclSum, root, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclReduceScatter", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", recvbuff, "recvbuff", recvcount, api::rawEnum(datatype), &c));
    BRAID_CHECK(
        checkBuffers(recvcount, api::rawEnum(datatype), sendbuff, c->nranks(), recvbuff, 1, -c->rank()));
    BRAID_CHECK(api::checkRedOp(api::rawEnum(op)));
    return enqueueCollective(
        c, {CollType::ReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, 0, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
          ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclAllGather", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", recvbuff, "recvbuff", sendcount, api::rawEnum(datatype), &c));
    BRAID_CHECK(
        checkBuffers(sendcount, api::rawEnum(datatype), sendbuff, 1, recvbuff, c->nranks(), c->rank()));
    return enqueueCollective(c, {CollType::AllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream});
  }, comm);
}

BRAID_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclAlltoAll", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, c->nranks(), recvbuff, c->nranks(), 0));
    return enqueueAllToAll(c, sendbuff, recvbuff, count, datatype, stream);
  }, comm);
}

BRAID_API(ncclResult_t, ncclAllToAll, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclAllToAll", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, c->nranks(), recvbuff, c->nranks(), 0));
    return enqueueAllToAll(c, sendbuff, recvbuff, count, datatype, stream);
  }, comm);
}

BRAID_API(ncclResult_t, ncclAllToAllv, const void* sendbuff, const size_t sendcounts[],
          const size_t sdispls[], void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
          ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclAllToAllv", [&]() -> Status {
    CommUse use;
    Communicator* c = nullptr;
    BRAID_CHECK(lookupComm(comm, &c, /*needReady=*/true, &use));
    BRAID_CHECK(c->refuseIfRevoked());
    BRAID_CHECK(api::checkDatatype(api::rawEnum(datatype)));
    BRAID_CHECK(api::checkNotNull(sendcounts, "sendcounts"));
    BRAID_CHECK(api::checkNotNull(sdispls, "sdispls"));
    BRAID_CHECK(api::checkNotNull(recvcounts, "recvcounts"));
    BRAID_CHECK(api::checkNotNull(rdispls, "rdispls"));
    for (int p = 0; p < c->nranks(); ++p) {
      if (sendcounts[p] > 0) BRAID_CHECK(api::checkNotNull(sendbuff, "sendbuff"));
      if (recvcounts[p] > 0) BRAID_CHECK(api::checkNotNull(recvbuff, "recvbuff"));
      BRAID_CHECK(checkExtent("sendcounts", "sdispls", p, sendcounts[p], sdispls[p], api::rawEnum(datatype)));
      BRAID_CHECK(checkExtent("recvcounts", "rdispls", p, recvcounts[p], rdispls[p], api::rawEnum(datatype)));
    }
    BRAID_CHECK(checkAllToAllvBlocks(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                                     c->nranks(), datatypeSize(datatype)));
    return enqueueAllToAllv(c, sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, stream);
  }, comm);
}

BRAID_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclGather", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", sendbuff, "sendbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkRoot(root, c));
    if (count > 0 && c->rank() == root) BRAID_CHECK(api::checkNotNull(recvbuff, "recvbuff"));  // root only
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, 1, recvbuff,
                             c->rank() == root ? c->nranks() : 0, root));
    return enqueueGather(c, sendbuff, recvbuff, count, datatype, root, stream);
  }, comm);
}

BRAID_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclScatter", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, recvbuff, "recvbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkRoot(root, c));
    if (count > 0 && c->rank() == root) BRAID_CHECK(api::checkNotNull(sendbuff, "sendbuff"));  // root only
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, c->rank() == root ? c->nranks() : 0,
                             recvbuff, 1, -root));
    return enqueueScatter(c, sendbuff, recvbuff, count, datatype, root, stream);
  }, comm);
}

BRAID_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
          int peer, ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclSend", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, sendbuff, "sendbuff", sendbuff, "sendbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkPeer(peer, c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), sendbuff, 1, nullptr, 0, 0));
    return enqueueP2p(c, {{true, peer, sendbuff, nullptr, count * datatypeSize(datatype), nullptr, stream}});
  }, comm);
}

BRAID_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, braidStream_t stream) {
  return api::apiGuard("ncclRecv", [&]() -> Status {
    CommUse use;  // held while the operation runs
    Communicator* c = nullptr;
    BRAID_CHECK(checkData(&use, comm, recvbuff, "recvbuff", recvbuff, "recvbuff", count, api::rawEnum(datatype), &c));
    BRAID_CHECK(checkPeer(peer, c));
    BRAID_CHECK(checkBuffers(count, api::rawEnum(datatype), nullptr, 0, recvbuff, 1, 0));
    return enqueueP2p(c, {{false, peer, nullptr, recvbuff, count * datatypeSize(datatype), nullptr, stream}});
  }, comm);
}
