// The parameter registry: every tunable of Braid, in one place.
//
// A parameter has a name (without prefix), a type, a default and a help text.
// Its value comes from the environment: BRAID_<NAME> if set, else NCCL_<NAME>,
// else the default. The environment is read once, on first use, by the
// registry and nowhere else; braid-info lists every parameter; docs are
// generated from the same table.
//
// Declare a parameter at namespace scope in the file that uses it:
//
//   BRAID_PARAM_INT(paramSocketThreads, "SOCKET_NTHREADS", 0, "Threads per socket connection");
//   ... int64_t n = paramSocketThreads.get();
//
// A value that does not parse (or is out of range, or not one of the choices)
// never silently becomes the default: Registry::validate() reports it, and
// every API entry that starts Braid (init, unique id) calls it and fails with
// ncclInvalidArgument naming the variable. get() on such a parameter returns
// the default so that logging can still work while the error is reported.
//
// Parsing never logs: logging reads parameters, and the registry's lock is
// held while parsing.
//
// Thread safety: get() is safe from any thread; reload() is for tests and
// ncclResetDebugInit and must not race with get() on other threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "util/status.h"

namespace braid {

enum class ParamType { Int, Bool, Size, String };
const char* paramTypeName(ParamType type);

// Where a parameter's value came from.
enum class ParamSource { Default, Braid, Nccl };

class ParamBase {
 public:
  ParamBase(const char* name, ParamType type, const char* help);
  virtual ~ParamBase() = default;
  ParamBase(const ParamBase&) = delete;
  ParamBase& operator=(const ParamBase&) = delete;

  const std::string& name() const { return name_; }
  ParamType type() const { return type_; }
  const std::string& defaultText() const { return defaultText_; }
  const std::string& help() const { return help_; }

  // Value as text, where it came from, the variable that set it ("" if
  // default) and the error if the environment's value was rejected.
  std::string valueText() const;
  ParamSource source() const;
  std::string sourceVariable() const;
  Status error() const;

 protected:
  void ensureLoaded() const;
  // Parses `text`; on failure returns a message describing the expected form.
  virtual Status parse(const std::string& text) = 0;
  virtual void resetToDefault() = 0;
  virtual std::string formatValue() const = 0;
  void setDefaultText(std::string text) { defaultText_ = std::move(text); }

 private:
  friend class ParamRegistry;
  void load();  // called by the registry with its lock held

  std::atomic<bool> loaded_{false};
  std::string name_;
  ParamType type_;
  std::string defaultText_;
  std::string help_;
  ParamSource source_ = ParamSource::Default;
  Status error_;
};

class ParamRegistry {
 public:
  static ParamRegistry& instance();

  void add(ParamBase* param);
  // Reads the environment for every parameter not loaded yet.
  void loadAll();
  // Every rejected value, as one error naming each variable; ok if none.
  Status validate();
  // Re-reads the environment (tests, ncclResetDebugInit).
  void reload();
  // Parameters sorted by name.
  std::vector<const ParamBase*> list();
  const ParamBase* find(const std::string& name);

  // Reads BRAID_<name>, then NCCL_<name>; the only getenv in Braid.
  static const char* lookupEnv(const std::string& name, ParamSource* source);

 private:
  friend class ParamBase;
  std::mutex mutex_;
  std::vector<ParamBase*> params_;
};

template <typename T, ParamType kType>
class Param : public ParamBase {
 public:
  Param(const char* name, T defaultValue, const char* help)
      : ParamBase(name, kType, help), default_(defaultValue), value_(defaultValue) {
    setDefaultText(formatValue());
  }
  // A value outside [minValue, maxValue] is rejected like one that does not parse.
  Param(const char* name, T defaultValue, const char* help, T minValue, T maxValue)
      : ParamBase(name, kType, help),
        default_(defaultValue),
        value_(defaultValue),
        min_(minValue),
        max_(maxValue),
        ranged_(true) {
    setDefaultText(formatValue());
  }

  T get() const {
    ensureLoaded();
    return value_;
  }

 protected:
  Status parse(const std::string& text) override;
  void resetToDefault() override { value_ = default_; }
  std::string formatValue() const override;

 private:
  T default_;
  T value_;
  T min_{};
  T max_{};
  bool ranged_ = false;
};

using IntParam = Param<int64_t, ParamType::Int>;
using BoolParam = Param<bool, ParamType::Bool>;
using SizeParam = Param<uint64_t, ParamType::Size>;  // bytes; accepts K, M, G, T suffixes

// Defined in param.cc.
template <> Status IntParam::parse(const std::string& text);
template <> std::string IntParam::formatValue() const;
template <> Status BoolParam::parse(const std::string& text);
template <> std::string BoolParam::formatValue() const;
template <> Status SizeParam::parse(const std::string& text);
template <> std::string SizeParam::formatValue() const;

// A string, optionally restricted to a set of choices (matched ignoring case;
// get() then returns the choice's canonical spelling) or checked by a validator.
class StringParam : public ParamBase {
 public:
  using Validator = Status (*)(const std::string& value);
  StringParam(const char* name, const char* defaultValue, const char* help,
              std::vector<std::string> choices = {}, Validator validator = nullptr);
  std::string get() const {
    ensureLoaded();
    return value_;
  }
  const std::vector<std::string>& choices() const { return choices_; }

 protected:
  Status parse(const std::string& text) override;
  void resetToDefault() override { value_ = default_; }
  std::string formatValue() const override { return value_; }

 private:
  std::string default_;
  std::string value_;
  std::vector<std::string> choices_;
  Validator validator_;
};

// Parsers, exposed for tests.
Status parseInt(const std::string& text, int64_t* out);
Status parseBool(const std::string& text, bool* out);
Status parseSize(const std::string& text, uint64_t* out);

}  // namespace braid

