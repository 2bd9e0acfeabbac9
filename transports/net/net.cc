#include "transports/net/net.h"

#include <limits.h>
#include <stdlib.h>

#include <mutex>
#include <vector>

#include "transports/net/ibverbs/ib_config.h"
#include "transports/net/socket/socket_net.h"
#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"
#include "util/sysfs.h"
#ifdef BRAID_HAVE_IBVERBS
#include "transports/net/ibverbs/ib_net.h"
#include "transports/net/ibverbs/verbs_api.h"
#endif

namespace braid {
namespace {

StringParam paramNet("NET", "",
                     "Network transport for ranks on other hosts: Socket (TCP) or IB (verbs RC queue pairs "
                     "over InfiniBand/RoCE; fails if no RDMA port is usable); unset: IB when an ACTIVE RDMA "
                     "port is usable, else Socket",
                     {"Socket", "IB"});

BoolParam paramIbDisable("IB_DISABLE", false,
                         "Never use the verbs (IB/RoCE) network: ranks on other hosts talk over TCP even "
                         "where an RDMA port is usable (NCCL_NET=IB is then an error)");

constexpr const char* kUseSocket = "; unset NCCL_NET or set NCCL_NET=Socket to use TCP";

// Why NCCL_NET=IB cannot be served, as precisely as this machine allows:
// no verbs header at build time, libibverbs not loadable, no RDMA device
// (before or after NCCL_IB_HCA), or no port of those usable (ibNet's
// reason: none ACTIVE, no usable GID, ...). Ok: *out is the verbs Net.
Status openIbNet(Net** out) {
#ifndef BRAID_HAVE_IBVERBS
  (void)out;
  return systemError("NCCL_NET=IB: this Braid was built without <infiniband/verbs.h> (libibverbs-dev), so it "
                     "has no verbs (InfiniBand/RoCE) support",
                     kUseSocket);
#else
  IbSettings settings;
  BRAID_CHECK(ibSettings(&settings));
  const VerbsApi* api = nullptr;
  Status loaded = verbsApi(&api);
  if (!loaded.ok()) return Status(loaded.code(), strCat("NCCL_NET=IB: ", loaded.message(), kUseSocket));
  std::vector<RdmaPortInfo> ports;
  std::vector<std::string> notes;
  Status listed = listRdmaPorts(*api, &ports, &notes);
  if (!listed.ok()) return Status(listed.code(), strCat("NCCL_NET=IB: listing RDMA devices: ", listed.message()));
  std::string found, used;
  for (const RdmaPortInfo& p : ports) {
    const std::string name = strCat(p.device, ":", p.port);
    found += (found.empty() ? "" : ", ") + name;
    if (settings.hca.matches(p.device, p.port)) used += (used.empty() ? "" : ", ") + name;
  }
  std::string noteText;
  for (const std::string& n : notes) noteText += "; " + n;
  if (ports.empty()) {
    return systemError("NCCL_NET=IB: no RDMA device: ", api->origin, " lists none", noteText,
                       " (check `ls /sys/class/infiniband` and that the RDMA kernel modules are loaded)",
                       kUseSocket);
  }
  if (used.empty()) {
    return invalidUsage("NCCL_NET=IB: no RDMA device left after the filter NCCL_IB_HCA='", settings.hca.spec(),
                        "' (ports found: ", found, ")", noteText);
  }
  Status opened = ibNet(out);
  if (!opened.ok()) {
    return Status(opened.code(), strCat("NCCL_NET=IB: RDMA port(s) ", used,
                                        " found, but none is usable: ", opened.message(), kUseSocket));
  }
  return okStatus();
#endif
}

}  // namespace

void describePciDevice(const std::string& sysLink, NetProperties* out) {
  char real[PATH_MAX];
  out->pciPath = realpath(sysLink.c_str(), real) != nullptr ? real : "";
  out->busId = pciBusIdOf(sysLink);
}

Status selectNet(Net** out, const std::string& netName) {
  const std::string want = netName.empty() ? paramNet.get() : netName;
  std::string reason;
  if (want == "IB" && paramIbDisable.get()) {
    Status why = invalidArgument("NCCL_NET=IB contradicts NCCL_IB_DISABLE=1; unset one of them");
    BRAID_WARN("%s", why.message().c_str());
    return why;
  }
  if (want.empty() && paramIbDisable.get()) {
    BRAID_CHECK(socketNet(out));
    reason = "NCCL_IB_DISABLE=1";
  } else if (want == "IB") {
    Status why = openIbNet(out);
    if (!why.ok()) {
      BRAID_WARN("%s", why.message().c_str());
      return why;
    }
    reason = netName.empty() ? "NCCL_NET=IB" : "config.netName=IB";
  } else if (want.empty()) {
    // As NCCL: verbs when a usable RDMA port exists, else TCP.
    Status why = openIbNet(out);
    if (why.ok()) {
      reason = "NCCL_NET unset and an RDMA port is usable";
    } else {
      BRAID_CHECK(socketNet(out));
      // The refusal's text without its NCCL_NET=IB framing.
      std::string text = why.message();
      const std::string prefix = "NCCL_NET=IB: ";
      if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());
      const size_t hint = text.find(kUseSocket);
      if (hint != std::string::npos) text.erase(hint);
      reason = strCat("NCCL_NET unset and no RDMA port is usable: ", text);
    }
  } else {
    BRAID_CHECK(socketNet(out));
    reason = netName.empty() ? "NCCL_NET=Socket" : "config.netName=Socket";
  }
  static std::once_flag logged;
  std::call_once(logged, [&] {
    BRAID_INFO(kLogNet, "NET: using %s for ranks on other hosts (%s)", (*out)->name(), reason.c_str());
  });
  return okStatus();
}

}  // namespace braid
