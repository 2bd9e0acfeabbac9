// Every collective x type x op x in-place/out-of-place x count on the host
// backend, over forked ranks, checked against an independent reference.
//
// Inputs depend on rank and position and are chosen so that every partial
// result is exact in every type (sums of small integers, products of powers
// of two), so results are compared exactly whatever the reduction order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/datatypes.h"
#include "harness.h"
#include "braid.h"
#include "util/strings.h"

namespace braid::test {
namespace {

const bool kHostBackend = (setenv("BRAID_BACKEND", "host", 0), true);
// Small FIFOs, so that every count above a few thousand spans many steps.
const std::vector<std::string> kEnv = {"BRAID_BUFFSIZE=64K", "BRAID_BOOTSTRAP_TIMEOUT=20",
                                       "BRAID_STALL_TIMEOUT=30"};

template <typename T>
T make(double v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(v);
  } else {
    return T::fromFloat(static_cast<float>(v));
  }
}
template <typename T>
double value(T x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(x);
  } else {
    return x.toFloat();
  }
}
template <typename T>
constexpr bool isFp8() {
  return std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>;
}

// Rank r's input element i.
template <typename T>
double input(int r, size_t i, ncclRedOp_t op) {
  if (op == ncclProd) return 1 + static_cast<double>((r + i) % 2);
  if (isFp8<T>()) return static_cast<double>((r * 7 + i * 3) % 2);
  return static_cast<double>((r * 7 + i * 3) % 5);
}

template <typename T>
T reduceRef(ncclRedOp_t op, int n, size_t i) {
  double acc = input<T>(0, i, op);
  for (int r = 1; r < n; ++r) {
    double v = input<T>(r, i, op);
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMin: acc = std::min(acc, v); break;
      case ncclMax: acc = std::max(acc, v); break;
      default: acc += v; break;
    }
  }
  T t = make<T>(acc);
  if (op == ncclAvg) {
    if constexpr (std::is_arithmetic_v<T>) {
      t = static_cast<T>(t / static_cast<T>(n));
    } else {
      t = T::fromFloat(t.toFloat() / static_cast<float>(n));
    }
  }
  return t;
}

template <typename T>
bool same(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct Failure {
  std::string text;
  void add(const std::string& s) {
    if (text.size() < 2000) text += s + "\n";
  }
};

template <typename T>
void runType(ncclComm_t comm, ncclDataType_t type, int rank, int n, const std::vector<size_t>& counts,
             Failure* fail, int* iteration) {
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMin, ncclMax, ncclAvg};
  for (size_t count : counts) {
    for (bool inPlace : {false, true}) {
      for (ncclRedOp_t op : ops) {
        std::string tag = strCat("type ", type, " op ", op, " count ", count, inPlace ? " in-place" : "");
        // All-reduce.
        {
          std::vector<T> in(count), out(count);
          for (size_t i = 0; i < count; ++i) in[i] = make<T>(input<T>(rank, i, op));
          T* dst = inPlace ? in.data() : out.data();
          ncclResult_t r = ncclAllReduce(in.data(), dst, count, type, op, comm, nullptr);
          if (r != ncclSuccess) return fail->add("allreduce " + tag + ": " + ncclGetLastError(comm));
          for (size_t i = 0; i < count; ++i) {
            if (!same(dst[i], reduceRef<T>(op, n, i))) {
              return fail->add(strCat("allreduce ", tag, " at ", i, ": ", value(dst[i]), " vs ",
                                      value(reduceRef<T>(op, n, i))));
            }
          }
        }
        // Reduce-scatter: input of n blocks, element j of the whole input.
        {
          std::vector<T> in(count * n), out(count);
          for (size_t j = 0; j < in.size(); ++j) in[j] = make<T>(input<T>(rank, j, op));
          T* dst = inPlace ? in.data() + static_cast<size_t>(rank) * count : out.data();
          ncclResult_t r = ncclReduceScatter(in.data(), dst, count, type, op, comm, nullptr);
          if (r != ncclSuccess) return fail->add("reducescatter " + tag + ": " + ncclGetLastError(comm));
          for (size_t i = 0; i < count; ++i) {
            T want = reduceRef<T>(op, n, static_cast<size_t>(rank) * count + i);
            if (!same(dst[i], want)) {
              return fail->add(strCat("reducescatter ", tag, " at ", i, ": ", value(dst[i]), " vs ", value(want)));
            }
          }
        }
        // Reduce to a rotating root.
        {
          int root = (*iteration)++ % n;
          std::vector<T> in(count), out(count, make<T>(-1));
          for (size_t i = 0; i < count; ++i) in[i] = make<T>(input<T>(rank, i, op));
          T* dst = inPlace ? in.data() : out.data();
          ncclResult_t r = ncclReduce(in.data(), dst, count, type, op, root, comm, nullptr);
          if (r != ncclSuccess) return fail->add("reduce " + tag + ": " + ncclGetLastError(comm));
          if (rank == root) {
            for (size_t i = 0; i < count; ++i) {
              if (!same(dst[i], reduceRef<T>(op, n, i))) return fail->add(strCat("reduce ", tag, " at ", i));
            }
          }
        }
      }
      std::string tag = strCat("type ", type, " count ", count, inPlace ? " in-place" : "");
      // All-gather.
      {
        std::vector<T> in(count), out(count * n);
        for (size_t i = 0; i < count; ++i) in[i] = make<T>(input<T>(rank, i, ncclSum));
        T* src = in.data();
        if (inPlace) {
          if (count > 0) std::memcpy(out.data() + static_cast<size_t>(rank) * count, in.data(), count * sizeof(T));
          src = out.data() + static_cast<size_t>(rank) * count;
        }
        ncclResult_t r = ncclAllGather(src, out.data(), count, type, comm, nullptr);
        if (r != ncclSuccess) return fail->add("allgather " + tag + ": " + ncclGetLastError(comm));
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; ++i) {
            if (!same(out[static_cast<size_t>(q) * count + i], make<T>(input<T>(q, i, ncclSum)))) {
              return fail->add(strCat("allgather ", tag, " block ", q, " at ", i));
            }
          }
        }
      }
      // Broadcast from a rotating root.
      {
        int root = (*iteration)++ % n;
        std::vector<T> in(count), out(count, make<T>(-1));
        for (size_t i = 0; i < count; ++i) in[i] = make<T>(input<T>(rank, i, ncclSum));
        T* dst = inPlace ? in.data() : out.data();
        ncclResult_t r = ncclBroadcast(in.data(), dst, count, type, root, comm, nullptr);
        if (r != ncclSuccess) return fail->add("broadcast " + tag + ": " + ncclGetLastError(comm));
        for (size_t i = 0; i < count; ++i) {
          if (!same(dst[i], make<T>(input<T>(root, i, ncclSum)))) {
            return fail->add(strCat("broadcast ", tag, " root ", root, " at ", i));
          }
        }
      }
    }
  }
}

