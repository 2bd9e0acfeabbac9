// Point-to-point operations and the collectives made of them (all-to-all,
// all-to-allv, gather, scatter).
//
// A batch of sends and receives of one communicator runs as one unit: all
// connectors are set up together, then one loop progresses every operation
// as far as its connector allows, so any pattern (A sends to B while B sends
// to A, large messages both ways) completes without deadlock. Operations
// between the same two ranks in the same direction go in call order. A send
// to or receive from oneself is a copy, matched in call order. On the GPU
// backend the batch is one kernel launch on the first operation's stream.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/comm.h"

namespace braid {

struct P2pOp {
  bool isSend;
  int peer;
  const void* sendBuf;
  void* recvBuf;
  size_t bytes;
  std::shared_ptr<const void> keep = nullptr;  // owns a staging copy of sendBuf, if any, until the op ran
  void* stream = nullptr;                      // GPU backend: the caller's stream
};

Status runP2pBatch(Communicator* comm, const std::vector<P2pOp>& ops);

// Queues ops into the current group, or runs them now as their own group.
Status enqueueP2p(Communicator* comm, const std::vector<P2pOp>& ops);

// The collectives made of sends and receives. Counts and displacements are
// in elements of `type`; every rank's buffer arguments are validated by the
// API layer. All-to-all, gather and scatter of count 0 return at once (every
// rank passes the same count, so none waits for them); all-to-allv's empty
// blocks are matched sends and receives of 0 bytes like any other.
Status enqueueAllToAllv(Communicator* comm, const void* send, const size_t* sendCounts, const size_t* sendDispls,
                        void* recv, const size_t* recvCounts, const size_t* recvDispls, ncclDataType_t type,
                        void* stream);
Status enqueueAllToAll(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type,
                       void* stream);
Status enqueueGather(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                     void* stream);
Status enqueueScatter(Communicator* comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                      void* stream);

}  // namespace braid
