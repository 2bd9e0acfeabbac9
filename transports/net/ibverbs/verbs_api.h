// The libibverbs entry points the verbs transport uses, as one table of plain
// function pointers. The library is opened with dlopen("libibverbs.so.1"), so
// Braid loads and runs where rdma-core is absent; tests install their own
// table (an in-process software device) with setVerbsApiForTesting().
//
// rdma-core declares ibv_poll_cq, ibv_post_send and ibv_post_recv as static
// inline functions that call through the context's ops, and ibv_query_port as
// a macro over an inline wrapper: they have no symbol to dlsym. The loaded
// table holds small functions that call those inline wrappers, so every entry
// has the plain signature below whichever table is installed.
//
// This header needs <infiniband/verbs.h> (libibverbs-dev / rdma-core-devel);
// CMake compiles the files that include it only where the header exists
// (BRAID_HAVE_IBVERBS).
#pragma once

#if !__has_include(<infiniband/verbs.h>)
#error "verbs_api.h needs <infiniband/verbs.h>: build it only where BRAID_HAVE_IBVERBS is set"
#endif
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "util/status.h"

namespace braid {

struct VerbsApi {
  // Where the table came from ("libibverbs.so.1", "software device", ...).
  const char* origin = nullptr;

  ibv_device** (*getDeviceList)(int* numDevices) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  // Optional (rdma-core 32+, ibv_query_gid_ex): the entry with its type
  // (IBV_GID_TYPE_*) and net device; null when absent (then sysfs tells).
  int (*queryGidEx)(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                    uint32_t flags) = nullptr;

  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  // Optional (rdma-core 34+ and a kernel with dma-buf support): null when absent.
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                         int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;

  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  int (*pollCq)(ibv_cq* cq, int numEntries, ibv_wc* wc) = nullptr;

  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int attrMask) = nullptr;
  int (*queryQp)(ibv_qp* qp, ibv_qp_attr* attr, int attrMask, ibv_qp_init_attr* initAttr) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  int (*postSend)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** badWr) = nullptr;
  int (*postRecv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** badWr) = nullptr;
};

// The table in use: the one a test installed, else the provider library
// named by BRAID_IB_VERBS_TABLE (a test device, see below), else
// libibverbs.so.1 (opened once, never closed). An error names the library or
// the missing symbol.
Status verbsApi(const VerbsApi** out);

// Installs `api` as the table verbsApi() returns (tests; null restores the
// library). Not thread-safe against concurrent verbsApi() calls.
void setVerbsApiForTesting(const VerbsApi* api);

// A library named by BRAID_IB_VERBS_TABLE exports this C symbol returning
// its table: how a separate process (a multi-node test rank) runs on a
// software verbs device without rdma-core or an RDMA NIC.
#define BRAID_VERBS_TABLE_SYMBOL "braid_verbs_table"
extern "C" typedef const VerbsApi* (*BraidVerbsTableFn)();

// Checks that every mandatory entry of `api` is set; the error names the
// first missing one.
Status checkVerbsApi(const VerbsApi& api);

// One port of an RDMA device, as verbs reports it.
struct RdmaPortInfo {
  std::string device;  // "mlx5_0"
  int port = 0;        // 1-based
  int state = 0;       // IBV_PORT_* (4: active)
  int linkLayer = 0;   // IBV_LINK_LAYER_* (1: InfiniBand, 2: Ethernet)
};

// Every port of every device the table reports (devices that cannot be
// opened are skipped and named in *notes).
Status listRdmaPorts(const VerbsApi& api, std::vector<RdmaPortInfo>* out, std::vector<std::string>* notes);

}  // namespace braid