std::string sweep(const ncclUniqueId& id, int rank, int n) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  Failure fail;
  int iteration = 0;
  // Sanitizer builds run ~10x slower: BRAID_TEST_SWEEP=quick keeps every
  // type, op and rank count but only small counts (still several steps each).
  const char* mode = std::getenv("BRAID_TEST_SWEEP");
  const bool quick = mode != nullptr && std::string(mode) == "quick";
  const std::vector<size_t> small = quick ? std::vector<size_t>{0, 1, 7, 4099} : std::vector<size_t>{0, 1, 7, 1023, 65537};
  const std::vector<size_t> large = quick ? small : std::vector<size_t>{0, 1, 7, 1023, 65537, (1u << 20) + 3};
  runType<int8_t>(comm, ncclInt8, rank, n, small, &fail, &iteration);
  runType<uint8_t>(comm, ncclUint8, rank, n, small, &fail, &iteration);
  runType<int32_t>(comm, ncclInt32, rank, n, small, &fail, &iteration);
  runType<uint32_t>(comm, ncclUint32, rank, n, small, &fail, &iteration);
  runType<int64_t>(comm, ncclInt64, rank, n, small, &fail, &iteration);
  runType<uint64_t>(comm, ncclUint64, rank, n, small, &fail, &iteration);
  runType<Half>(comm, ncclFloat16, rank, n, small, &fail, &iteration);
  runType<float>(comm, ncclFloat32, rank, n, large, &fail, &iteration);
  runType<double>(comm, ncclFloat64, rank, n, small, &fail, &iteration);
  runType<BFloat16>(comm, ncclBfloat16, rank, n, small, &fail, &iteration);
  runType<Fp8E4M3>(comm, ncclFloat8e4m3, rank, n, small, &fail, &iteration);
  runType<Fp8E5M2>(comm, ncclFloat8e5m2, rank, n, small, &fail, &iteration);
  err = check(ncclCommDestroy(comm), "destroy");
  return fail.text + err;
}

class CollSweep : public ::testing::TestWithParam<int> {};

