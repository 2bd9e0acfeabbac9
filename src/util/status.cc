#include "util/status.h"

#include <cstring>
#include <exception>
#include <new>
#include <system_error>

#include "util/log.h"

namespace braid {

Status::Status(ncclResult_t code, std::string message) {
  if (code == ncclSuccess) return;  // an ok status carries nothing
  rep_ = std::make_unique<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

Status& Status::withContext(const std::string& context) {
  if (rep_) rep_->message = context + ": " + rep_->message;
  return *this;
}

Status errnoError(const std::string& what, int err) {
  char buf[256];
  // GNU strerror_r returns the text, which may not be in buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return Status(ncclSystemError, strCat(what, ": ", text, " (errno ", err, ")"));
}

Status currentExceptionStatus() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return systemError("out of host memory");
  } catch (const std::system_error& e) {
    return systemError(e.what());
  } catch (const std::exception& e) {
    return internalError(e.what());
  } catch (...) {
    return internalError("unknown exception");
  }
}

namespace detail {
void logCheckFailure(const char* file, int line, const char* expr, const Status& status) {
  BRAID_INFO(kLogAll, "%s:%d %s failed: %s", file, line, expr, status.message().c_str());
}
}  // namespace detail

}  // namespace braid
