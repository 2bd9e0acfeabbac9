// The registered-buffer table of core/peer_buffers.h between two real
// processes: this one owns a table and publishes registrations; a forked
// child maps it through /proc/<pid>/fd (as a rank of another process does)
// and imports them with a stand-in for the IPC open, which needs no GPU.
// The owner must hand out the child's addresses only for what the child
// imported and only while the registration lives; the child must close
// what was withdrawn and import a slot reused for a new registration.
#include "core/peer_buffers.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "platform/shared_memory.h"

namespace braid {
namespace {

constexpr uint64_t kComm = 0x5eed;  // the communicator's hash
constexpr int kChildLocal = 3;      // the child's index among the host's ranks
constexpr uint64_t kAllocA = 0x10000000, kAllocB = 0x20000000;
// Where the child "maps" an allocation: distinct from the owner's address.
uint64_t mappedAt(uint64_t allocBase) {
  return allocBase + 0x7000000000ull;
}

SharedRegistration registration(uint64_t allocBase, unsigned char mark) {
  SharedRegistration r;
  r.allocBase = allocBase;
  r.allocBytes = 1 << 20;
  std::memset(r.exp.ipc, mark, sizeof(r.exp.ipc));
  return r;
}

// One byte from `fd` within `seconds`; 0 on timeout or EOF.
char readStep(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(seconds * 1000)) != 1) return 0;
  char c = 0;
  return read(fd, &c, 1) == 1 ? c : 0;
}

// The child: imports from the parent's table until it has seen, in order,
// an open of A, a close of A and an open of B, reporting each on `out`.
// Exits 0 if that happened within 20 s and the handles were intact.
[[noreturn]] void importer(int tableFd, int out) {
  std::unique_ptr<PeerBuffers> mine;
  if (!PeerBuffers::create(kComm, 1, &mine).ok()) _exit(2);
  std::string seen;
  bool intact = true;
  auto open = [&](const SharedRegistration& reg, char** mapped) {
    const unsigned char mark = reg.allocBase == kAllocA ? 0xA1 : 0xB2;
    for (unsigned char c : reg.exp.ipc) intact = intact && c == mark;
    *mapped = reinterpret_cast<char*>(mappedAt(reg.allocBase));
    seen += reg.allocBase == kAllocA ? 'a' : 'b';
    return okStatus();
  };
  auto close = [&](const SharedRegistration& reg) { seen += reg.allocBase == kAllocA ? 'A' : 'B'; };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t told = 0;
  while (seen.size() < 3 && std::chrono::steady_clock::now() < until) {
    if (!mine->refresh(0, getppid(), tableFd, kChildLocal, open, close).ok()) _exit(3);
    for (; told < seen.size(); ++told) (void)!write(out, &seen[told], 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  _exit(seen == "aAb" && intact ? 0 : 1);
}

TEST(PeerBuffers, AnotherProcessImportsWithdrawnAndReusedSlots) {
  std::unique_ptr<PeerBuffers> table;
  ASSERT_TRUE(PeerBuffers::create(kComm, 0, &table).ok());
  int keys[2];
  // Registration A: [alloc + 64, alloc + 64 + 4096) of allocation A.
  const char* bufA = reinterpret_cast<const char*>(kAllocA + 64);
  ASSERT_TRUE(table->publish(&keys[0], bufA, 4096, registration(kAllocA, 0xA1)));
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipeFds[0]);
    importer(table->fd(), pipeFds[1]);
  }
  ::close(pipeFds[1]);
  const int steps = pipeFds[0];

  EXPECT_EQ(readStep(steps, 20), 'a');
  // The child's view of a range inside A; nothing outside it, nothing for
  // another rank that imported nothing.
  EXPECT_EQ(table->viewOf(kChildLocal, bufA + 100, 200),
            reinterpret_cast<char*>(mappedAt(kAllocA) + 64 + 100));
  EXPECT_EQ(table->viewOf(kChildLocal, bufA, 4096), reinterpret_cast<char*>(mappedAt(kAllocA) + 64));
  EXPECT_EQ(table->viewOf(kChildLocal, bufA + 100, 4096), nullptr);
  EXPECT_EQ(table->viewOf(kChildLocal, bufA - 8, 16), nullptr);
  EXPECT_EQ(table->viewOf(kChildLocal - 1, bufA, 16), nullptr);
  EXPECT_EQ(table->viewOf(kSharedPeers, bufA, 16), nullptr);

  // Withdrawn: no view at once; the child closes its import.
  table->withdraw(&keys[0]);
  EXPECT_EQ(table->viewOf(kChildLocal, bufA, 16), nullptr);
  EXPECT_EQ(readStep(steps, 20), 'A');

  // B takes the same slot under a new serial: no view until the child
  // imported B, whatever A's import left there.
  const char* bufB = reinterpret_cast<const char*>(kAllocB);
  ASSERT_TRUE(table->publish(&keys[1], bufB, 8192, registration(kAllocB, 0xB2)));
  EXPECT_EQ(readStep(steps, 20), 'b');
  EXPECT_EQ(table->viewOf(kChildLocal, bufB + 4096, 8), reinterpret_cast<char*>(mappedAt(kAllocB) + 4096));

  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the importer's status " << status;
  ::close(steps);
}

