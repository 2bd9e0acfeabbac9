#include "transports/net/net.h"

#include <mutex>
#include <vector>

#include "transports/net/ibverbs/ib_config.h"
#include "transports/net/socket/socket_net.h"
#include "util/log.h"
#include "util/param.h"
#include "util/strings.h"
#ifdef BRAID_HAVE_IBVERBS
#include "transports/net/ibverbs/verbs_api.h"
#endif

namespace braid {
namespace {

StringParam paramNet("NET", "",
                     "Network transport for ranks on other hosts: Socket (TCP) or IB (verbs: only checks "
                     "for RDMA devices in this release, then fails); unset: Socket",
                     {"Socket", "IB"});

constexpr const char* kUseSocket = "; unset NCCL_NET or set NCCL_NET=Socket to use TCP";

// Why NCCL_NET=IB cannot be served, as precisely as this machine allows:
// no verbs header at build time, libibverbs not loadable, no RDMA device
// (before or after NCCL_IB_HCA), or devices present but no data path yet.
Status ibNetUnavailable() {
#ifndef BRAID_HAVE_IBVERBS
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
  return invalidUsage("NCCL_NET=IB: RDMA port(s) ", used,
                      " found, but the verbs transport's data path (RC queue pairs) is not in this Braid "
                      "release",
                      kUseSocket);
#endif
}

}  // namespace

Status selectNet(Net** out) {
  const std::string want = paramNet.get();
  if (want == "IB") {
    Status why = ibNetUnavailable();
    if (why.ok()) why = internalError("NCCL_NET=IB: the verbs transport is not in this release");
    BRAID_WARN("%s", why.message().c_str());
    return why;
  }
  BRAID_CHECK(socketNet(out));
  static std::once_flag logged;
  std::call_once(logged, [&] {
    BRAID_INFO(kLogNet, "NET: using %s for ranks on other hosts (%s)", (*out)->name(),
               want.empty() ? "NCCL_NET unset; Socket is the only network transport in this release"
                            : "NCCL_NET=Socket");
  });
  return okStatus();
}

}  // namespace braid
