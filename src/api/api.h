// Helpers for the C API layer (src/api/), the only extern "C" code in Braid.
//
// BRAID_API(ret, ncclX, args) defines pncclX and makes ncclX a weak alias of
// it, both exported, as NCCL does: a profiler may interpose ncclX and still
// reach Braid through pncclX. Each entry point validates its arguments, then
// forwards to core through apiGuard(), which turns a Status into an
// ncclResult_t, logs the failure at WARN with the function's name, records it
// for ncclGetLastError, and keeps every exception from crossing the C API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "nccl.h"
#include "util/status.h"

#ifndef BRAID_NCCL_H
#error "a foreign nccl.h was found before Braid's: check the include order"
#endif

// The alias is made in assembly because clang, unlike gcc, wants an alias's
// target defined before the alias is declared, and the body follows the macro.
#define BRAID_API(ret, name, ...)                                                        \
  __asm__(".weak " #name "\n\t.set " #name ", p" #name "\n\t.type " #name ", @function"); \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

namespace braid::api {

// Logs and records a failed call's status (also on `comm`, if it is a live
// communicator); returns its code.
ncclResult_t finishCall(const char* func, const Status& status, ncclComm_t comm);

// Runs body (returning Status) with every exception turned into an error.
template <typename Body>
ncclResult_t apiGuard(const char* func, Body&& body, ncclComm_t comm = nullptr) noexcept {
  Status status = catchExceptions(std::forward<Body>(body));
  if (status.ok()) return ncclSuccess;
  return finishCall(func, status, comm);
}

// The int value of an enum argument, read without an enum load.
template <typename E>
inline int rawEnum(const E& value) {
  static_assert(sizeof(E) == sizeof(int), "NCCL enums are int-sized");
  int raw;
  std::memcpy(&raw, &value, sizeof(raw));
  return raw;
}

// The last error text of `comm` if it has one, else of this thread, else of
// the process.
const char* lastErrorText(ncclComm_t comm);

// Argument checks shared by the entry points; each names the argument. They
// run on every call, so they inline to a compare; the errors are built out
// of line.
Status nullArgument(const char* arg);
Status wrappingRange(const void* ptr, size_t bytes, const char* arg);
Status badDatatype(int type);
Status badRedOp(int op);
inline Status checkNotNull(const void* ptr, const char* arg) {
  return ptr != nullptr ? okStatus() : nullArgument(arg);
}
// [ptr, ptr + bytes) must not wrap past the top of the address space:
// ncclInvalidArgument naming `arg` (the pointer's argument) if it does.
inline Status checkRange(const void* ptr, size_t bytes, const char* arg) {
  return bytes <= UINTPTR_MAX - reinterpret_cast<uintptr_t>(ptr) ? okStatus()
                                                                 : wrappingRange(ptr, bytes, arg);
}
// Enums arrive from C, where any int fits; reading an out-of-range value as a
// C++ enum is undefined, so checks take the raw bits (see rawEnum).
inline Status checkDatatype(int type) {
  return type >= 0 && type < ncclNumTypes ? okStatus() : badDatatype(type);
}
// Values past ncclNumOps name operators made by ncclRedOpCreatePreMulSum:
// the communicator checks those (enqueueCollective).
inline Status checkRedOp(int op) {
  return op >= 0 ? okStatus() : badRedOp(op);
}
// A live communicator whose init completed and that is not finalized.
Status checkCommHandle(ncclComm_t comm);

// For an entry point whose feature is not built yet: an ncclInvalidUsage
// error that says so (Braid never pretends to succeed).
Status notBuiltYet(const char* func, const char* feature);

}  // namespace braid::api
