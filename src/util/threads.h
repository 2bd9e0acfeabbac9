// Starting threads without exceptions. The system may refuse a thread (the
// process or user is at its thread limit, RLIMIT_NPROC, or out of memory);
// std::thread then throws std::system_error. These turn that into a
// system error naming the thread and the likely cause.
#pragma once

#include <cstddef>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "util/status.h"

namespace braid {

Status threadRefused(const char* what, const std::system_error& e);

// Starts `fn` on a new thread in *out.
template <typename Fn>
[[nodiscard]] Status startThread(const char* what, std::thread* out, Fn&& fn) {
  try {
    *out = std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error& e) {
    return threadRefused(what, e);
  }
  return okStatus();
}

// Runs task(0) .. task(n-1) at once, each on its own thread, and returns
// when all have returned. No task starts before every thread exists: if one
// cannot be created, none runs (tasks that wait for each other would wait
// for one that never comes) and the error names `what`.
[[nodiscard]] Status runTogether(size_t n, const char* what, const std::function<void(size_t)>& task);

}  // namespace braid
