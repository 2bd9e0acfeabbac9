// What the perf programs print (nccl-tests' header, columns and summary,
// byte for byte where nccl-tests defines them) and the JSON file (-J). Only
// the thread that speaks for the job (rank 0, thread 0) calls these. The
// rows follow current nccl-tests (src/util.cu, 2025): time and bandwidths
// through its getFloatStr (7 and 6 characters, as many decimals as fit),
// #wrong as "%6g" (118 characters a row) and N/A in 7 (117). Older
// nccl-tests printed "%5g" and the time with %7.0f/%7.1f/%7.2f by magnitude.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace perf {

// One half of a row: out-of-place or in-place.
struct Measure {
  double timeUs = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;    // -1: not checked ("N/A")
  bool skipped = false;  // not run: every column "N/A"
};

struct Row {
  size_t bytes = 0, count = 0;
  std::string type, redop;
  int root = -1;
  Measure outOfPlace, inPlace;
};

// The three column-title lines.
std::string columnHeader(bool cputime);
// "<size> <count> <type> <redop> <root>" and one Measure, as nccl-tests.
std::string rowStart(const Row& r);
std::string measureText(const Measure& m);

// Collects rows for the summary and the JSON file.
class Results {
 public:
  void add(const Row& r);
  // Sizes whose check found wrong elements (nccl-tests' "out of bounds values").
  int errors() const { return errors_; }
  double avgBusbw() const;
  // Writes the JSON document; false with errno set if the file cannot be written.
  bool writeJson(const std::string& path, const std::string& header) const;
  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
  int errors_ = 0;
  double busbwSum_ = 0;
  int busbwCount_ = 0;
};

// JSON string literal for `s`.
std::string jsonString(const std::string& s);

}  // namespace perf
