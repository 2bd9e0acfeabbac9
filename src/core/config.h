// Communicator options, read from a user's ncclConfig_t.
//
// Programs built against older NCCL releases pass a smaller struct: its
// `size` says how many bytes are valid, and only fields that fit are read.
// Fields left at NCCL_CONFIG_UNDEF_* keep Braid's defaults.
#pragma once

#include <string>

#include "nccl.h"
#include "util/status.h"

namespace braid {

struct CommConfig {
  bool blocking = true;
  int cgaClusterSize = NCCL_CONFIG_UNDEF_INT;
  int minCTAs = NCCL_CONFIG_UNDEF_INT;  // channels, in Braid's words
  int maxCTAs = NCCL_CONFIG_UNDEF_INT;
  std::string netName;
  bool splitShare = false;
  int trafficClass = NCCL_CONFIG_UNDEF_INT;
  std::string commName;
  bool collnetEnable = false;
  int ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
  bool shrinkShare = false;
  int nvlsCTAs = NCCL_CONFIG_UNDEF_INT;
  int nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT;
  int nvlinkCentricSched = NCCL_CONFIG_UNDEF_INT;
};

// Smallest ncclConfig_t Braid accepts: size, magic, version and blocking
// (NCCL 2.14, the first release with configs).
constexpr size_t kMinConfigSize = offsetof(ncclConfig_t, blocking) + sizeof(int);

// Validates and reads `user` (NULL means all defaults) into `out`.
Status readCommConfig(const ncclConfig_t* user, CommConfig* out);

}  // namespace braid
