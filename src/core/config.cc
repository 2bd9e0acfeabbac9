#include "core/config.h"

#include <strings.h>

#include <cstring>

namespace braid {
namespace {

// True if the field at [offset, offset+size) lies inside the user's struct.
bool fits(const ncclConfig_t* user, size_t offset, size_t size) { return offset + size <= user->size; }

#define BRAID_CONFIG_HAS(user, field) fits(user, offsetof(ncclConfig_t, field), sizeof(user->field))

Status readFlag(const char* name, int value, bool* out) {
  if (value == NCCL_CONFIG_UNDEF_INT) return okStatus();
  if (value != 0 && value != 1) return invalidArgument("config.", name, " is ", value, "; it must be 0 or 1");
  *out = value == 1;
  return okStatus();
}

Status readPositive(const char* name, int value, int* out) {
  if (value == NCCL_CONFIG_UNDEF_INT) return okStatus();
  if (value < 0) return invalidArgument("config.", name, " is ", value, "; it must not be negative");
  *out = value;
  return okStatus();
}

}  // namespace

Status readCommConfig(const ncclConfig_t* user, CommConfig* out) {
  *out = CommConfig();
  if (user == nullptr) return okStatus();
  if (user->magic != NCCL_CONFIG_MAGIC) {
    return invalidArgument("config.magic is 0x", std::hex, user->magic, std::dec,
                           "; initialize the config with NCCL_CONFIG_INITIALIZER");
  }
  if (user->size < kMinConfigSize) {
    return invalidArgument("config.size is ", user->size, "; an ncclConfig_t has at least ",
                           kMinConfigSize, " bytes (initialize it with NCCL_CONFIG_INITIALIZER)");
  }
  if (user->size > 4096) {
    return invalidArgument("config.size is ", user->size,
                           ", which is not the size of any ncclConfig_t; initialize it with "
                           "NCCL_CONFIG_INITIALIZER");
  }
  BRAID_CHECK(readFlag("blocking", user->blocking, &out->blocking));
  if (BRAID_CONFIG_HAS(user, cgaClusterSize)) {
    BRAID_CHECK(readPositive("cgaClusterSize", user->cgaClusterSize, &out->cgaClusterSize));
  }
  if (BRAID_CONFIG_HAS(user, minCTAs)) BRAID_CHECK(readPositive("minCTAs", user->minCTAs, &out->minCTAs));
  if (BRAID_CONFIG_HAS(user, maxCTAs)) BRAID_CHECK(readPositive("maxCTAs", user->maxCTAs, &out->maxCTAs));
  if (out->minCTAs != NCCL_CONFIG_UNDEF_INT && out->maxCTAs != NCCL_CONFIG_UNDEF_INT &&
      out->minCTAs > out->maxCTAs) {
    return invalidArgument("config.minCTAs (", out->minCTAs, ") is greater than config.maxCTAs (",
                           out->maxCTAs, ")");
  }
  if (BRAID_CONFIG_HAS(user, netName) && user->netName != nullptr) {
    // As NCCL_NET (which it overrides): Braid's nets, any case.
    const std::string name = user->netName;
    if (strcasecmp(name.c_str(), "Socket") == 0) {
      out->netName = "Socket";
    } else if (strcasecmp(name.c_str(), "IB") == 0) {
      out->netName = "IB";
    } else {
      return invalidArgument("config.netName is '", name, "'; Braid's nets are Socket and IB");
    }
  }
  if (BRAID_CONFIG_HAS(user, splitShare)) BRAID_CHECK(readFlag("splitShare", user->splitShare, &out->splitShare));
  if (BRAID_CONFIG_HAS(user, trafficClass)) {
    BRAID_CHECK(readPositive("trafficClass", user->trafficClass, &out->trafficClass));
  }
  if (BRAID_CONFIG_HAS(user, commName) && user->commName != nullptr) out->commName = user->commName;
  if (BRAID_CONFIG_HAS(user, collnetEnable)) {
    BRAID_CHECK(readFlag("collnetEnable", user->collnetEnable, &out->collnetEnable));
  }
  if (BRAID_CONFIG_HAS(user, CTAPolicy) && user->CTAPolicy != NCCL_CONFIG_UNDEF_INT) {
    int known = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
    if (user->CTAPolicy < 0 || (user->CTAPolicy & ~known) != 0) {
      return invalidArgument("config.CTAPolicy is ", user->CTAPolicy,
                             "; use NCCL_CTA_POLICY_DEFAULT, _EFFICIENCY or _ZERO");
    }
    out->ctaPolicy = user->CTAPolicy;
  }
  if (BRAID_CONFIG_HAS(user, shrinkShare)) {
    BRAID_CHECK(readFlag("shrinkShare", user->shrinkShare, &out->shrinkShare));
  }
  if (BRAID_CONFIG_HAS(user, nvlsCTAs)) BRAID_CHECK(readPositive("nvlsCTAs", user->nvlsCTAs, &out->nvlsCTAs));
  if (BRAID_CONFIG_HAS(user, nChannelsPerNetPeer)) {
    BRAID_CHECK(readPositive("nChannelsPerNetPeer", user->nChannelsPerNetPeer, &out->nChannelsPerNetPeer));
  }
  if (BRAID_CONFIG_HAS(user, nvlinkCentricSched)) {
    BRAID_CHECK(readPositive("nvlinkCentricSched", user->nvlinkCentricSched, &out->nvlinkCentricSched));
  }
  return okStatus();
}

}  // namespace braid
