#include "coll_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
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

// A value that no collective of the sweeps produces (every input and
// result is >= 0): output buffers start with it, so an output left unwritten
// (or holding what an earlier collective left in recycled memory) shows.
template <typename T>
T sentinel() {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(-1);
  } else {
    return T::fromFloat(-1.0f);
  }
}

// "" when a collective call succeeded, else what went wrong.
std::string callError(ncclResult_t result, ncclComm_t comm) {
  if (result == ncclSuccess) return "";
  std::string text = ncclGetLastError(comm);
  return text.empty() ? std::string(ncclGetErrorString(result)) : text;
}

struct Failure {
  std::string text;
  void add(const std::string& s) {
    if (text.size() < 2000) text += s + "\n";
  }
};

// Two PreMulSum operators on `comm`: one whose scalar is given by value,
// one by pointer (ncclScalarDevice, read when each collective runs).
// Destroyed with this object.
class PreMulSumOps {
 public:
  // "" on success, else what failed.
  std::string create(ncclComm_t comm, ncclDataType_t type, void* valueScalar, void* pointedScalar) {
    comm_ = comm;
    if (ncclRedOpCreatePreMulSum(&byValue, valueScalar, type, ncclScalarHostImmediate, comm) != ncclSuccess)
      return strCat("type ", type, ": ncclRedOpCreatePreMulSum: ", ncclGetLastError(comm));
    haveValue_ = true;
    if (ncclRedOpCreatePreMulSum(&byPointer, pointedScalar, type, ncclScalarDevice, comm) != ncclSuccess)
      return strCat("type ", type, ": ncclRedOpCreatePreMulSum: ", ncclGetLastError(comm));
    havePointer_ = true;
    return "";
  }
  ~PreMulSumOps() {
    if (haveValue_) ncclRedOpDestroy(byValue, comm_);
    if (havePointer_) ncclRedOpDestroy(byPointer, comm_);
  }

  ncclRedOp_t byValue{}, byPointer{};

 private:
  ncclComm_t comm_ = nullptr;
  bool haveValue_ = false, havePointer_ = false;
};

