#include "transports/net/ibverbs/verbs_api.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "transports/net/ibverbs/ib_config.h"
#include "util/strings.h"

namespace braid {
namespace {

const VerbsApi* gTestApi = nullptr;

// The library's ibv_query_port (the legacy entry the header's inline wrapper
// falls back to); set when the library is loaded.
int (*gLibQueryPort)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;

// Wrappers for rdma-core's static inline functions (and ibv_query_port's macro).
int queryPortWrapper(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  verbs_context* vctx = verbs_get_ctx_op(context, query_port);
  if (vctx != nullptr) return vctx->query_port(context, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return gLibQueryPort(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}
// The library's _ibv_query_gid_ex (ibv_query_gid_ex's inline wrapper adds
// the entry size); null on rdma-core before 32.
int (*gLibQueryGidEx)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t) = nullptr;

int queryGidExWrapper(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                      uint32_t flags) {
  return gLibQueryGidEx(context, port, index, entry, flags, sizeof(*entry));
}
int pollCqWrapper(ibv_cq* cq, int numEntries, ibv_wc* wc) {
  return ibv_poll_cq(cq, numEntries, wc);
}
int postSendWrapper(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** badWr) {
  return ibv_post_send(qp, wr, badWr);
}
int postRecvWrapper(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** badWr) {
  return ibv_post_recv(qp, wr, badWr);
}

template <typename Fn>
Status bind(void* lib, const char* symbol, Fn* out) {
  void* p = dlsym(lib, symbol);
  if (p == nullptr) {
    return systemError("libibverbs.so.1 lacks ", symbol,
                       " (rdma-core too old or a broken install?); the verbs transport cannot be used");
  }
  *out = reinterpret_cast<Fn>(p);
  return okStatus();
}

Status loadLibrary(VerbsApi* api) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return systemError("cannot load libibverbs.so.1 (", why != nullptr ? why : "unknown reason",
                       "): install rdma-core (Debian/Ubuntu: ibverbs-providers and libibverbs1)");
  }
  api->origin = "libibverbs.so.1";
  BRAID_CHECK(bind(lib, "ibv_get_device_list", &api->getDeviceList));
  BRAID_CHECK(bind(lib, "ibv_free_device_list", &api->freeDeviceList));
  BRAID_CHECK(bind(lib, "ibv_get_device_name", &api->getDeviceName));
  BRAID_CHECK(bind(lib, "ibv_open_device", &api->openDevice));
  BRAID_CHECK(bind(lib, "ibv_close_device", &api->closeDevice));
  BRAID_CHECK(bind(lib, "ibv_query_device", &api->queryDevice));
  BRAID_CHECK(bind(lib, "ibv_query_port", &gLibQueryPort));
  api->queryPort = queryPortWrapper;
  BRAID_CHECK(bind(lib, "ibv_query_gid", &api->queryGid));
  gLibQueryGidEx = reinterpret_cast<decltype(gLibQueryGidEx)>(dlsym(lib, "_ibv_query_gid_ex"));
  if (gLibQueryGidEx != nullptr) api->queryGidEx = queryGidExWrapper;  // optional
  BRAID_CHECK(bind(lib, "ibv_alloc_pd", &api->allocPd));
  BRAID_CHECK(bind(lib, "ibv_dealloc_pd", &api->deallocPd));
  BRAID_CHECK(bind(lib, "ibv_reg_mr", &api->regMr));
  api->regDmabufMr =
      reinterpret_cast<decltype(api->regDmabufMr)>(dlsym(lib, "ibv_reg_dmabuf_mr"));  // optional
  BRAID_CHECK(bind(lib, "ibv_dereg_mr", &api->deregMr));
  BRAID_CHECK(bind(lib, "ibv_create_cq", &api->createCq));
  BRAID_CHECK(bind(lib, "ibv_destroy_cq", &api->destroyCq));
  api->pollCq = pollCqWrapper;
  BRAID_CHECK(bind(lib, "ibv_create_qp", &api->createQp));
  BRAID_CHECK(bind(lib, "ibv_modify_qp", &api->modifyQp));
  BRAID_CHECK(bind(lib, "ibv_query_qp", &api->queryQp));
  BRAID_CHECK(bind(lib, "ibv_destroy_qp", &api->destroyQp));
  api->postSend = postSendWrapper;
  api->postRecv = postRecvWrapper;
  return okStatus();  // the library stays loaded for the life of the process
}

// The table of the library BRAID_IB_VERBS_TABLE names (a test device).
Status loadTableLibrary(const std::string& path, const VerbsApi** out) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return invalidUsage("BRAID_IB_VERBS_TABLE: cannot load ", path, " (", why != nullptr ? why : "unknown", ")");
  }
  auto fn = reinterpret_cast<BraidVerbsTableFn>(dlsym(lib, BRAID_VERBS_TABLE_SYMBOL));
  if (fn == nullptr) {
    return invalidUsage("BRAID_IB_VERBS_TABLE: ", path, " does not export ", BRAID_VERBS_TABLE_SYMBOL, "()");
  }
  const VerbsApi* api = fn();
  if (api == nullptr) return invalidUsage("BRAID_IB_VERBS_TABLE: ", path, " returned no verbs table");
  BRAID_CHECK(checkVerbsApi(*api));
  *out = api;
  return okStatus();
}

}  // namespace