TEST_P(CollSweep, EveryCollectiveTypeOpAndCount) {
  int n = GetParam();
  RootProcess root = startRootProcess(kEnv);
  auto out = runRanks(n, [&](int rank, int nranks) { return sweep(root.id, rank, nranks); }, 600, kEnv);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollSweep, ::testing::Values(1, 2, 3, 4, 8));

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// Sends, receives and the collectives made of them.
std::string p2pChecks(const ncclUniqueId& id, int rank, int n) {
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommInitRank(&comm, n, id, rank), "init");
  if (!err.empty()) return err;
  auto val = [](int from, int to, size_t i) { return static_cast<int32_t>(from * 1000003 + to * 7919 + i); };
  for (size_t count : {size_t(0), size_t(1), size_t(1001), size_t(300000)}) {
    std::string tag = strCat(" count ", count);
    // Every rank sends to every rank (itself included) in one group, and
    // both directions of each pair at once: large messages must not deadlock.
    {
      std::vector<std::vector<int32_t>> out(n), in(n);
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {
        out[p].resize(count);
        in[p].assign(count, -1);
        for (size_t i = 0; i < count; ++i) out[p][i] = val(rank, p, i);
        ncclSend(out[p].data(), count, ncclInt32, p, comm, nullptr);
        ncclRecv(in[p].data(), count, ncclInt32, p, comm, nullptr);
      }
      err = check(ncclGroupEnd(), "send/recv group");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (in[p][i] != val(p, rank, i)) return strCat("send/recv from ", p, " at ", i, tag);
        }
      }
    }
    // Two messages to the same peer in one group arrive in call order.
    if (n > 1) {
      int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
      std::vector<int32_t> a(count, rank), b(count / 2 + 1, rank + 100), ra(count, -1), rb(count / 2 + 1, -1);
      ncclGroupStart();
      ncclSend(a.data(), a.size(), ncclInt32, next, comm, nullptr);
      ncclSend(b.data(), b.size(), ncclInt32, next, comm, nullptr);
      ncclRecv(ra.data(), ra.size(), ncclInt32, prev, comm, nullptr);
      ncclRecv(rb.data(), rb.size(), ncclInt32, prev, comm, nullptr);
      err = check(ncclGroupEnd(), "ordered sends");
      if (!err.empty()) return err + tag;
      for (int32_t v : ra) {
        if (v != prev) return "ordered sends: first message" + tag;
      }
      for (int32_t v : rb) {
        if (v != prev + 100) return "ordered sends: second message" + tag;
      }
    }
    // All-to-all.
    {
      std::vector<int32_t> in(count * n), out(count * n, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) in[p * count + i] = val(rank, p, i);
      }
      err = check(ncclAlltoAll(in.data(), out.data(), count, ncclInt32, comm, nullptr), "alltoall");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (out[p * count + i] != val(p, rank, i)) return strCat("alltoall from ", p, " at ", i, tag);
        }
      }
    }
    // All-to-allv, uneven: rank r sends (r + p) % 3 * count / 2 elements to p.
    {
      auto cnt = [&](int from, int to) { return static_cast<size_t>((from + to) % 3) * count / 2; };
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t stotal = 0, rtotal = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = cnt(rank, p);
        sd[p] = stotal;
        stotal += sc[p];
        rc[p] = cnt(p, rank);
        rd[p] = rtotal;
        rtotal += rc[p];
      }
      std::vector<int32_t> in(stotal + 1), out(rtotal + 1, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = val(rank, p, i);
      }
      err = check(ncclAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), ncclInt32, comm,
                                nullptr),
                  "alltoallv");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < rc[p]; ++i) {
          if (out[rd[p] + i] != val(p, rank, i)) return strCat("alltoallv from ", p, " at ", i, tag);
        }
      }
    }
    // Gather and scatter at every root.
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> mine(count), all(count * n, -1);
      for (size_t i = 0; i < count; ++i) mine[i] = val(rank, root, i);
      err = check(ncclGather(mine.data(), all.data(), count, ncclInt32, root, comm, nullptr), "gather");
      if (!err.empty()) return err + tag;
      if (rank == root) {
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            if (all[p * count + i] != val(p, root, i)) return strCat("gather root ", root, " from ", p, tag);
          }
        }
      }
      std::vector<int32_t> src(count * n), got(count, -1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) src[p * count + i] = val(root, p, i);
      }
      err = check(ncclScatter(src.data(), got.data(), count, ncclInt32, root, comm, nullptr), "scatter");
      if (!err.empty()) return err + tag;
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != val(root, rank, i)) return strCat("scatter root ", root, " at ", i, tag);
      }
    }
  }
  return check(ncclCommDestroy(comm), "destroy");
}

class P2pSweep : public ::testing::TestWithParam<int> {};

TEST_P(P2pSweep, SendRecvAllToAllGatherScatter) {
  int n = GetParam();
  RootProcess root = startRootProcess(kEnv);
  auto out = runRanks(n, [&](int rank, int nranks) { return p2pChecks(root.id, rank, nranks); }, 300, kEnv);
  EXPECT_EQ(describeFailures(out), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, P2pSweep, ::testing::Values(1, 2, 3, 5));

// One thread drives several communicators in one group, as a single process
// with several devices does.
TEST(CollThreads, OneThreadDrivesAllCommunicatorsInAGroup) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  const size_t count = 100003;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) bufs[r][i] = static_cast<float>((r + 1) * (i % 13));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), count, ncclFloat, ncclSum, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; i += 997) ASSERT_EQ(bufs[r][i], 10.0f * (i % 13)) << r << " " << i;
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
}  // namespace braid::test