template <typename T>
void runType(ncclComm_t comm, ncclDataType_t type, int rank, int n, const std::vector<size_t>& counts,
             SweepMemory& mem, Failure* fail, int* iteration) {
  // After a failure this rank has left the sequence its peers follow: what
  // came next would only report the consequences.
  if (!fail->text.empty()) return;
  // The built-in operators, and PreMulSum with the scalar 2 given by value
  // and by pointer (the pointer in `mem`, as NCCL wants device memory for
  // ncclScalarDevice; set to 2 only after creation: it is read when each
  // collective runs). Each entry: the operator, the built-in one the
  // reference applies, and the scale of the inputs.
  T two = make<T>(2);
  SweepBuffer<T> pointed(mem, std::vector<T>{make<T>(5)});
  if (!pointed.error().empty())
    return fail->add(strCat("type ", type, ": PreMulSum scalar: ", pointed.error()));
  PreMulSumOps preMulSum;
  if (std::string e = preMulSum.create(comm, type, &two, pointed.data()); !e.empty()) return fail->add(e);
  const ncclRedOp_t byValue = preMulSum.byValue, byPointer = preMulSum.byPointer;
  if (std::string e = pointed.upload({two}); !e.empty()) {
    return fail->add(strCat("type ", type, ": PreMulSum scalar: ", e));
  }
  struct OpCase {
    ncclRedOp_t op, ref;
    double scale;
  };
  const OpCase ops[] = {{ncclSum, ncclSum, 1},  {ncclProd, ncclProd, 1}, {ncclMin, ncclMin, 1},
                        {ncclMax, ncclMax, 1},  {ncclAvg, ncclAvg, 1},   {byValue, ncclSum, 2},
                        {byPointer, ncclSum, 2}};
  // The end of every collective: its call's outcome, then (after waiting for
  // the stream) elements [offset, offset + cnt) of `buf` into *got.
  auto finish = [&](ncclResult_t r, SweepBuffer<T>& buf, size_t offset, size_t cnt, std::vector<T>* got) {
    std::string e = callError(r, comm);
    if (e.empty()) e = mem.synchronize(comm);
    if (e.empty()) e = buf.download(got, offset, cnt);
    return e;
  };
  for (size_t count : counts) {
    for (bool inPlace : {false, true}) {
      // Out-of-place outputs; none in place.
      const std::vector<T> unwritten(inPlace ? 0 : count, sentinel<T>());
      for (const OpCase& oc : ops) {
        const ncclRedOp_t op = oc.op;
        auto reduceRef = [&](ncclRedOp_t, int nr, size_t i) {
          return test::reduceRef<T>(oc.ref, nr, i, oc.scale);
        };
        auto input = [&](int r, size_t i, ncclRedOp_t) { return test::input<T>(r, i, oc.ref); };
        std::string tag = strCat("type ", type, " op ", op, " count ", count, inPlace ? " in-place" : "");
        // All-reduce.
        {
          std::vector<T> h(count), got;
          for (size_t i = 0; i < count; ++i) h[i] = make<T>(input(rank, i, op));
          SweepBuffer<T> in(mem, h), out(mem, unwritten);
          SweepBuffer<T>& dst = inPlace ? in : out;
          std::string e = in.error() + out.error();
          if (e.empty()) {
            e = finish(ncclAllReduce(in.data(), dst.data(), count, type, op, comm, mem.stream()), dst, 0,
                       count, &got);
          }
          if (!e.empty()) return fail->add("allreduce " + tag + ": " + e);
          for (size_t i = 0; i < count; ++i) {
            if (!same(got[i], reduceRef(op, n, i))) {
              return fail->add(strCat("allreduce ", tag, " at ", i, ": ", value(got[i]), " vs ",
                                      value(reduceRef(op, n, i))));
            }
          }
        }
        // Reduce-scatter: input of n blocks, element j of the whole input.
        {
          std::vector<T> h(count * n), got;
          for (size_t j = 0; j < h.size(); ++j) h[j] = make<T>(input(rank, j, op));
          SweepBuffer<T> in(mem, h), out(mem, unwritten);
          SweepBuffer<T>& dst = inPlace ? in : out;
          const size_t offset = inPlace ? static_cast<size_t>(rank) * count : 0;
          std::string e = in.error() + out.error();
          if (e.empty()) {
            e = finish(ncclReduceScatter(in.data(), dst.data() + offset, count, type, op, comm, mem.stream()),
                       dst, offset, count, &got);
          }
          if (!e.empty()) return fail->add("reducescatter " + tag + ": " + e);
          for (size_t i = 0; i < count; ++i) {
            T want = reduceRef(op, n, static_cast<size_t>(rank) * count + i);
            if (!same(got[i], want)) {
              return fail->add(
                  strCat("reducescatter ", tag, " at ", i, ": ", value(got[i]), " vs ", value(want)));
            }
          }
        }
        // Reduce to a rotating root.
        {
          int root = (*iteration)++ % n;
          std::vector<T> h(count), got;
          for (size_t i = 0; i < count; ++i) h[i] = make<T>(input(rank, i, op));
          SweepBuffer<T> in(mem, h), out(mem, unwritten);
          SweepBuffer<T>& dst = inPlace ? in : out;
          std::string e = in.error() + out.error();
          if (e.empty()) {
            e = finish(ncclReduce(in.data(), dst.data(), count, type, op, root, comm, mem.stream()), dst, 0,
                       rank == root ? count : 0, &got);
          }
          if (!e.empty()) return fail->add("reduce " + tag + ": " + e);
          if (rank == root) {
            for (size_t i = 0; i < count; ++i) {
              if (!same(got[i], reduceRef(op, n, i))) return fail->add(strCat("reduce ", tag, " at ", i));
            }
          }
        }
      }
      std::string tag = strCat("type ", type, " count ", count, inPlace ? " in-place" : "");
      // All-gather; in place, the input is this rank's block of the output.
      {
        const size_t mine = static_cast<size_t>(rank) * count;
        std::vector<T> h(count), all(count * n, sentinel<T>()), got;
        for (size_t i = 0; i < count; ++i) h[i] = make<T>(input<T>(rank, i, ncclSum));
        if (inPlace) std::copy(h.begin(), h.end(), all.begin() + static_cast<std::ptrdiff_t>(mine));
        SweepBuffer<T> in(mem, inPlace ? std::vector<T>() : h), out(mem, all);
        const T* src = inPlace ? out.data() + mine : in.data();
        std::string e = in.error() + out.error();
        if (e.empty()) {
          e = finish(ncclAllGather(src, out.data(), count, type, comm, mem.stream()), out, 0, all.size(),
                     &got);
        }
        if (!e.empty()) return fail->add("allgather " + tag + ": " + e);
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; ++i) {
            if (!same(got[static_cast<size_t>(q) * count + i], make<T>(input<T>(q, i, ncclSum)))) {
              return fail->add(strCat("allgather ", tag, " block ", q, " at ", i));
            }
          }
        }
      }
      // Broadcast from a rotating root.
      {
        int root = (*iteration)++ % n;
        std::vector<T> h(count), got;
        for (size_t i = 0; i < count; ++i) h[i] = make<T>(input<T>(rank, i, ncclSum));
        SweepBuffer<T> in(mem, h), out(mem, unwritten);
        SweepBuffer<T>& dst = inPlace ? in : out;
        std::string e = in.error() + out.error();
        if (e.empty()) {
          e = finish(ncclBroadcast(in.data(), dst.data(), count, type, root, comm, mem.stream()), dst, 0,
                     count, &got);
        }
        if (!e.empty()) return fail->add("broadcast " + tag + ": " + e);
        for (size_t i = 0; i < count; ++i) {
          if (!same(got[i], make<T>(input<T>(root, i, ncclSum)))) {
            return fail->add(strCat("broadcast ", tag, " root ", root, " at ", i));
          }
        }
      }
    }
  }
}

