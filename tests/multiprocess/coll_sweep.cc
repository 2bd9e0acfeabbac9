#include "coll_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "braid.h"
#include "exec/datatypes.h"
#include "harness.h"
#include "util/strings.h"

namespace braid::test {
namespace {

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

// `scale` multiplies every input first (PreMulSum; exact for these inputs).
template <typename T>
T reduceRef(ncclRedOp_t op, int n, size_t i, double scale = 1) {
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
  T t = make<T>(acc * scale);
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
  // After a failure this rank has left the sequence its peers follow: what
  // came next would only report the consequences.
  if (!fail->text.empty()) return;
  // The built-in operators, and PreMulSum with the scalar 2 given by value
  // and by pointer (set to 2 only after creation: it is read when each
  // collective runs). Each entry: the operator, the built-in one the
  // reference applies, and the scale of the inputs.
  T two = make<T>(2), pointed = make<T>(5);
  ncclRedOp_t byValue, byPointer;
  if (ncclRedOpCreatePreMulSum(&byValue, &two, type, ncclScalarHostImmediate, comm) != ncclSuccess ||
      ncclRedOpCreatePreMulSum(&byPointer, &pointed, type, ncclScalarDevice, comm) != ncclSuccess) {
    return fail->add(strCat("type ", type, ": ncclRedOpCreatePreMulSum: ", ncclGetLastError(comm)));
  }
  pointed = two;
  struct OpCase {
    ncclRedOp_t op, ref;
    double scale;
  };
  const OpCase ops[] = {{ncclSum, ncclSum, 1},  {ncclProd, ncclProd, 1},  {ncclMin, ncclMin, 1},
                        {ncclMax, ncclMax, 1},  {ncclAvg, ncclAvg, 1},    {byValue, ncclSum, 2},
                        {byPointer, ncclSum, 2}};
  struct Destroy {
    ncclComm_t comm;
    ncclRedOp_t a, b;
    ~Destroy() {
      ncclRedOpDestroy(a, comm);
      ncclRedOpDestroy(b, comm);
    }
  } destroy{comm, byValue, byPointer};
  for (size_t count : counts) {
    for (bool inPlace : {false, true}) {
      for (const OpCase& oc : ops) {
        const ncclRedOp_t op = oc.op;
        auto reduceRef = [&](ncclRedOp_t, int nr, size_t i) { return test::reduceRef<T>(oc.ref, nr, i, oc.scale); };
        auto input = [&](int r, size_t i, ncclRedOp_t) { return test::input<T>(r, i, oc.ref); };
        std::string tag = strCat("type ", type, " op ", op, " count ", count, inPlace ? " in-place" : "");
        // All-reduce.
        {
          std::vector<T> in(count), out(count);
          for (size_t i = 0; i < count; ++i) in[i] = make<T>(input(rank, i, op));
          T* dst = inPlace ? in.data() : out.data();
          ncclResult_t r = ncclAllReduce(in.data(), dst, count, type, op, comm, nullptr);
          if (r != ncclSuccess) return fail->add("allreduce " + tag + ": " + ncclGetLastError(comm));
          for (size_t i = 0; i < count; ++i) {
            if (!same(dst[i], reduceRef(op, n, i))) {
              return fail->add(strCat("allreduce ", tag, " at ", i, ": ", value(dst[i]), " vs ",
                                      value(reduceRef(op, n, i))));
            }
          }
        }
        // Reduce-scatter: input of n blocks, element j of the whole input.
        {
          std::vector<T> in(count * n), out(count);
          for (size_t j = 0; j < in.size(); ++j) in[j] = make<T>(input(rank, j, op));
          T* dst = inPlace ? in.data() + static_cast<size_t>(rank) * count : out.data();
          ncclResult_t r = ncclReduceScatter(in.data(), dst, count, type, op, comm, nullptr);
          if (r != ncclSuccess) return fail->add("reducescatter " + tag + ": " + ncclGetLastError(comm));
          for (size_t i = 0; i < count; ++i) {
            T want = reduceRef(op, n, static_cast<size_t>(rank) * count + i);
            if (!same(dst[i], want)) {
              return fail->add(
                  strCat("reducescatter ", tag, " at ", i, ": ", value(dst[i]), " vs ", value(want)));
            }
          }
        }
        // Reduce to a rotating root.
        {
          int root = (*iteration)++ % n;
          std::vector<T> in(count), out(count, make<T>(-1));
          for (size_t i = 0; i < count; ++i) in[i] = make<T>(input(rank, i, op));
          T* dst = inPlace ? in.data() : out.data();
          ncclResult_t r = ncclReduce(in.data(), dst, count, type, op, root, comm, nullptr);
          if (r != ncclSuccess) return fail->add("reduce " + tag + ": " + ncclGetLastError(comm));
          if (rank == root) {
            for (size_t i = 0; i < count; ++i) {
              if (!same(dst[i], reduceRef(op, n, i))) return fail->add(strCat("reduce ", tag, " at ", i));
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
          if (count > 0)
            std::memcpy(out.data() + static_cast<size_t>(rank) * count, in.data(), count * sizeof(T));
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

}  // namespace

SweepCounts sweepCountsFromEnv() {
  const char* mode = std::getenv("BRAID_TEST_SWEEP");
  return mode != nullptr && std::string(mode) == "quick" ? SweepCounts::kQuick : SweepCounts::kFull;
}

std::string collSweep(ncclComm_t comm, int rank, int n, SweepCounts counts) {
  Failure fail;
  int iteration = 0;
  const bool quick = counts == SweepCounts::kQuick;
  const std::vector<size_t> small =
      quick ? std::vector<size_t>{0, 1, 7, 4099} : std::vector<size_t>{0, 1, 7, 1023, 65537};
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
  return fail.text;
}

const char* splitShapeName(SplitShape shape) {
  switch (shape) {
    case SplitShape::kReversed: return "Reversed";
    case SplitShape::kOddEven: return "OddEven";
    case SplitShape::kLeaveLastOut: return "LeaveLastOut";
  }
  return "?";
}

std::string splitSweep(ncclComm_t parent, int rank, int n, SplitShape shape, SweepCounts counts) {
  // This rank's color and key, and the rank and size it must get.
  int color = 0, key = rank, newRank = rank, newSize = n;
  switch (shape) {
    case SplitShape::kReversed:
      key = n - 1 - rank;
      newRank = n - 1 - rank;
      break;
    case SplitShape::kOddEven:
      color = rank % 2;
      newRank = rank / 2;
      newSize = color == 0 ? (n + 1) / 2 : n / 2;
      break;
    case SplitShape::kLeaveLastOut:
      if (rank == n - 1) color = NCCL_SPLIT_NOCOLOR;
      newSize = n - 1;
      break;
  }
  const std::string tag = strCat(splitShapeName(shape), " split of ", n, " ranks, parent rank ", rank, ": ");
  ncclComm_t comm = nullptr;
  std::string err = check(ncclCommSplit(parent, color, key, &comm, nullptr), "ncclCommSplit");
  if (!err.empty()) return tag + err;
  if (color == NCCL_SPLIT_NOCOLOR) {
    if (comm == nullptr) return "";
    ncclCommDestroy(comm);
    return tag + "NCCL_SPLIT_NOCOLOR got a communicator, not NULL";
  }
  if (comm == nullptr) return tag + "got a NULL communicator";
  int gotRank = -1, gotSize = -1;
  err = check(ncclCommUserRank(comm, &gotRank), "ncclCommUserRank") +
        check(ncclCommCount(comm, &gotSize), "ncclCommCount");
  if (err.empty() && (gotRank != newRank || gotSize != newSize)) {
    err = strCat("new rank ", gotRank, " of ", gotSize, ", expected ", newRank, " of ", newSize);
  }
  // A wrong size would make the sweep's buffers wrong: no sweep then.
  if (err.empty()) err = collSweep(comm, newRank, newSize, counts);
  if (!err.empty()) {
    ncclCommAbort(comm);  // peers may still be inside a collective: do not wait for them
    return tag + err;
  }
  err = check(ncclCommDestroy(comm), "ncclCommDestroy");
  return err.empty() ? "" : tag + err;
}

}  // namespace braid::test
