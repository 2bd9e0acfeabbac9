#include "platform/fd_lending.h"

#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "util/log.h"
#include "util/strings.h"
#include "util/threads.h"

namespace braid {
namespace {

constexpr uint32_t kAsk = 0x42464431;     // "BFD1": a borrower's request
constexpr uint32_t kAnswer = 0x42464432;  // the lender's reply

struct Request {
  uint32_t magic;
  int32_t fd;
  uint64_t token;
};
enum : int32_t { kLent = 0, kNotLent = 1, kOtherUser = 2 };
struct Reply {
  uint32_t magic;
  int32_t status;
};

// The process's lending state. Replaced (not reset) in a child after fork:
// the parent's loans are not the child's, and its server thread does not
// exist there.
struct Lender {
  std::mutex mu;
  pid_t pid = 0;  // the process whose server runs (0: none yet)
  int listenFd = -1;
  std::map<int, uint64_t> lent;  // descriptor -> token
};
Lender* gLender = nullptr;
std::once_flag gOnce;

Lender& lender() {
  std::call_once(gOnce, [] {
    gLender = new Lender();  // never destroyed: the server thread may outlive static destruction
    pthread_atfork(nullptr, nullptr, [] {
      const int inherited = gLender->listenFd;  // the parent's server socket, not the child's
      gLender = new Lender();
      if (inherited >= 0) close(inherited);
    });
  });
  return *gLender;
}

sockaddr_un socketAddress(pid_t pid, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = strCat("braid-fd-", pid);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: leading NUL, nothing on disk
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

void setTimeouts(int s, int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Answers one borrower on connection `c`.
void answer(Lender& l, int c) {
  setTimeouts(c, 1000);  // a borrower that connects and says nothing cannot hold the server
  Reply reply{kAnswer, kNotLent};
  ucred cred{};
  socklen_t credLen = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0 ||
      (cred.uid != geteuid() && cred.uid != 0)) {
    reply.status = kOtherUser;
    (void)send(c, &reply, sizeof(reply), MSG_NOSIGNAL);
    return;
  }
  Request req{};
  if (recv(c, &req, sizeof(req), MSG_WAITALL) != static_cast<ssize_t>(sizeof(req)) || req.magic != kAsk)
    return;
  std::lock_guard<std::mutex> lock(l.mu);  // fdReturn waits, so the descriptor stays open while it is sent
  auto it = l.lent.find(req.fd);
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  iovec iov{&reply, sizeof(reply)};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (it != l.lent.end() && it->second == req.token) {
    reply.status = kLent;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &req.fd, sizeof(int));
  }
  (void)sendmsg(c, &msg, MSG_NOSIGNAL);
}

void serve(Lender* l, int listenFd) {
  for (;;) {
    const int c = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      const int err = errno;
      if (err == EBADF || err == EINVAL || err == ENOTSOCK) {
        BRAID_WARN("descriptor lending stopped: accept: %s", std::strerror(err));
        return;
      }
      // Interrupted, a borrower gone, or out of descriptors or memory for
      // a moment: a borrower waiting meanwhile times out, a later one is served.
      if (err != EINTR && err != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    answer(*l, c);
    close(c);
  }
}

// Starts this process's server if it has none; l.mu held.
Status startServer(Lender& l) {
  if (l.pid == getpid()) return okStatus();
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errnoError("socket(AF_UNIX) for lending descriptors", errno);
  socklen_t len = 0;
  const sockaddr_un a = socketAddress(getpid(), &len);
  if (bind(s, reinterpret_cast<const sockaddr*>(&a), len) != 0 || listen(s, 64) != 0) {
    const int err = errno;
    close(s);
    return errnoError(strCat("binding the abstract socket @braid-fd-", getpid()), err);
  }
  std::thread server;
  Status started = startThread("the thread that lends descriptors", &server, [&l, s] { serve(&l, s); });
  if (!started.ok()) {
    close(s);
    return started;
  }
  l.listenFd = s;
  l.pid = getpid();
  server.detach();
  BRAID_INFO(kLogAlloc, "lending descriptors on @braid-fd-%d", static_cast<int>(l.pid));
  return okStatus();
}

}  // namespace

Status fdLend(int fd, LentFd* out) {
  if (fd < 0) return invalidArgument("cannot lend descriptor ", fd);
  Lender& l = lender();
  std::lock_guard<std::mutex> lock(l.mu);
  BRAID_CHECK(startServer(l));
  uint64_t token = 0;
  while (token == 0) {
    if (getrandom(&token, sizeof(token), 0) != static_cast<ssize_t>(sizeof(token)))
      return errnoError("getrandom", errno);
  }
  l.lent[fd] = token;
  *out = LentFd{static_cast<int32_t>(l.pid), fd, token};
  return okStatus();
}

void fdReturn(const LentFd& lent) {
  Lender& l = lender();
  std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.lent.find(lent.fd);
  if (l.pid == lent.pid && it != l.lent.end() && it->second == lent.token) l.lent.erase(it);
}

Status fdBorrow(const LentFd& lent, int timeoutMs, int* out) {
  *out = -1;
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errnoError("socket(AF_UNIX) for borrowing a descriptor", errno);
  setTimeouts(s, timeoutMs);
  socklen_t len = 0;
  const sockaddr_un a = socketAddress(lent.pid, &len);
  const std::string from = strCat("process ", lent.pid, " (@braid-fd-", lent.pid, ")");
  Status st = okStatus();
  Reply reply{};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  iovec iov{&reply, sizeof(reply)};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const Request req{kAsk, lent.fd, lent.token};
  if (connect(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    st = errnoError(
        strCat("connecting to ", from, " to borrow a descriptor (gone, or in another network namespace?)"),
        errno);
  } else if (send(s, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
    st = errnoError(strCat("asking ", from, " for a descriptor"), errno);
  } else if (recvmsg(s, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof(reply)) ||
             reply.magic != kAnswer) {
    st = systemError("no answer from ", from, " about descriptor ", lent.fd, " within ", timeoutMs, " ms");
  } else if (reply.status == kOtherUser) {
    st = invalidUsage(from, " lends descriptors only to processes of its own user");
  } else if (reply.status != kLent) {
    st = invalidUsage(from, " does not lend descriptor ", lent.fd, " (returned, or a wrong token)");
  } else {
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    if (cm == nullptr || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
        cm->cmsg_len != CMSG_LEN(sizeof(int))) {
      st = systemError(from, " answered without a descriptor");
    } else {
      std::memcpy(out, CMSG_DATA(cm), sizeof(int));
    }
  }
  close(s);
  return st;
}

}  // namespace braid