// PreMulSum with a scalar that differs between ranks: each rank's scalar
// scales its own input only (NCCL's definition), given by value and by
// pointer in `mem`. All-reduce, reduce-scatter and reduce, in place and
// out of place. Sums of small integers: exact in every type run here.
template <typename T>
void runPerRankScalars(ncclComm_t comm, ncclDataType_t type, int rank, int n, SweepMemory& mem,
                       Failure* fail) {
  if (!fail->text.empty()) return;
  auto valueScalar = [](int r) { return static_cast<double>(r % 3 + 1); };
  auto pointedScalar = [](int r) { return static_cast<double>((r + 1) % 4 + 1); };
  T mineByValue = make<T>(valueScalar(rank));
  SweepBuffer<T> pointed(mem, std::vector<T>{make<T>(pointedScalar(rank))});
  if (!pointed.error().empty()) return fail->add(strCat("type ", type, ": scalar: ", pointed.error()));
  PreMulSumOps preMulSum;
  if (std::string e = preMulSum.create(comm, type, &mineByValue, pointed.data()); !e.empty())
    return fail->add(e);
  auto x = [](int r, size_t i) { return input<T>(r, i, ncclSum); };
  for (size_t count : {size_t(1), size_t(7), size_t(1023), size_t(65537)}) {
    for (bool inPlace : {false, true}) {
      for (int which = 0; which < 2; ++which) {
        const ncclRedOp_t op = which == 0 ? preMulSum.byValue : preMulSum.byPointer;
        auto want = [&](size_t i) {
          double acc = 0;
          for (int r = 0; r < n; ++r) acc += (which == 0 ? valueScalar(r) : pointedScalar(r)) * x(r, i);
          return make<T>(acc);
        };
        const std::string tag = strCat("type ", type, which == 0 ? " by value" : " by pointer", " count ",
                                       count, inPlace ? " in-place" : "");
        const std::vector<T> unwritten(inPlace ? 0 : count, sentinel<T>());
        for (int coll = 0; coll < 3; ++coll) {  // all-reduce, reduce-scatter, reduce to rank n-1
          const bool scatter = coll == 1;
          const int root = n - 1;
          std::vector<T> h(count * (scatter ? n : 1)), got;
          for (size_t j = 0; j < h.size(); ++j) h[j] = make<T>(x(rank, j));
          SweepBuffer<T> in(mem, h), out(mem, unwritten);
          SweepBuffer<T>& dst = inPlace ? in : out;
          const size_t offset = inPlace && scatter ? static_cast<size_t>(rank) * count : 0;
          std::string e = in.error() + out.error();
          ncclResult_t r = ncclSuccess;
          if (e.empty()) {
            r = coll == 0 ? ncclAllReduce(in.data(), dst.data(), count, type, op, comm, mem.stream())
                : scatter
                    ? ncclReduceScatter(in.data(), dst.data() + offset, count, type, op, comm, mem.stream())
                    : ncclReduce(in.data(), dst.data(), count, type, op, root, comm, mem.stream());
            e = callError(r, comm);
          }
          if (e.empty()) e = mem.synchronize(comm);
          const bool holds = coll != 2 || rank == root;
          if (e.empty() && holds) e = dst.download(&got, offset, count);
          const char* name = coll == 0 ? "allreduce" : scatter ? "reducescatter" : "reduce";
          if (!e.empty()) return fail->add(strCat("per-rank PreMulSum ", name, " ", tag, ": ", e));
          for (size_t i = 0; holds && i < count; ++i) {
            const T w = want(scatter ? static_cast<size_t>(rank) * count + i : i);
            if (!same(got[i], w)) {
              return fail->add(strCat("per-rank PreMulSum ", name, " ", tag, " at ", i, ": ", value(got[i]),
                                      " vs ", value(w)));
            }
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

std::string collSweep(ncclComm_t comm, int rank, int n, SweepCounts counts, SweepMemory& memory) {
  Failure fail;
  int iteration = 0;
  const bool quick = counts == SweepCounts::kQuick;
  const std::vector<size_t> small =
      quick ? std::vector<size_t>{0, 1, 7, 4099} : std::vector<size_t>{0, 1, 7, 1023, 65537};
  const std::vector<size_t> large = quick ? small : std::vector<size_t>{0, 1, 7, 1023, 65537, (1u << 20) + 3};
  runType<int8_t>(comm, ncclInt8, rank, n, small, memory, &fail, &iteration);
  runType<uint8_t>(comm, ncclUint8, rank, n, small, memory, &fail, &iteration);
  runType<int32_t>(comm, ncclInt32, rank, n, small, memory, &fail, &iteration);
  runType<uint32_t>(comm, ncclUint32, rank, n, small, memory, &fail, &iteration);
  runType<int64_t>(comm, ncclInt64, rank, n, small, memory, &fail, &iteration);
  runType<uint64_t>(comm, ncclUint64, rank, n, small, memory, &fail, &iteration);
  runType<Half>(comm, ncclFloat16, rank, n, small, memory, &fail, &iteration);
  runType<float>(comm, ncclFloat32, rank, n, large, memory, &fail, &iteration);
  runType<double>(comm, ncclFloat64, rank, n, small, memory, &fail, &iteration);
  runType<BFloat16>(comm, ncclBfloat16, rank, n, small, memory, &fail, &iteration);
  runType<Fp8E4M3>(comm, ncclFloat8e4m3, rank, n, small, memory, &fail, &iteration);
  runType<Fp8E5M2>(comm, ncclFloat8e5m2, rank, n, small, memory, &fail, &iteration);
  runPerRankScalars<float>(comm, ncclFloat32, rank, n, memory, &fail);
  runPerRankScalars<int32_t>(comm, ncclInt32, rank, n, memory, &fail);
  runPerRankScalars<double>(comm, ncclFloat64, rank, n, memory, &fail);
  runPerRankScalars<BFloat16>(comm, ncclBfloat16, rank, n, memory, &fail);
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

std::string splitSweep(ncclComm_t parent, int rank, int n, SplitShape shape, SweepCounts counts,
                       SweepMemory& memory) {
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
  if (err.empty()) err = collSweep(comm, newRank, newSize, counts, memory);
  if (!err.empty()) {
    ncclCommAbort(comm);  // peers may still be inside a collective: do not wait for them
    return tag + err;
  }
  err = check(ncclCommDestroy(comm), "ncclCommDestroy");
  return err.empty() ? "" : tag + err;
}

std::string p2pSweep(ncclComm_t comm, int rank, int n, SweepMemory& mem) {
  using Buffer = SweepBuffer<int32_t>;
  auto val = [](int from, int to, size_t i) { return static_cast<int32_t>(from * 1000003 + to * 7919 + i); };
  // The end of every call or group: its outcome, then the wait for the stream.
  auto done = [&](ncclResult_t result, const char* what) {
    std::string err = check(result, what);
    return err.empty() ? mem.synchronize(comm) : err;
  };
  std::string err;
  std::vector<int32_t> got;
  for (size_t count : {size_t(0), size_t(1), size_t(1001), size_t(300000)}) {
    std::string tag = strCat(" count ", count);
    const std::vector<int32_t> unwritten(count, -1);
    // Every rank sends to every rank (itself included) in one group, and
    // both directions of each pair at once: large messages must not deadlock.
    {
      std::vector<std::unique_ptr<Buffer>> out(n), in(n);
      for (int p = 0; p < n; ++p) {
        std::vector<int32_t> h(count);
        for (size_t i = 0; i < count; ++i) h[i] = val(rank, p, i);
        out[p] = std::make_unique<Buffer>(mem, h);
        in[p] = std::make_unique<Buffer>(mem, unwritten);
        err = out[p]->error() + in[p]->error();
        if (!err.empty()) return "send/recv buffers: " + err + tag;
      }
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {
        ncclSend(out[p]->data(), count, ncclInt32, p, comm, mem.stream());
        ncclRecv(in[p]->data(), count, ncclInt32, p, comm, mem.stream());
      }
      err = done(ncclGroupEnd(), "send/recv group");
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        err = in[p]->download(&got);
        if (!err.empty()) return err + tag;
        for (size_t i = 0; i < count; ++i) {
          if (got[i] != val(p, rank, i)) return strCat("send/recv from ", p, " at ", i, tag);
        }
      }
    }
    // Two messages to the same peer in one group arrive in call order.
    if (n > 1) {
      int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
      Buffer a(mem, std::vector<int32_t>(count, rank)),
          b(mem, std::vector<int32_t>(count / 2 + 1, rank + 100));
      Buffer ra(mem, unwritten), rb(mem, std::vector<int32_t>(count / 2 + 1, -1));
      err = a.error() + b.error() + ra.error() + rb.error();
      if (!err.empty()) return "ordered sends: " + err + tag;
      ncclGroupStart();
      ncclSend(a.data(), a.size(), ncclInt32, next, comm, mem.stream());
      ncclSend(b.data(), b.size(), ncclInt32, next, comm, mem.stream());
      ncclRecv(ra.data(), ra.size(), ncclInt32, prev, comm, mem.stream());
      ncclRecv(rb.data(), rb.size(), ncclInt32, prev, comm, mem.stream());
      err = done(ncclGroupEnd(), "ordered sends");
      if (err.empty()) err = ra.download(&got);
      if (!err.empty()) return err + tag;
      for (int32_t v : got) {
        if (v != prev) return "ordered sends: first message" + tag;
      }
      err = rb.download(&got);
      if (!err.empty()) return err + tag;
      for (int32_t v : got) {
        if (v != prev + 100) return "ordered sends: second message" + tag;
      }
    }
    // All-to-all.
    {
      std::vector<int32_t> h(count * n);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) h[p * count + i] = val(rank, p, i);
      }
      Buffer in(mem, h), out(mem, std::vector<int32_t>(count * n, -1));
      err = in.error() + out.error();
      if (err.empty())
        err = done(ncclAlltoAll(in.data(), out.data(), count, ncclInt32, comm, mem.stream()), "alltoall");
      if (err.empty()) err = out.download(&got);
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (got[p * count + i] != val(p, rank, i)) return strCat("alltoall from ", p, " at ", i, tag);
        }
      }
      // In place (as nccl-tests runs it): Braid stages the outgoing blocks.
      err =
          done(ncclAlltoAll(in.data(), in.data(), count, ncclInt32, comm, mem.stream()), "in-place alltoall");
      if (err.empty()) err = in.download(&got);
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (got[p * count + i] != val(p, rank, i))
            return strCat("in-place alltoall from ", p, " at ", i, tag);
        }
      }
    }
    // All-to-allv, uneven: rank r sends (r + p) % 3 * count / 2 elements to p.
    // The counts and displacements are host arrays (RCCL's API).
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
      std::vector<int32_t> h(stotal + 1);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < sc[p]; ++i) h[sd[p] + i] = val(rank, p, i);
      }
      Buffer in(mem, h), out(mem, std::vector<int32_t>(rtotal + 1, -1));
      err = in.error() + out.error();
      if (err.empty()) {
        err = done(ncclAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), ncclInt32,
                                 comm, mem.stream()),
                   "alltoallv");
      }
      if (err.empty()) err = out.download(&got);
      if (!err.empty()) return err + tag;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < rc[p]; ++i) {
          if (got[rd[p] + i] != val(p, rank, i)) return strCat("alltoallv from ", p, " at ", i, tag);
        }
      }
    }
    // Gather and scatter at every root.
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> h(count);
      for (size_t i = 0; i < count; ++i) h[i] = val(rank, root, i);
      Buffer mine(mem, h), all(mem, std::vector<int32_t>(count * n, -1));
      err = mine.error() + all.error();
      if (err.empty()) {
        err = done(ncclGather(mine.data(), all.data(), count, ncclInt32, root, comm, mem.stream()), "gather");
      }
      if (err.empty() && rank == root) err = all.download(&got);
      if (!err.empty()) return err + tag;
      if (rank == root) {
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            if (got[p * count + i] != val(p, root, i)) return strCat("gather root ", root, " from ", p, tag);
          }
        }
      }
      std::vector<int32_t> hs(count * n);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) hs[p * count + i] = val(root, p, i);
      }
      Buffer src(mem, hs), dst(mem, unwritten);
      err = src.error() + dst.error();
      if (err.empty()) {
        err =
            done(ncclScatter(src.data(), dst.data(), count, ncclInt32, root, comm, mem.stream()), "scatter");
      }
      if (err.empty()) err = dst.download(&got);
      if (!err.empty()) return err + tag;
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != val(root, rank, i)) return strCat("scatter root ", root, " at ", i, tag);
      }
    }
  }
  return "";
}

