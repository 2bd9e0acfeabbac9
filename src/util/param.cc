#include "util/param.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "util/strings.h"

namespace braid {

const char* paramTypeName(ParamType type) {
  switch (type) {
    case ParamType::Int: return "int";
    case ParamType::Bool: return "bool";
    case ParamType::Size: return "size";
    case ParamType::String: return "string";
  }
  return "?";
}

// ---------------------------------------------------------------- parsers

Status parseInt(const std::string& text, int64_t* out) {
  std::string t = trim(text);
  if (t.empty()) return invalidArgument("expected an integer, got an empty value");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(t.c_str(), &end, 0);  // accepts 0x.. too
  if (errno == ERANGE) return invalidArgument("integer '", t, "' is out of range");
  if (end == t.c_str() || *end != '\0') return invalidArgument("expected an integer, got '", t, "'");
  *out = v;
  return okStatus();
}

Status parseBool(const std::string& text, bool* out) {
  std::string t = toUpper(trim(text));
  if (t == "1" || t == "TRUE" || t == "YES" || t == "ON") {
    *out = true;
  } else if (t == "0" || t == "FALSE" || t == "NO" || t == "OFF") {
    *out = false;
  } else {
    return invalidArgument("expected 0/1, true/false, yes/no or on/off, got '", trim(text), "'");
  }
  return okStatus();
}

Status parseSize(const std::string& text, uint64_t* out) {
  std::string t = toUpper(trim(text));
  if (t.empty()) return invalidArgument("expected a size in bytes, got an empty value");
  uint64_t mult = 1;
  if (t.size() > 1 && t.back() == 'B') t.pop_back();  // "4MB", "4KiB" -> strip B
  // "KI" of "4KiB": the I only after a unit letter ("100I" is no size).
  if (t.size() > 2 && t.back() == 'I' && std::strchr("KMGT", t[t.size() - 2]) != nullptr) t.pop_back();
  switch (t.empty() ? '\0' : t.back()) {
    case 'K': mult = 1ull << 10; break;
    case 'M': mult = 1ull << 20; break;
    case 'G': mult = 1ull << 30; break;
    case 'T': mult = 1ull << 40; break;
    default: break;
  }
  if (mult != 1) t.pop_back();
  if (t.empty() || t[0] == '-' || t[0] == '+') {
    return invalidArgument("expected a size such as 4096, 64K or 2M, got '", trim(text), "'");
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (end == t.c_str() || *end != '\0') {
    return invalidArgument("expected a size such as 4096, 64K or 2M, got '", trim(text), "'");
  }
  if (errno == ERANGE || v > std::numeric_limits<uint64_t>::max() / mult) {
    return invalidArgument("size '", trim(text), "' is out of range");
  }
  *out = v * mult;
  return okStatus();
}

// ---------------------------------------------------------------- ParamBase

ParamBase::ParamBase(const char* name, ParamType type, const char* help)
    : name_(name), type_(type), help_(help) {
  ParamRegistry::instance().add(this);
}

void ParamBase::ensureLoaded() const {
  if (loaded_.load(std::memory_order_acquire)) return;
  ParamRegistry& registry = ParamRegistry::instance();
  std::lock_guard<std::mutex> lock(registry.mutex_);
  if (!loaded_.load(std::memory_order_relaxed)) {
    const_cast<ParamBase*>(this)->load();
  }
}

void ParamBase::load() {
  resetToDefault();
  source_ = ParamSource::Default;
  error_ = okStatus();
  ParamSource source;
  const char* text = ParamRegistry::lookupEnv(name_, &source);
  if (text != nullptr) {
    Status parsed = parse(text);
    if (parsed.ok()) {
      source_ = source;
    } else {
      resetToDefault();
      std::string var = (source == ParamSource::Braid ? "BRAID_" : "NCCL_") + name_;
      error_ = Status(ncclInvalidArgument, strCat(var, "=", text, ": ", parsed.message()));
    }
  }
  loaded_.store(true, std::memory_order_release);
}

std::string ParamBase::valueText() const {
  ensureLoaded();
  return formatValue();
}

ParamSource ParamBase::source() const {
  ensureLoaded();
  return source_;
}

std::string ParamBase::sourceVariable() const {
  switch (source()) {
    case ParamSource::Braid: return "BRAID_" + name_;
    case ParamSource::Nccl: return "NCCL_" + name_;
    case ParamSource::Default: break;
  }
  return "";
}

Status ParamBase::error() const {
  ensureLoaded();
  return error_;
}

// ---------------------------------------------------------------- typed params

template <>
Status IntParam::parse(const std::string& text) {
  int64_t v = 0;
  Status parsed = parseInt(text, &v);
  if (!parsed.ok()) return parsed;
  if (ranged_ && (v < min_ || v > max_)) {
    return invalidArgument("expected an integer from ", min_, " to ", max_, ", got ", v);
  }
  value_ = v;
  return okStatus();
}
template <>
std::string IntParam::formatValue() const {
  return std::to_string(value_);
}
template <>
Status BoolParam::parse(const std::string& text) {
  return parseBool(text, &value_);
}
template <>
std::string BoolParam::formatValue() const {
  return value_ ? "1" : "0";
}
template <>
Status SizeParam::parse(const std::string& text) {
  return parseSize(text, &value_);
}
template <>
std::string SizeParam::formatValue() const {
  return std::to_string(value_);
}

StringParam::StringParam(const char* name, const char* defaultValue, const char* help,
                         std::vector<std::string> choices, Validator validator)
    : ParamBase(name, ParamType::String, help),
      default_(defaultValue),
      value_(defaultValue),
      choices_(std::move(choices)),
      validator_(validator) {
  setDefaultText(default_);
}

Status StringParam::parse(const std::string& text) {
  if (choices_.empty()) {
    if (validator_ != nullptr) {
      Status valid = validator_(text);  // no BRAID_CHECK: the registry never logs (lock order)
      if (!valid.ok()) return valid;
    }
    value_ = text;
    return okStatus();
  }
  std::string wanted = toUpper(trim(text));
  for (const std::string& choice : choices_) {
    if (toUpper(choice) == wanted) {
      value_ = choice;
      return okStatus();
    }
  }
  std::string list;
  for (const std::string& choice : choices_) list += (list.empty() ? "" : ", ") + choice;
  return invalidArgument("expected one of ", list, ", got '", text, "'");
}

// ---------------------------------------------------------------- registry

ParamRegistry& ParamRegistry::instance() {
  static ParamRegistry* registry = new ParamRegistry();  // never destroyed: used at exit
  return *registry;
}

void ParamRegistry::add(ParamBase* param) {
  std::lock_guard<std::mutex> lock(mutex_);
  params_.push_back(param);
}

const char* ParamRegistry::lookupEnv(const std::string& name, ParamSource* source) {
  std::string braidName = "BRAID_" + name;
  if (const char* v = std::getenv(braidName.c_str())) {
    *source = ParamSource::Braid;
    return v;
  }
  std::string ncclName = "NCCL_" + name;
  if (const char* v = std::getenv(ncclName.c_str())) {
    *source = ParamSource::Nccl;
    return v;
  }
  *source = ParamSource::Default;
  return nullptr;
}

void ParamRegistry::loadAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (ParamBase* p : params_) {
    if (!p->loaded_.load(std::memory_order_relaxed)) p->load();
  }
}

Status ParamRegistry::validate() {
  loadAll();
  std::string errors;
  for (const ParamBase* p : list()) {
    Status s = p->error();
    if (!s.ok()) errors += (errors.empty() ? "" : "; ") + s.message();
  }
  if (errors.empty()) return okStatus();
  return invalidArgument("invalid environment: ", errors);
}

void ParamRegistry::reload() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (ParamBase* p : params_) p->load();
}

std::vector<const ParamBase*> ParamRegistry::list() {
  std::vector<const ParamBase*> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.assign(params_.begin(), params_.end());
  }
  std::sort(out.begin(), out.end(),
            [](const ParamBase* a, const ParamBase* b) { return a->name() < b->name(); });
  return out;
}

const ParamBase* ParamRegistry::find(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const ParamBase* p : params_) {
    if (p->name() == name) return p;
  }
  return nullptr;
}

}  // namespace braid
