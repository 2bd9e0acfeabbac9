#include "report.h"

#include <cmath>
#include <cstdarg>

namespace perf {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// nccl-tests' getFloatStr (src/util.cu): `value` in `width` characters with
// two decimals, one or none as the integer digits leave room, else in
// exponent form.
std::string floatText(double value, int width) {
  int power = 0;
  for (double v = 1; value >= v && power < 40; v *= 10) power++;
  if (power < width - 2) return format("%*.2f", width, value);
  if (power < width - 1) return format("%*.1f", width, value);
  if (power < width + 1) return format("%*.0f", width, value);
  if (width >= 7) return format("%*.1e", width, value);
  return format("%*.0e", width, value);
}

}  // namespace

std::string columnHeader(bool cputime) {
  const char* t = cputime ? "cputime" : "time";
  return format(
             "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
             "", "", "", "", "") +
         format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count",
                "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong") +
         format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)",
                "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string rowStart(const Row& r) {
  return format("%12zu  %12zu  %8s  %6s  %6d", r.bytes, r.count, r.type.c_str(), r.redop.c_str(), r.root);
}

std::string measureText(const Measure& m) {
  // N/A takes 7 characters where a count takes 8, as in nccl-tests.
  if (m.skipped) return format("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
  const std::string time = floatText(m.timeUs, 7);
  const std::string algbw = floatText(m.algbw, 6), busbw = floatText(m.busbw, 6);
  if (m.wrong < 0) return format("  %7s  %6s  %6s  %5s", time.c_str(), algbw.c_str(), busbw.c_str(), "N/A");
  return format("  %7s  %6s  %6s  %6g", time.c_str(), algbw.c_str(), busbw.c_str(),
                static_cast<double>(m.wrong));
}

void Results::add(const Row& r) {
  rows_.push_back(r);
  for (const Measure* m : {&r.outOfPlace, &r.inPlace}) {
    if (m->skipped) continue;
    if (m->wrong > 0) ++errors_;
    busbwSum_ += m->busbw;
    ++busbwCount_;
  }
}

double Results::avgBusbw() const {
  return busbwCount_ ? busbwSum_ / busbwCount_ : 0;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += format("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool Results::writeJson(const std::string& path, const std::string& header) const {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  auto measure = [](const Measure& m) {
    if (m.skipped) return std::string("null");
    return format("{\"time_us\": %.4f, \"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %s}", m.timeUs, m.algbw,
                  m.busbw, m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str());
  };
  std::fprintf(f, "{\n%s,\n  \"results\": [\n", header.c_str());
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    std::fprintf(f,
                 "    {\"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, \"root\": %d,\n"
                 "     \"out_of_place\": %s,\n     \"in_place\": %s}%s\n",
                 r.bytes, r.count, jsonString(r.type).c_str(), jsonString(r.redop).c_str(), r.root,
                 measure(r.outOfPlace).c_str(), measure(r.inPlace).c_str(), i + 1 < rows_.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw\": %.6f\n}\n", errors_, avgBusbw());
  return std::fclose(f) == 0;
}

}  // namespace perf
