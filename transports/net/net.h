// The Net interface: how connectors reach ranks on other hosts (DESIGN.md
// §3 step 5), shaped like NCCL's net plugin (v8): devices with properties,
// non-blocking connection setup, asynchronous send/receive with test, and
// memory registration.
//
// Contract:
// - listen() on the receiving rank gives a handle (kNetHandleBytes of plain
//   data) that travels to the sending rank over the bootstrap; the sender
//   calls connect() with it, the receiver accept() with the listen comm.
//   Both are non-blocking: they return ok with a null comm until the
//   connection is complete and must be called again.
// - isend/irecv post one message; a message arrives whole, in order, and
//   its length is checked against the receiver's buffer (a longer message is
//   an error, never a silent truncation). test() reports completion, the
//   received size and the sender's tag. At most kNetMaxRequests requests are
//   in flight per comm.
// - Errors (a peer's death, a dropped link, a garbled frame) come back from
//   test() and name the remote address; a comm that failed stays failed.
// - A comm is used by one thread at a time (the proxy); listen comms may be
//   used by several communicators of one process at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace braid {

constexpr size_t kNetHandleBytes = 128;
constexpr int kNetMaxRequests = 16;
// A receive completes with this tag (and no data) when the sender closed its
// comm in an orderly way; nothing more arrives on that comm.
constexpr uint32_t kNetClosedTag = 0xffffffffu;

struct NetProperties {
  std::string name;     // interface name ("eth0")
  std::string pciPath;  // real sysfs path of the device, "" for virtual ones
  std::string busId;    // its PCI address ("0000:3b:00.0"), "" for virtual ones
  int speedMbps = 0;    // link speed, 0 when unknown
  int port = 0;         // the port the device listens on (0 until it does)
  int maxComms = 0;     // connections it can hold
  std::string address;  // "10.0.0.1"
};

struct NetHandle {
  char bytes[kNetHandleBytes];
};

class NetSendComm;
class NetRecvComm;
class NetListenComm;
class NetRequest;

class Net {
 public:
  virtual ~Net() = default;
  virtual const char* name() const = 0;
  virtual int devices() const = 0;
  virtual Status properties(int dev, NetProperties* out) const = 0;

  virtual Status listen(int dev, NetHandle* handle, NetListenComm** listenComm) = 0;
  // Non-blocking: *sendComm stays null until connected.
  virtual Status connect(int dev, const NetHandle& handle, NetSendComm** sendComm) = 0;
  // Non-blocking: *recvComm stays null until the sender connected.
  virtual Status accept(NetListenComm* listenComm, NetRecvComm** recvComm) = 0;

  // Memory the comm may send from or receive into (sockets need nothing;
  // verbs will pin and register it).
  virtual Status regMr(void* comm, void* data, size_t size, void** mhandle) = 0;
  virtual Status deregMr(void* comm, void* mhandle) = 0;

  // *request stays null when the comm has no free request slot (call again).
  virtual Status isend(NetSendComm* comm, const void* data, size_t size, uint32_t tag, void* mhandle,
                       NetRequest** request) = 0;
  virtual Status irecv(NetRecvComm* comm, void* data, size_t size, void* mhandle, NetRequest** request) = 0;
  // *done becomes true once the request completed (the request is then
  // freed); *size is the received (or sent) byte count, *tag the sender's.
  virtual Status test(NetRequest* request, bool* done, size_t* size, uint32_t* tag) = 0;

  virtual void closeSend(NetSendComm* comm) = 0;
  virtual void closeRecv(NetRecvComm* comm) = 0;
  virtual void closeListen(NetListenComm* comm) = 0;
};

// Fills `pciPath` and `busId` from a sysfs device link
// ("/sys/class/net/eth0/device"); both "" for a virtual device.
void describePciDevice(const std::string& sysLink, NetProperties* out);

// The Net chosen by `netName` (a communicator's config.netName: "Socket" or
// "IB"), else by NCCL_NET ("Socket", "IB" or unset). IB is refused with a
// WARN and an error that says why: Braid built without verbs headers,
// libibverbs.so.1 not loadable, no RDMA device (or none left by
// NCCL_IB_HCA), or devices present but the verbs data path not in this
// release. The choice and its reason are logged once at INFO (NET).
Status selectNet(Net** out, const std::string& netName = "");

}  // namespace braid
