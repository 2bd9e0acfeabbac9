#include "api/api.h"

#include <cstdint>
#include <mutex>
#include <string>

#include "core/comm.h"
#include "util/log.h"
#include "util/strings.h"

namespace braid::api {
namespace {
thread_local std::string tlsLastError;
std::mutex gLastErrorMutex;
std::string gLastError;  // guarded by gLastErrorMutex

void record(const std::string& text) {
  tlsLastError = text;
  std::lock_guard<std::mutex> lock(gLastErrorMutex);
  gLastError = text;
}
}  // namespace

ncclResult_t finishCall(const char* func, const Status& status, ncclComm_t comm) {
  std::string text = strCat(func, ": ", status.message());
  if (status.code() != ncclInProgress) {
    BRAID_WARN("%s", text.c_str());
    record(text);
    if (comm != nullptr) recordCommError(comm, text);
  }
  return status.code();
}

const char* lastErrorText(ncclComm_t comm) {
  static thread_local std::string copy;
  if (comm != nullptr) {
    copy = commLastError(comm);
    if (!copy.empty()) return copy.c_str();
  }
  if (!tlsLastError.empty()) return tlsLastError.c_str();
  std::lock_guard<std::mutex> lock(gLastErrorMutex);
  copy = gLastError;
  return copy.c_str();
}

Status nullArgument(const char* arg) {
  return invalidArgument("argument '", arg, "' is NULL");
}

Status wrappingRange(const void* ptr, size_t bytes, const char* arg) {
  return invalidArgument("argument '", arg, "' (", ptr, ") plus ", bytes, " bytes wraps the address space");
}

Status badDatatype(int t) {
  return invalidArgument("argument 'datatype' is ", t, ", not a valid ncclDataType_t (0..", ncclNumTypes - 1,
                         ")");
}

Status badRedOp(int o) {
  return invalidArgument("argument 'op' is ", o, ", not a valid ncclRedOp_t");
}

Status checkCommHandle(ncclComm_t comm) {
  Communicator* c = nullptr;
  return lookupComm(comm, &c, /*needReady=*/true);
}

Status notBuiltYet(const char* func, const char* feature) {
  return invalidUsage(func, " is not available in Braid ", BRAID_MAJOR, ".", BRAID_MINOR, ".",
                      BRAID_PATCH, " yet: ", feature, " are not implemented in this release");
}

}  // namespace braid::api