Status checkVerbsApi(const VerbsApi& api) {
  struct Entry {
    const char* name;
    bool set;
  };
  const Entry entries[] = {
      {"getDeviceList", api.getDeviceList != nullptr},
      {"freeDeviceList", api.freeDeviceList != nullptr},
      {"getDeviceName", api.getDeviceName != nullptr},
      {"openDevice", api.openDevice != nullptr},
      {"closeDevice", api.closeDevice != nullptr},
      {"queryDevice", api.queryDevice != nullptr},
      {"queryPort", api.queryPort != nullptr},
      {"queryGid", api.queryGid != nullptr},
      {"allocPd", api.allocPd != nullptr},
      {"deallocPd", api.deallocPd != nullptr},
      {"regMr", api.regMr != nullptr},
      {"deregMr", api.deregMr != nullptr},
      {"createCq", api.createCq != nullptr},
      {"destroyCq", api.destroyCq != nullptr},
      {"pollCq", api.pollCq != nullptr},
      {"createQp", api.createQp != nullptr},
      {"modifyQp", api.modifyQp != nullptr},
      {"queryQp", api.queryQp != nullptr},
      {"destroyQp", api.destroyQp != nullptr},
      {"postSend", api.postSend != nullptr},
      {"postRecv", api.postRecv != nullptr},
  };
  for (const Entry& e : entries) {
    if (!e.set) {
      return internalError("verbs table '", api.origin != nullptr ? api.origin : "?", "' has no ", e.name,
                           " entry");
    }
  }
  return okStatus();
}

Status verbsApi(const VerbsApi** out) {
  if (gTestApi != nullptr) {
    BRAID_CHECK(checkVerbsApi(*gTestApi));
    *out = gTestApi;
    return okStatus();
  }
  static VerbsApi library;
  static const VerbsApi* table = nullptr;
  static Status loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string path = verbsTableLibrary();
    if (!path.empty()) {
      loaded = loadTableLibrary(path, &table);
    } else {
      loaded = loadLibrary(&library);
      table = &library;
    }
  });
  if (!loaded.ok()) return loaded;
  *out = table;
  return okStatus();
}

void setVerbsApiForTesting(const VerbsApi* api) {
  gTestApi = api;
}

Status listRdmaPorts(const VerbsApi& api, std::vector<RdmaPortInfo>* out, std::vector<std::string>* notes) {
  out->clear();
  int n = 0;
  ibv_device** list = api.getDeviceList(&n);
  if (list == nullptr) {
    const int err = errno;
    // No kernel support (ENOSYS) reads as "no device", like rdma-core's tools.
    if (err == ENOSYS || err == 0) return okStatus();
    return errnoError("ibv_get_device_list", err);
  }
  for (int i = 0; i < n; ++i) {
    const char* name = api.getDeviceName(list[i]);
    const std::string device = name != nullptr ? name : strCat("device", i);
    ibv_context* ctx = api.openDevice(list[i]);
    if (ctx == nullptr) {
      notes->push_back(strCat(device, ": ibv_open_device failed (", std::strerror(errno),
                              "): permissions on /dev/infiniband?"));
      continue;
    }
    ibv_device_attr dattr;
    std::memset(&dattr, 0, sizeof(dattr));
    if (api.queryDevice(ctx, &dattr) != 0) {
      notes->push_back(strCat(device, ": ibv_query_device failed (", std::strerror(errno), ")"));
      api.closeDevice(ctx);
      continue;
    }
    for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
      ibv_port_attr pattr;
      std::memset(&pattr, 0, sizeof(pattr));
      if (api.queryPort(ctx, static_cast<uint8_t>(p), &pattr) != 0) {
        notes->push_back(strCat(device, " port ", p, ": ibv_query_port failed (", std::strerror(errno), ")"));
        continue;
      }
      RdmaPortInfo info;
      info.device = device;
      info.port = p;
      info.state = pattr.state;
      info.linkLayer = pattr.link_layer;
      out->push_back(info);
    }
    api.closeDevice(ctx);
  }
  api.freeDeviceList(list);
  return okStatus();
}

}  // namespace braid
