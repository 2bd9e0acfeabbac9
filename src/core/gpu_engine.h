// The GPU backend of one communicator: its device connectors (p2p
// transport), the tables kernels read them from, and the launches
// (DESIGN.md §3 step 3, GPU side).
//
// Connectors are set up on first use, as on the host: ring channel c links
// neighbours of ring c of the communicator's schedule (the topology's order),
// tree channels link tree neighbours (tree c % 2 of the double binary tree),
// peer channels link two ranks directly (the one-shot all-reduce and
// point-to-point). Peers on other hosts are reached through the net proxy. Ring and tree connections are
// collective (every rank reaches them in the same call); a peer connection involves only its two ranks, which
// reach it in matching sends and receives.
//
// Every launch is asynchronous on the caller's stream. Kernels watch an
// abort word in host-mapped memory (raised by ncclCommAbort and a failed
// net connector; a second bit, with a table of ranks, when the process of
// a peer of this host ends) and report a wait that failed (timed out,
// aborted, its peer's process gone) in a host-mapped status the host polls
// (ncclCommGetAsyncError). Built in the cuda and hip flavors; the host
// flavor's create() says the library was built without GPU support.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "tuning/tuning.h"

struct ncclDevCommRequirements;
struct ncclDevComm;

namespace braid {

struct CollArgs;
struct HostPlan;
struct P2pOp;
class Communicator;

class GpuEngine {
 public:
  static Status create(Communicator* comm, std::unique_ptr<GpuEngine>* out);
  virtual ~GpuEngine() = default;

  // Launches one collective on `stream` with the selector's choice. While
  // a group runs (groupFuses()), it may instead join the collectives
  // gathered before it, which share one launch when `flush` runs.
  // A zero-copy choice (plan.choice.zeroCopy) runs on the windows holding
  // the buffers (plan's window numbers and offsets), launched at once.
  virtual Status collective(const CollArgs& a, const HostPlan& plan) = 0;
  // Launches the gathered collectives, if any.
  virtual Status flush() = 0;
  // Whether `collective` would launch without first connecting with peers
  // (which blocks on them): see groupMustNotBlock(). `p2p` checks its own.
  virtual bool ready(const CollArgs& a, const TuneChoice& choice) const = 0;
  // Launches a group's sends and receives (one communicator) on `stream`;
  // in a group that must not block, groupWouldBlock() if it must connect.
  virtual Status p2p(const std::vector<P2pOp>& ops, void* stream) = 0;
  // Copies `bytes` at `src` into device memory the engine owns, in stream
  // order (in-place all-to-all sends from the copy); *out is the copy.
  virtual Status stage(const void* src, size_t bytes, void* stream, const void** out) = 0;
  // Raises the kernels' abort flag: every wait ends within microseconds.
  virtual void abort() = 0;
  // OK, or what a kernel reported (a wait that timed out or was aborted).
  virtual Status deviceStatus() const = 0;
  // Collective (ncclCommWindowRegister): maps window `number` (`buff`, `size`
  // bytes) of every rank into this GPU; bases[r] is rank r's buffer here.
  // A window that cannot be mapped leaves `why` set, not an error.
  virtual Status mapWindow(uint64_t number, void* buff, size_t size, std::vector<char*>* bases,
                           std::string* why) = 0;
  // Releases what mapWindow opened for window `number`.
  virtual void unmapWindow(uint64_t number) = 0;
  // ncclCommRegister: publishes registration `key` ([buff, buff + size),
  // memory of this GPU) for this host's other processes to map
  // (core/peer_buffers.h), where it can be; logs whether it was.
  virtual void shareBuffer(const void* key, void* buff, size_t size) = 0;
  // Channels the selector may use for a GPU collective.
  virtual int maxChannels() const = 0;

  // NCCL's device API (core/lsa_space.h). Collective: the device
  // descriptor of window `buff`, which the user gets as its ncclWindow_t
  // (`host`: the library's record of the window).
  virtual Status deviceWindowCreate(void* buff, size_t size, void* host, ncclWindow_t* win) = 0;
  // The library's record behind descriptor `win`; false if it is none of this communicator's.
  virtual bool deviceWindowHost(ncclWindow_t win, void** host) const = 0;
  virtual void deviceWindowDestroy(ncclWindow_t win) = 0;
  // Collective: ncclDevCommCreate and ncclDevCommDestroy.
  virtual Status devCommCreate(const ncclDevCommRequirements& reqs, ncclDevComm* out) = 0;
  virtual Status devCommDestroy(const ncclDevComm& devComm) = 0;
};

}  // namespace braid
