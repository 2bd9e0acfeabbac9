#include "transports/net/net.h"

#include <mutex>

#include "transports/net/socket/socket_net.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {

StringParam paramNet("NET", "",
                     "Network transport for ranks on other hosts: Socket (TCP) or IB (verbs, not in this "
                     "release); unset: Socket",
                     {"Socket", "IB"});

}  // namespace

Status selectNet(Net** out) {
  const std::string want = paramNet.get();
  if (want == "IB") {
    return invalidUsage(
        "NCCL_NET=IB: the verbs (InfiniBand/RoCE) transport is not available in this Braid "
        "release; unset NCCL_NET or set NCCL_NET=Socket to use TCP");
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
