// Settings of the verbs (InfiniBand/RoCE) transport: NCCL_IB_HCA parsed into
// a device/port matcher, NCCL_IB_GID_INDEX (also per HCA), and the queue-pair
// and GPUDirect parameters. Pure parsing; nothing here needs libibverbs, so
// the parameters exist (and are validated and documented) in every build.
//
// NCCL_IB_HCA (as NCCL reads it): a comma list of `name[:port]`. A leading
// `^` excludes the listed devices instead of selecting them; a leading `=`
// (after any `^`) matches names exactly, otherwise each entry is a name
// prefix (`mlx5` selects mlx5_0, mlx5_1, ...). An entry without a port
// covers every port of the device. Unset or empty: every device and port.
//
// NCCL_IB_GID_INDEX (Braid accepts NCCL's plain integer and a per-HCA list):
//   -1                 choose automatically (the default; see gid.h)
//   3                  index 3 on every port
//   mlx5_0:3,mlx5_1:1  index 3 on every port of mlx5_0, 1 on mlx5_1, automatic elsewhere
//   mlx5_0:2:3         index 3 on port 2 of mlx5_0
//   mlx5_0:3,1         index 3 on mlx5_0, 1 on every other port
// HCA names are matched exactly; a port-specific entry wins over a device
// entry, which wins over the plain integer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace braid {

class HcaFilter {
 public:
  struct Entry {
    std::string name;
    int port = -1;  // -1: every port
  };

  // Parses an NCCL_IB_HCA value; "" selects everything.
  static Status parse(const std::string& spec, HcaFilter* out);

  // True if (device, port) is to be used.
  bool matches(const std::string& device, int port) const;

  bool empty() const { return entries_.empty(); }
  bool exclude() const { return exclude_; }
  bool exact() const { return exact_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& spec() const { return spec_; }

 private:
  std::string spec_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<Entry> entries_;
};

class GidIndexConfig {
 public:
  static constexpr int kAuto = -1;

  // Parses an NCCL_IB_GID_INDEX value (syntax above).
  static Status parse(const std::string& spec, GidIndexConfig* out);

  // The index forced for (device, port), or kAuto.
  int indexFor(const std::string& device, int port) const;
  const std::string& spec() const { return spec_; }

 private:
  struct Entry {
    std::string device;
    int port = -1;
    int index = kAuto;
  };
  std::string spec_;
  int all_ = kAuto;
  std::vector<Entry> entries_;
};

// NCCL_NET_GDR_LEVEL: how close a GPU and a NIC must be for the NIC to read
// and write GPU memory directly (GPUDirect RDMA).
enum class GdrLevel { Auto, Loc, Pix, Pxb, Phb, Sys };
const char* gdrLevelName(GdrLevel level);
// "LOC", "PIX", "PXB", "PHB", "SYS" (any case) or NCCL's legacy integers
// 0..4 in that order; "" is Auto.
Status parseGdrLevel(const std::string& text, GdrLevel* out);

// The verbs transport's settings, read from the parameter registry.
struct IbSettings {
  HcaFilter hca;
  GidIndexConfig gidIndex;
  int trafficClass = 0;      // NCCL_IB_TC
  int serviceLevel = 0;      // NCCL_IB_SL
  int timeout = 20;          // NCCL_IB_TIMEOUT (4.096 us * 2^timeout)
  int retryCount = 7;        // NCCL_IB_RETRY_CNT
  int qpsPerConnection = 1;  // NCCL_IB_QPS_PER_CONNECTION
  GdrLevel gdrLevel = GdrLevel::Auto;
};
// BRAID_IB_VERBS_TABLE: a library whose verbs table replaces libibverbs.so.1
// (tests run on a software verbs device through it); "" when unset.
std::string verbsTableLibrary();

// The values are validated by the registry (a bad one fails init first);
// this returns an error only if called with a rejected value in place.
Status ibSettings(IbSettings* out);

}  // namespace braid
