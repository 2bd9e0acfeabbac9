// Descriptors lent between real processes (platform/fd_lending.h): a
// borrower must get the lender's very file (writes through one are seen
// through the other), and nothing for a wrong token, a returned descriptor
// or a process that does not answer.
#include "platform/fd_lending.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "util/status.h"

namespace braid {
namespace {

// A one-page memory file holding `text`.
int memoryFile(const char* text) {
  const int fd = memfd_create("fd-lending-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, 4096), 0);
  EXPECT_EQ(pwrite(fd, text, std::strlen(text) + 1, 0), static_cast<ssize_t>(std::strlen(text) + 1));
  return fd;
}

std::string contents(int fd) {
  char buf[64] = {};
  EXPECT_GT(pread(fd, buf, sizeof(buf) - 1, 0), 0);
  return buf;
}

bool sameFile(int a, int b) {
  struct stat sa {
  }, sb{};
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int waitChild(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// The child borrows what the parent lent, writes through it, and checks
// that a wrong token gets nothing. Exit codes say what failed.
TEST(FdLending, AnotherProcessBorrowsTheSameFile) {
  const int fd = memoryFile("lent by the parent");
  LentFd lent;
  ASSERT_TRUE(fdLend(fd, &lent).ok());
  EXPECT_EQ(lent.pid, getpid());
  EXPECT_NE(lent.token, 0u);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int got = -1;
    if (!fdBorrow(lent, 5000, &got).ok()) _exit(2);
    if (got == fd) _exit(3);  // a new descriptor of this process, not the inherited one
    if (contents(got) != "lent by the parent") _exit(4);
    const char reply[] = "written by the child";
    if (pwrite(got, reply, sizeof(reply), 0) != static_cast<ssize_t>(sizeof(reply))) _exit(5);
    close(got);
    LentFd wrong = lent;
    wrong.token ^= 1;
    int none = -1;
    const Status s = fdBorrow(wrong, 5000, &none);
    if (s.ok() || none != -1 || s.message().find("does not lend") == std::string::npos) _exit(6);
    _exit(0);
  }
  EXPECT_EQ(waitChild(child), 0);
  EXPECT_EQ(contents(fd), "written by the child");
  fdReturn(lent);
  close(fd);
}

TEST(FdLending, AReturnedDescriptorIsRefusedButBorrowedCopiesStayValid) {
  const int fd = memoryFile("kept");
  LentFd lent;
  ASSERT_TRUE(fdLend(fd, &lent).ok());
  int first = -1;
  ASSERT_TRUE(fdBorrow(lent, 5000, &first).ok());  // from this very process, through its server
  EXPECT_TRUE(sameFile(first, fd));
  fdReturn(lent);
  int second = -1;
  const Status s = fdBorrow(lent, 5000, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(second, -1);
  EXPECT_NE(s.message().find("returned"), std::string::npos) << s.message();
  close(fd);
  EXPECT_EQ(contents(first), "kept");  // the borrowed copy outlives the lender's
  close(first);
}

// ThreadSanitizer cannot run a child of a multi-threaded process that
// starts threads of its own (it dies: "starting new threads after
// multi-threaded fork is not supported").
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// A forked process lends its own descriptors: its own server, the parent's
// loans and thread not inherited.
TEST(FdLending, AForkedChildLendsItsOwn) {
  if (kThreadSanitizer) GTEST_SKIP() << "ThreadSanitizer: no threads in a child of a multi-threaded process";
  LentFd mine;
  const int parentFd = memoryFile("parent");
  ASSERT_TRUE(fdLend(parentFd, &mine).ok());  // the parent's server runs before the fork
  // One loan answered first, so the server thread has finished starting:
  // forking while a thread starts can leave the child with a lock of the
  // sanitizer's runtime held (once under ASan in CI, the child's own server
  // never answered).
  int own = -1;
  ASSERT_TRUE(fdBorrow(mine, 5000, &own).ok());
  EXPECT_EQ(contents(own), "parent");
  close(own);
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipeFds[0]);
    close(go[1]);
    const int fd = memoryFile("child");
    LentFd lent;
    // The parent's loan is not the child's to give.
    LentFd inherited = mine;
    inherited.pid = getpid();
    if (!fdLend(fd, &lent).ok() || lent.pid != getpid()) _exit(2);
    if (write(pipeFds[1], &lent, sizeof(lent)) != static_cast<ssize_t>(sizeof(lent))) _exit(3);
    if (write(pipeFds[1], &inherited, sizeof(inherited)) != static_cast<ssize_t>(sizeof(inherited))) _exit(3);
    char c;
    (void)!read(go[0], &c, 1);  // until the parent has borrowed
    _exit(0);
  }
  close(pipeFds[1]);
  close(go[0]);
  LentFd lent, inherited;
  ASSERT_EQ(read(pipeFds[0], &lent, sizeof(lent)), static_cast<ssize_t>(sizeof(lent)));
  ASSERT_EQ(read(pipeFds[0], &inherited, sizeof(inherited)), static_cast<ssize_t>(sizeof(inherited)));
  int got = -1;
  const Status s = fdBorrow(lent, 5000, &got);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(contents(got), "child");
  close(got);
  int none = -1;
  EXPECT_FALSE(fdBorrow(inherited, 5000, &none).ok());
  ASSERT_EQ(write(go[1], "x", 1), 1);
  EXPECT_EQ(waitChild(child), 0);
  close(pipeFds[0]);
  close(go[1]);
  fdReturn(mine);
  close(parentFd);
}

// A process that is gone gives an error at once rather than a wait.
TEST(FdLending, AGoneProcessRefusesAtOnce) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  EXPECT_EQ(waitChild(child), 0);
  const LentFd gone{static_cast<int32_t>(child), 3, 1};
  int none = -1;
  const auto start = std::chrono::steady_clock::now();
  const Status s = fdBorrow(gone, 60000, &none);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(none, -1);
  // Refused at once, not after the minute allowed for an answer.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(s.message().find("gone"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace braid
