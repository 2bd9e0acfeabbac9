#include "transports/net/ibverbs/ib_config.h"

#include "util/param.h"
#include "util/strings.h"

namespace braid {
namespace {

Status validateHca(const std::string& text) {
  HcaFilter f;
  return HcaFilter::parse(text, &f);
}
Status validateGidIndex(const std::string& text) {
  GidIndexConfig c;
  return GidIndexConfig::parse(text, &c);
}
Status validateGdrLevel(const std::string& text) {
  GdrLevel l;
  return parseGdrLevel(text, &l);
}

StringParam paramIbHca("IB_HCA", "",
                       "RDMA devices and ports for the verbs transport: comma list of name[:port]; "
                       "names are prefixes unless the list starts with '=' (exact); '^' in front "
                       "excludes the listed ones (default: every device and port)",
                       {}, validateHca);
StringParam paramIbGidIndex("IB_GID_INDEX", "-1",
                            "RoCE GID index: -1 chooses (RoCE v2 with an IPv4 address on the "
                            "interface's subnet first; docs/roce.md), N forces index N on every "
                            "port; per HCA: hca:N or hca:port:N, comma separated (e.g. "
                            "mlx5_0:3,mlx5_1:1), a plain N in the list applies to the others",
                            {}, validateGidIndex);
IntParam paramIbTc("IB_TC", 0, "InfiniBand/RoCE traffic class of the queue pairs (0 to 255)", 0, 255);
IntParam paramIbSl("IB_SL", 0, "InfiniBand service level of the queue pairs (0 to 15)", 0, 15);
IntParam paramIbTimeout("IB_TIMEOUT", 20,
                        "Queue-pair ACK timeout exponent: 4.096 us x 2^N before a retry (1 to 31)", 1, 31);
IntParam paramIbRetryCnt("IB_RETRY_CNT", 7,
                         "Retries of a queue pair before its work fails with a completion error (0 to 7)", 0,
                         7);
IntParam paramIbQpsPerConnection("IB_QPS_PER_CONNECTION", 1,
                                 "Queue pairs per verbs connection; data is spread over them (1 to 128)", 1,
                                 128);
StringParam paramNetGdrLevel("NET_GDR_LEVEL", "",
                             "Farthest GPU-NIC distance at which the NIC reads and writes GPU memory "
                             "directly (GPUDirect RDMA): LOC, PIX, PXB, PHB or SYS (or 0..4); unset: "
                             "PXB when GPU memory can be registered, else host staging",
                             {}, validateGdrLevel);
StringParam paramIbVerbsTable("IB_VERBS_TABLE", "",
                              "Testing: a library exporting braid_verbs_table() whose verbs table "
                              "replaces libibverbs.so.1 (Braid's software verbs device, "
                              "libbraid_softverbs.so); unset: libibverbs.so.1");

bool parseNonNegative(const std::string& text, int* out) {
  int64_t v = 0;
  if (text.empty() || !parseInt(text, &v).ok() || v < 0 || v > 0xffff) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

Status HcaFilter::parse(const std::string& spec, HcaFilter* out) {
  *out = HcaFilter();
  out->spec_ = spec;
  std::string rest = trim(spec);
  if (!rest.empty() && rest[0] == '^') {
    out->exclude_ = true;
    rest = rest.substr(1);
  }
  if (!rest.empty() && rest[0] == '=') {
    out->exact_ = true;
    rest = rest.substr(1);
  }
  if (trim(rest).empty()) {
    if (out->exclude_ || out->exact_) return invalidArgument("'", spec, "' names no device");
    return okStatus();
  }
  for (const std::string& raw : splitString(rest, ',')) {
    const std::string item = trim(raw);
    if (item.empty()) return invalidArgument("empty entry in '", spec, "' (expected name[:port],...)");
    Entry e;
    const size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (e.name.empty()) return invalidArgument("entry '", item, "' in '", spec, "' has no device name");
    if (colon != std::string::npos) {
      if (!parseNonNegative(item.substr(colon + 1), &e.port) || e.port < 1 || e.port > 255) {
        return invalidArgument("entry '", item, "' in '", spec, "': the port must be a number from 1 to 255");
      }
    }
    out->entries_.push_back(e);
  }
  return okStatus();
}

bool HcaFilter::matches(const std::string& device, int port) const {
  if (entries_.empty()) return true;
  bool listed = false;
  for (const Entry& e : entries_) {
    const bool nameHit = exact_ ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (nameHit && (e.port < 0 || e.port == port)) listed = true;
  }
  return exclude_ ? !listed : listed;
}

Status GidIndexConfig::parse(const std::string& spec, GidIndexConfig* out) {
  *out = GidIndexConfig();
  out->spec_ = spec;
  const std::string text = trim(spec);
  if (text.empty()) return okStatus();
  bool haveAll = false;
  for (const std::string& raw : splitString(text, ',')) {
    const std::string item = trim(raw);
    const std::vector<std::string> parts = splitString(item, ':');
    const std::string form = " (expected -1, N, hca:N or hca:port:N, comma separated)";
    if (parts.size() == 1) {
      int64_t v = 0;
      if (item.empty() || !parseInt(item, &v).ok() || v < -1 || v > 0xffff) {
        return invalidArgument("bad GID index '", item, "' in '", spec, "'", form);
      }
      if (haveAll) return invalidArgument("'", spec, "' gives more than one index for every port");
      haveAll = true;
      out->all_ = static_cast<int>(v);
      continue;
    }
    if (parts.size() > 3 || trim(parts[0]).empty()) {
      return invalidArgument("bad entry '", item, "' in '", spec, "'", form);
    }
    Entry e;
    e.device = trim(parts[0]);
    if (parts.size() == 3 && (!parseNonNegative(trim(parts[1]), &e.port) || e.port < 1 || e.port > 255)) {
      return invalidArgument("entry '", item, "' in '", spec, "': the port must be a number from 1 to 255");
    }
    if (!parseNonNegative(trim(parts.back()), &e.index)) {
      return invalidArgument("entry '", item, "' in '", spec, "': the GID index must be a number from 0");
    }
    for (const Entry& other : out->entries_) {
      if (other.device == e.device && other.port == e.port) {
        return invalidArgument("'", spec, "' gives ", e.device, e.port < 0 ? "" : strCat(":", e.port),
                               " two GID indexes");
      }
    }
    out->entries_.push_back(e);
  }
  return okStatus();
}

int GidIndexConfig::indexFor(const std::string& device, int port) const {
  int deviceWide = kAuto;
  bool haveDevice = false;
  for (const Entry& e : entries_) {
    if (e.device != device) continue;
    if (e.port == port) return e.index;
    if (e.port < 0) {
      deviceWide = e.index;
      haveDevice = true;
    }
  }
  return haveDevice ? deviceWide : all_;
}

const char* gdrLevelName(GdrLevel level) {
  switch (level) {
    case GdrLevel::Auto: return "auto";
    case GdrLevel::Loc: return "LOC";
    case GdrLevel::Pix: return "PIX";
    case GdrLevel::Pxb: return "PXB";
    case GdrLevel::Phb: return "PHB";
    case GdrLevel::Sys: return "SYS";
  }
  return "?";
}

Status parseGdrLevel(const std::string& text, GdrLevel* out) {
  static const GdrLevel kOrder[] = {GdrLevel::Loc, GdrLevel::Pix, GdrLevel::Pxb, GdrLevel::Phb,
                                    GdrLevel::Sys};
  const std::string want = toUpper(trim(text));
  if (want.empty()) {
    *out = GdrLevel::Auto;
    return okStatus();
  }
  for (GdrLevel l : kOrder) {
    if (want == gdrLevelName(l)) {
      *out = l;
      return okStatus();
    }
  }
  int64_t v = 0;
  if (parseInt(want, &v).ok() && v >= 0 && v <= 4) {
    *out = kOrder[v];
    return okStatus();
  }
  return invalidArgument("expected LOC, PIX, PXB, PHB, SYS or 0..4, got '", text, "'");
}

std::string verbsTableLibrary() {
  return paramIbVerbsTable.get();
}

Status ibSettings(IbSettings* out) {
  BRAID_CHECK(HcaFilter::parse(paramIbHca.get(), &out->hca));
  BRAID_CHECK(GidIndexConfig::parse(paramIbGidIndex.get(), &out->gidIndex));
  BRAID_CHECK(parseGdrLevel(paramNetGdrLevel.get(), &out->gdrLevel));
  out->trafficClass = static_cast<int>(paramIbTc.get());
  out->serviceLevel = static_cast<int>(paramIbSl.get());
  out->timeout = static_cast<int>(paramIbTimeout.get());
  out->retryCount = static_cast<int>(paramIbRetryCnt.get());
  out->qpsPerConnection = static_cast<int>(paramIbQpsPerConnection.get());
  return okStatus();
}

}  // namespace braid
