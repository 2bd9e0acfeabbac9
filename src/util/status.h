// Status: how errors travel inside Braid.
//
// Every fallible internal function returns a [[nodiscard]] Status. An ok
// Status is one null pointer; an error carries an ncclResult_t code (the root
// cause: a dead peer is ncclRemoteError, not an internal error) and a message
// that says what went wrong and, where we know, what to do. The C API layer
// (src/api/) maps it onto ncclResult_t and records the message for
// ncclGetLastError. Exceptions never leave a function that returns Status.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "nccl.h"
#include "util/strings.h"

namespace braid {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ncclResult_t code, std::string message);

  Status(const Status& other) : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return rep_ == nullptr; }
  ncclResult_t code() const { return rep_ ? rep_->code : ncclSuccess; }
  const std::string& message() const;

  // Prepends context ("while connecting to rank 3: ") to an error; no-op if ok.
  Status& withContext(const std::string& context);

  // Explicitly drops a status whose failure does not matter (teardown paths).
  void ignore() const {}

 private:
  struct Rep {
    ncclResult_t code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status okStatus() { return Status(); }

// Error constructors; the arguments are concatenated into the message.
template <typename... Args>
Status invalidArgument(Args&&... args) {
  return Status(ncclInvalidArgument, strCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status invalidUsage(Args&&... args) {
  return Status(ncclInvalidUsage, strCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status systemError(Args&&... args) {
  return Status(ncclSystemError, strCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status internalError(Args&&... args) {
  return Status(ncclInternalError, strCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status remoteError(Args&&... args) {
  return Status(ncclRemoteError, strCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status gpuError(Args&&... args) {
  return Status(ncclUnhandledCudaError, strCat(std::forward<Args>(args)...));
}
// A system error from errno, with its text: "bind 10.0.0.1:0: Address in use".
Status errnoError(const std::string& what, int err);

// Inside a catch block: the status the exception in flight stands for. Out
// of memory and failed system calls (std::system_error: a thread the system
// would not create) are system errors, anything else an internal error.
Status currentExceptionStatus();

// Runs body (returning Status); an exception becomes its status.
template <typename Body>
Status catchExceptions(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return currentExceptionStatus();
  }
}

namespace detail {
void logCheckFailure(const char* file, int line, const char* expr, const Status& status);
}

}  // namespace braid

// The one check macro: evaluates a Status expression and, on error, logs the
// failing call with its location (at INFO, subsystem ALL) and returns it.
#define BRAID_CHECK(expr)                                                     \
  do {                                                                        \
    ::braid::Status braid_check_status_ = (expr);                             \
    if (!braid_check_status_.ok()) {                                          \
      ::braid::detail::logCheckFailure(__FILE__, __LINE__, #expr, braid_check_status_); \
      return braid_check_status_;                                             \
    }                                                                         \
  } while (0)