std::string groupSweep(ncclComm_t comm, int rank, int n, SweepMemory& mem) {
  using FBuf = SweepBuffer<float>;
  // Small integers: every sum, average and maximum is exact.
  auto val = [](int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 7 + 1)); };
  const float rankSum = static_cast<float>(n * (n + 1) / 2);
  auto sumAt = [&](size_t i) { return rankSum * static_cast<float>(i % 7 + 1); };
  auto input = [&](size_t count, int r) {
    std::vector<float> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = val(r, i);
    return h;
  };
  constexpr int kMore = 10;
  const int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  std::vector<float> got;
  for (size_t count : {size_t(1), size_t(1023), size_t(65537), size_t(300001)}) {
    const std::string tag = strCat(" count ", count);
    const size_t part = count / 3 + 1;
    const std::vector<float> none(count, -1.0f);
    FBuf in(mem, input(count, rank)), sum(mem, none), inPlace(mem, input(count, rank)), avg(mem, none),
        partSum(mem, std::vector<float>(part, -1.0f)), max(mem, none), scattered(mem, none),
        reduced(mem, none), fromPrev(mem, none), all(mem, std::vector<float>(count * n, -1.0f));
    std::vector<int32_t> i32(count);
    for (size_t i = 0; i < count; ++i) i32[i] = static_cast<int32_t>(rank * 1000 + i % 1000);
    SweepBuffer<int32_t> gatherIn(mem, i32), gathered(mem, std::vector<int32_t>(count * n, -1));
    SweepBuffer<int8_t> bcast(mem, std::vector<int8_t>(count, static_cast<int8_t>(rank)));
    FBuf reduceScatterIn(mem, input(count * n, rank));
    std::vector<std::unique_ptr<FBuf>> more;
    for (int k = 0; k < kMore; ++k) more.push_back(std::make_unique<FBuf>(mem, input(count + k, rank)));
    std::string err = in.error() + sum.error() + inPlace.error() + avg.error() + partSum.error() +
                      max.error() + scattered.error() + reduced.error() + fromPrev.error() + all.error() +
                      gatherIn.error() + gathered.error() + bcast.error() + reduceScatterIn.error();
    for (auto& b : more) err += b->error();
    if (!err.empty()) return "group buffers: " + err + tag;
    const braidStream_t s = mem.stream();
    const int root = n - 1;
    ncclResult_t r = ncclGroupStart();
    auto call = [&r](ncclResult_t x) {
      if (r == ncclSuccess) r = x;
    };
    call(ncclAllReduce(in.data(), sum.data(), count, ncclFloat32, ncclSum, comm, s));
    call(ncclAllReduce(inPlace.data(), inPlace.data(), count, ncclFloat32, ncclSum, comm, s));
    call(ncclAllReduce(in.data(), avg.data(), count, ncclFloat32, ncclAvg, comm, s));
    call(ncclAllReduce(in.data(), partSum.data(), part, ncclFloat32, ncclSum, comm, s));
    call(ncclAllReduce(in.data(), max.data(), count, ncclFloat32, ncclMax, comm, s));
    call(ncclAllGather(gatherIn.data(), gathered.data(), count, ncclInt32, comm, s));
    call(ncclBroadcast(bcast.data(), bcast.data(), count, ncclInt8, root, comm, s));
    call(ncclReduceScatter(reduceScatterIn.data(), scattered.data(), count, ncclFloat32, ncclSum, comm, s));
    call(ncclReduce(in.data(), reduced.data(), count, ncclFloat32, ncclSum, 0, comm, s));
    call(ncclSend(in.data(), count, ncclFloat32, next, comm, s));
    call(ncclRecv(fromPrev.data(), count, ncclFloat32, prev, comm, s));
    for (auto& b : more) call(ncclAllReduce(b->data(), b->data(), b->size(), ncclFloat32, ncclSum, comm, s));
    call(ncclAllGather(sum.data(), all.data(), count, ncclFloat32, comm, s));  // after the sum, in call order
    call(ncclGroupEnd());
    err = check(r, "a group of collectives");
    if (err.empty()) err = mem.synchronize(comm);
    if (!err.empty()) return err + tag;
    // Each buffer against what it should hold: expect(i) at element i.
    auto verify = [&](FBuf& b, const char* what, const std::function<float(size_t)>& expect) -> std::string {
      std::string e = b.download(&got);
      for (size_t i = 0; i < got.size() && e.empty(); ++i) {
        if (got[i] != expect(i)) e = strCat("group: ", what, " at ", i, ": ", got[i], ", not ", expect(i));
      }
      return e;
    };
    err = verify(sum, "all-reduce", sumAt);
    if (err.empty()) err = verify(inPlace, "in-place all-reduce", sumAt);
    if (err.empty()) err = verify(avg, "average", [&](size_t i) { return sumAt(i) / static_cast<float>(n); });
    if (err.empty()) err = verify(partSum, "shorter all-reduce", sumAt);
    if (err.empty()) err = verify(max, "max", [&](size_t i) { return static_cast<float>(n) * val(0, i); });
    if (err.empty()) {
      // Rank q's part of the reduce-scatter input is elements [q*count, (q+1)*count).
      err = verify(scattered, "reduce-scatter", [&](size_t i) { return sumAt(rank * count + i); });
    }
    if (err.empty() && rank == 0) err = verify(reduced, "reduce", sumAt);
    if (err.empty()) err = verify(fromPrev, "receive", [&](size_t i) { return val(prev, i); });
    for (int k = 0; k < kMore && err.empty(); ++k) err = verify(*more[k], "one of ten all-reduces", sumAt);
    if (err.empty()) err = verify(all, "all-gather of the sum", [&](size_t j) { return sumAt(j % count); });
    std::vector<int32_t> gotI;
    if (err.empty()) err = gathered.download(&gotI);
    for (size_t j = 0; j < gotI.size() && err.empty(); ++j) {
      if (gotI[j] != static_cast<int32_t>((j / count) * 1000 + j % count % 1000))
        err = strCat("group: int32 all-gather at ", j);
    }
    std::vector<int8_t> gotB;
    if (err.empty()) err = bcast.download(&gotB);
    for (size_t i = 0; i < gotB.size() && err.empty(); ++i) {
      if (gotB[i] != static_cast<int8_t>(root)) err = strCat("group: int8 broadcast at ", i);
    }
    if (!err.empty()) return err + tag;
  }
  return "";
}

}  // namespace braid::test