// A full table refuses more registrations (they stay on the FIFO).
TEST(PeerBuffers, AFullTableRefusesMore) {
  std::unique_ptr<PeerBuffers> table;
  ASSERT_TRUE(PeerBuffers::create(kComm, 0, &table).ok());
  static char keys[kSharedSlots + 1];
  for (int i = 0; i < kSharedSlots; ++i)
    ASSERT_TRUE(table->publish(&keys[i], &keys[i], 1, registration(kAllocA + 4096u * i, 0)));
  EXPECT_FALSE(table->publish(&keys[kSharedSlots], &keys[kSharedSlots], 1, registration(kAllocB, 0)));
  table->withdraw(&keys[5]);
  EXPECT_TRUE(table->publish(&keys[kSharedSlots], &keys[kSharedSlots], 1, registration(kAllocB, 0)));
}

// A peer checks what it maps before trusting it: another rank's table,
// another communicator's, and a file too small for a table (a descriptor
// reused after its rank left) are errors, never imports or a fault.
TEST(PeerBuffers, ATableIsCheckedBeforeItIsTrusted) {
  std::unique_ptr<PeerBuffers> owner, other, importer;
  ASSERT_TRUE(PeerBuffers::create(kComm, 0, &owner).ok());
  ASSERT_TRUE(PeerBuffers::create(kComm + 1, 1, &other).ok());
  ASSERT_TRUE(PeerBuffers::create(kComm, 1, &importer).ok());
  int key = 0;
  const char* buf = reinterpret_cast<const char*>(kAllocA + 64);
  ASSERT_TRUE(owner->publish(&key, buf, 4, registration(kAllocA, 0xA1)));
  int opens = 0;
  auto open = [&](const SharedRegistration&, char** mapped) {
    ++opens;
    *mapped = reinterpret_cast<char*>(mappedAt(kAllocA));
    return okStatus();
  };
  auto close = [](const SharedRegistration&) {};
  EXPECT_FALSE(importer->refresh(1, getpid(), owner->fd(), 0, open, close).ok())
      << "rank 0's table as rank 1's";
  EXPECT_FALSE(importer->refresh(0, getpid(), other->fd(), 0, open, close).ok()) << "another communicator's";
  int small = -1;
  void* mem = nullptr;
  ASSERT_TRUE(sharedMemoryCreate(64, &small, &mem).ok());
  EXPECT_FALSE(importer->refresh(0, getpid(), small, 0, open, close).ok()) << "a 64-byte file";
  sharedMemoryDestroy(small, mem, 64);
  EXPECT_EQ(opens, 0);
  EXPECT_TRUE(importer->refresh(0, getpid(), owner->fd(), 1, open, close).ok());
  EXPECT_EQ(opens, 1);
  EXPECT_EQ(owner->viewOf(1, buf, 4), reinterpret_cast<char*>(mappedAt(kAllocA) + 64));
}

}  // namespace
}  // namespace braid
