// The sweep every perf program shares (nccl-tests' TimeTest/BenchTime): per
// type, op and root, warm up at the largest and smallest size, then per size
// time out-of-place and in-place, check, and print one row.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "check.h"
#include "collective.h"
#include "data.h"
#include "options.h"
#include "procs.h"
#include "report.h"

namespace perf {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What one thread drives: its ranks (GPUs), their buffers and communicators.
struct Worker {
  int thread = 0;
  int firstRank = 0;
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Ops>> ops;
  std::vector<void*> send, recv;
  std::vector<unsigned char> stage;  // host copy for fill and check
  int seed = 0;
};

class Sweep {
 public:
  Sweep(const Options& o, const Collective& c, Library lib, Team& team, int nranks, Results* results)
      : o_(o), coll_(c), lib_(lib), team_(team), nranks_(nranks), results_(results) {}

  void run(Worker& w) {
    for (const TypeInfo& t : o_.types) {
      std::vector<OpInfo> ops = coll_.usesOp ? o_.ops : std::vector<OpInfo>{allOps()[0]};
      for (const OpInfo& op : ops) {
        int firstRoot = o_.root < 0 ? 0 : o_.root, lastRoot = o_.root < 0 ? nranks_ - 1 : o_.root;
        if (!coll_.usesRoot) lastRoot = firstRoot;
        for (int root = firstRoot; root <= lastRoot; ++root) timeTest(w, t, op, root);
      }
    }
  }

 private:
  bool speaks(const Worker& w) const { return w.thread == 0 && team_.procs().rank() == 0; }

  Layout layoutFor(size_t bytes, const TypeInfo& t) const {
    return coll_.layout(bytes / t.size, nranks_, t.size);
  }

  void startColl(Worker& w, const Layout& l, const TypeInfo& t, const OpInfo& op, int root, bool inPlace) {
    const bool group = w.ops.size() > 1;
    if (group) opsGroupStart(lib_);
    for (size_t g = 0; g < w.ops.size(); ++g) {
      int rank = w.firstRank + static_cast<int>(g);
      char* recv = static_cast<char*>(w.recv[g]);
      CallArgs a;
      a.send = inPlace ? recv + l.sendInplaceOffset * rank * t.size : w.send[g];
      a.recv = inPlace ? recv + l.recvInplaceOffset * rank * t.size : recv;
      a.count = l.paramCount;
      a.type = t.type;
      a.op = op.op;
      a.root = root;
      a.rank = rank;
      a.nranks = nranks_;
      if (op.op == kPreMulSum) {
        // As nccl-tests: an op per rank and call, made before and destroyed after it.
        alignas(8) unsigned char scalar[8] = {};
        storeElement(t, scalar, 0, preMulScalar(rank));
        a.op = w.ops[g]->createPreMulSum(scalar, t.type);
      }
      coll_.run(*w.ops[g], a);
      if (op.op == kPreMulSum) w.ops[g]->destroyOp(a.op);
    }
    if (group) opsGroupEnd(lib_);
    if (o_.blocking) {
      complete(w);
      team_.barrier(w.thread);
    }
  }

  void complete(Worker& w) {
    for (auto& d : w.devices) d->synchronize();
  }

  // Poisons each rank's output buffer and writes its input where the call reads it.
  void fill(Worker& w, const Layout& l, const TypeInfo& t, const DataSpec& d, bool inPlace) {
    size_t recvBytes = std::max(l.recvCount, l.sendCount) * t.size;
    for (size_t g = 0; g < w.devices.size(); ++g) {
      int rank = w.firstRank + static_cast<int>(g);
      std::memset(w.stage.data(), 0xA5, recvBytes);
      w.devices[g]->toDevice(w.recv[g], w.stage.data(), recvBytes);
      fillInput(d, rank, w.stage.data(), l.sendCount);
      char* in = inPlace ? static_cast<char*>(w.recv[g]) + l.sendInplaceOffset * rank * t.size
                         : static_cast<char*>(w.send[g]);
      w.devices[g]->toDevice(in, w.stage.data(), l.sendCount * t.size);
    }
  }

  int64_t countWrongAll(Worker& w, const Layout& l, const TypeInfo& t, const DataSpec& d, int root,
                        bool inPlace) {
    int64_t wrong = 0;
    for (size_t g = 0; g < w.devices.size(); ++g) {
      int rank = w.firstRank + static_cast<int>(g);
      const char* out = static_cast<char*>(w.recv[g]) + (inPlace ? l.recvInplaceOffset * rank * t.size : 0);
      w.devices[g]->toHost(w.stage.data(), out, l.recvCount * t.size);
      wrong += countWrong(d, coll_, l, rank, nranks_, root, w.stage.data());
    }
    return wrong;
  }

  Measure benchTime(Worker& w, const Layout& l, const TypeInfo& t, const OpInfo& op, int root, bool inPlace) {
    Measure m;
    if (inPlace && coll_.inPlace == InPlace::kSkipped) {
      m.skipped = true;
      return m;
    }
    const bool reportErrors = o_.check > 0 && (!inPlace || coll_.inPlace == InPlace::kChecked);
    if (o_.check) fill(w, l, t, DataSpec(t, op, nranks_, 99), inPlace);
    startColl(w, l, t, op, root, inPlace);  // sync
    complete(w);
    team_.barrier(w.thread);

    const bool graph = o_.graphLaunches > 0 && w.devices[0]->graphs();
    if (graph) {
      for (auto& d : w.devices) d->capture();
    }
    double t0 = now();
    for (int iter = 0; iter < o_.iters; ++iter) {
      if (o_.aggIters > 1) opsGroupStart(lib_);
      for (int a = 0; a < o_.aggIters; ++a) startColl(w, l, t, op, root, inPlace);
      if (o_.aggIters > 1) opsGroupEnd(lib_);
    }
    if (graph) {
      for (auto& d : w.devices) d->endCapture();
      for (auto& d : w.devices) d->instantiate();
      team_.barrier(w.thread);
      t0 = now();
      for (auto& d : w.devices) d->replay(o_.graphLaunches);
    }
    const double perCall = static_cast<double>(o_.iters) * o_.aggIters * (graph ? o_.graphLaunches : 1);
    double cpuSec = (now() - t0) / perCall;
    complete(w);
    double sec = (now() - t0) / perCall;
    if (graph) {
      for (auto& d : w.devices) d->dropGraph();
    }
    if (o_.reportCputime) sec = cpuSec;
    static const Reduce kModes[] = {Reduce::kRank0, Reduce::kSum, Reduce::kMin, Reduce::kMax};
    sec = team_.allReduce(w.thread, sec, kModes[o_.average]);
    if (o_.average == 1) sec /= team_.procs().size() * team_.nthreads();

    m.timeUs = sec * 1e6;
    m.algbw = sec > 0 ? coll_.algBytes(l.paramCount, t.size, nranks_) / 1e9 / sec : 0;
    m.busbw = m.algbw * coll_.busFactor(nranks_);
    team_.barrier(w.thread);

    int64_t wrong = 0;
    for (int c = 0; c < o_.check; ++c) {
      DataSpec d(t, op, nranks_, ++w.seed);
      fill(w, l, t, d, inPlace);
      startColl(w, l, t, op, root, inPlace);
      complete(w);
      wrong = static_cast<int64_t>(team_.allReduce(
          w.thread, static_cast<double>(countWrongAll(w, l, t, d, root, inPlace)), Reduce::kSum));
      if (wrong) break;
    }
    m.wrong = reportErrors ? wrong : -1;
    return m;
  }

  void timeTest(Worker& w, const TypeInfo& t, const OpInfo& op, int root) {
    team_.barrier(w.thread);
    for (size_t bytes : {o_.maxBytes, o_.minBytes}) {  // warm up at both ends
      Layout l = layoutFor(bytes, t);
      for (int i = 0; i < o_.warmup; ++i) startColl(w, l, t, op, root, false);
      complete(w);
    }
    for (int cycle = 0; o_.cycles == 0 || cycle < o_.cycles; ++cycle) {
      for (size_t size = o_.minBytes; size <= o_.maxBytes;
           size = o_.stepFactor > 1 ? size * o_.stepFactor : size + o_.stepBytes) {
        Layout l = layoutFor(size, t);
        Row row;
        row.bytes = std::max(l.sendCount, l.recvCount) * t.size;
        row.count = l.paramCount;
        row.type = t.name;
        row.redop = coll_.usesOp ? op.name : "none";
        row.root = coll_.usesRoot ? root : -1;
        if (speaks(w)) std::printf("%s", rowStart(row).c_str());
        row.outOfPlace = benchTime(w, l, t, op, root, false);
        if (speaks(w)) std::printf("%s", measureText(row.outOfPlace).c_str());
        row.inPlace = benchTime(w, l, t, op, root, true);
        if (speaks(w)) {
          std::printf("%s\n", measureText(row.inPlace).c_str());
          results_->add(row);
        }
        if (size == 0 && o_.stepFactor > 1) break;  // -b 0 -e 0 -f F: 0 * F never grows
      }
    }
  }

  const Options& o_;
  const Collective& coll_;
  Library lib_;
  Team& team_;
  int nranks_;
  Results* results_;
};

}  // namespace

namespace {

// Bytes each rank's send and recv buffers need for the whole sweep.
size_t bufferBytes(const Options& o, const Collective& coll, int nranks) {
  size_t bytes = 1;
  for (const TypeInfo& t : o.types) {
    Layout l = coll.layout(o.maxBytes / t.size, nranks, t.size);
    bytes = std::max(bytes, std::max(l.sendCount, l.recvCount) * t.size);
  }
  return bytes;
}

std::string jsonHeader(const Options& o, const Collective& coll, Library lib, const Procs& procs,
                       int nranks) {
  char buf[1024];
  std::snprintf(
      buf, sizeof(buf),
      "  \"program\": %s,\n  \"collective\": %s,\n  \"library\": %s,\n  \"library_version\": %s,\n"
      "  \"launcher\": %s,\n  \"nranks\": %d,\n  \"nprocs\": %d,\n  \"nthreads\": %d,\n  \"ngpus\": %d,\n"
      "  \"host_memory\": %s,\n  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"stepfactor\": %zu,\n"
      "  \"stepbytes\": %zu,\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"agg_iters\": %d,\n"
      "  \"check\": %d,\n  \"graph\": %d,\n  \"average\": %d",
      jsonString(coll.program).c_str(), jsonString(coll.name).c_str(), jsonString(libraryName(lib)).c_str(),
      jsonString(libraryVersion(lib)).c_str(), jsonString(procs.kind()).c_str(), nranks, procs.size(),
      o.nthreads, o.ngpus, lib == Library::kMpi || hostMemory() ? "true" : "false", o.minBytes, o.maxBytes,
      o.stepFactor, o.stepBytes, o.iters, o.warmup, o.aggIters, o.check, o.graphLaunches, o.average);
  return buf;
}

// The options that shape the sweep, as a 52-bit FNV-1a hash (exact in a
// double): every process must run the same one, or they wait on each other
// until the stall timeout.
double sweepHash(const Options& o) {
  std::string text =
      std::to_string(o.nthreads) + " " + std::to_string(o.ngpus) + " " + std::to_string(o.minBytes) + " " +
      std::to_string(o.maxBytes) + " " + std::to_string(o.stepBytes) + " " + std::to_string(o.stepFactor) +
      " " + std::to_string(o.iters) + " " + std::to_string(o.warmup) + " " + std::to_string(o.aggIters) +
      " " + std::to_string(o.cycles) + " " + std::to_string(o.check) + " " + std::to_string(o.root) + " " +
      std::to_string(o.blocking) + " " + std::to_string(o.graphLaunches) + " " + std::to_string(o.average) +
      " " + std::to_string(o.reportCputime) + " " + o.reference + " " + std::to_string(o.registration);
  for (const OpInfo& op : o.ops) text += std::string(" ") + op.name;
  for (const TypeInfo& t : o.types) text += std::string(" ") + t.name;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return static_cast<double>(h >> 12);
}

void* allocBuffer(Device& d, size_t bytes, bool fromLibrary) {
  if (!fromLibrary) return d.alloc(bytes);
  void* p = nullptr;
  NCCLCHECK(ncclMemAlloc(&p, bytes ? bytes : 1));
  return p;
}

void releaseBuffer(Device& d, void* p, bool fromLibrary) {
  if (!fromLibrary) return d.release(p);
  d.select();
  NCCLCHECK(ncclMemFree(p));
}

}  // namespace

int perfMain(int argc, char** argv, const Collective& coll) {
  setlinebuf(stdout);
  Options o = parseOptions(argc, argv, coll.program);
  const Library lib = o.reference == "mpi" ? Library::kMpi : Library::kNccl;
  std::unique_ptr<Procs> procs = startProcs(argc, argv, o.nprocs, lib == Library::kMpi);
  const bool root0 = procs->rank() == 0;
  const double hash = sweepHash(o);
  if (procs->allReduce(hash, Reduce::kMin) != procs->allReduce(hash, Reduce::kMax)) {
    if (root0) {
      std::fprintf(stderr,
                   "%s: the processes were started with different options; every process needs the same "
                   "-t -g -b -e -i -f -n -w -m -N -c -o -d -r -z -G -a -C -R\n",
                   coll.program);
    }
    procs.reset();  // MPI_Finalize
    return EXIT_FAILURE;
  }
  if (lib == Library::kMpi) {
    PERF_REQUIRE(o.nthreads == 1 && o.ngpus == 1, "-R mpi runs one rank per process: no -t or -g");
  }
  const int perProc = o.nthreads * o.ngpus;
  const int nranks = procs->size() * perProc;
  PERF_REQUIRE(o.root < nranks, "-r %d: there are only %d ranks", o.root, nranks);
  const bool graphs = o.graphLaunches > 0 && lib == Library::kNccl && !hostMemory();

  if (root0) {
    int headers = NCCL_VERSION_CODE, library = 0;
    NCCLCHECK(ncclGetVersion(&library));
    std::printf("# Braid perf %s: %s nccl-headers=%d nccl-library=%d\n", BRAID_PERF_VERSION,
                libraryVersion(lib).c_str(), headers, library);
    std::printf("# Collective test starting: %s\n", coll.program);
    std::printf(
        "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
        "agg iters: %d validation: %d graph: %d\n",
        o.nthreads, o.ngpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
        o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.aggIters, o.check,
        graphs ? o.graphLaunches : 0);
    std::printf("# Ranks: %d = %d processes (%s) x %d threads x %d GPUs; library %s\n", nranks, procs->size(),
                procs->kind(), o.nthreads, o.ngpus, libraryName(lib));
    if (o.graphLaunches > 0 && !graphs)
      std::printf("# -G %d ignored: graphs need GPU streams\n", o.graphLaunches);
    if (o.registration && lib == Library::kNccl) {
      std::printf("# -R %d: buffers from ncclMemAlloc, %s\n", o.registration,
                  o.registration == 1 ? "registered (ncclCommRegister)"
                                      : "symmetric windows (ncclCommWindowRegister)");
    }
    if (o.blocking)
      std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    std::printf("#\n# Using devices\n");
  }

  // This process's ranks: GPU index localRank * perProc + i, as nccl-tests.
  // -R 1/2 (nccl-tests): the library's own memory, registered after init.
  const bool registered = o.registration > 0 && lib == Library::kNccl;
  std::vector<Worker> workers(static_cast<size_t>(o.nthreads));
  std::string lines;
  const size_t bytes = bufferBytes(o, coll, nranks);
  for (int t = 0; t < o.nthreads; ++t) {
    Worker& w = workers[static_cast<size_t>(t)];
    w.thread = t;
    w.firstRank = (procs->rank() * o.nthreads + t) * o.ngpus;
    for (int g = 0; g < o.ngpus; ++g) {
      int index = procs->localRank() * perProc + t * o.ngpus + g;
      w.devices.push_back(lib == Library::kMpi ? makeHostDevice("[host] host memory") : openDevice(index));
      Device& d = *w.devices.back();
      d.select();
      w.send.push_back(allocBuffer(d, bytes, registered));
      w.recv.push_back(allocBuffer(d, bytes, registered));
      // As long as the host name and device description are: never cut.
      const int device = lib == Library::kMpi || hostMemory() ? -1 : index;
      const char* kLine = "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n";
      const int length = std::snprintf(nullptr, 0, kLine, w.firstRank + g, 0, static_cast<int>(getpid()),
                                       hostName().c_str(), device, d.describe().c_str());
      std::vector<char> line(static_cast<size_t>(std::max(length, 0)) + 1);
      std::snprintf(line.data(), line.size(), kLine, w.firstRank + g, 0, static_cast<int>(getpid()),
                    hostName().c_str(), device, d.describe().c_str());
      lines += line.data();
    }
    w.stage.resize(bytes);
  }
  std::vector<std::string> all = procs->gather(lines);
  if (root0) {
    for (const std::string& l : all) std::printf("%s", l.c_str());
  }

  ncclUniqueId id{};
  if (lib == Library::kNccl) {
    if (root0) id = ncclId();
    procs->broadcast(&id, sizeof(id), 0);
  }
  Team team(*procs, o.nthreads);
  Results results;
  Sweep sweep(o, coll, lib, team, nranks, &results);
  auto body = [&](Worker& w) {
    if (lib == Library::kMpi) {
      w.ops.push_back(makeMpiOps());
    } else {
      std::vector<Device*> devs;
      for (auto& d : w.devices) devs.push_back(d.get());
      w.ops = initNcclRanks(id, nranks, w.firstRank, devs);
      if (registered) registerNcclBuffers(w.ops, devs, w.send, w.recv, bytes, o.registration);
    }
    w.devices[0]->select();
    team.barrier(w.thread);
    if (w.thread == 0 && root0) std::printf("#\n%s", columnHeader(o.reportCputime).c_str());
    sweep.run(w);
    team.barrier(w.thread);
    w.ops.clear();  // destroys the communicators
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < o.nthreads; ++t) threads.emplace_back(body, std::ref(workers[static_cast<size_t>(t)]));
  body(workers[0]);
  for (std::thread& t : threads) t.join();
  for (Worker& w : workers) {
    for (size_t g = 0; g < w.devices.size(); ++g) {
      releaseBuffer(*w.devices[g], w.send[g], registered);
      releaseBuffer(*w.devices[g], w.recv[g], registered);
    }
  }

  const int errors = static_cast<int>(procs->allReduce(root0 ? results.errors() : 0, Reduce::kSum));
  if (root0) {
    std::printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n", results.avgBusbw());
    std::printf("#\n# Collective test concluded: %s\n#\n", coll.program);
    if (!o.jsonFile.empty() && !results.writeJson(o.jsonFile, jsonHeader(o, coll, lib, *procs, nranks))) {
      PERF_DIE("-J %s: cannot write: %s", o.jsonFile.c_str(), std::strerror(errno));
    }
  }
  std::fflush(stdout);
  procs.reset();  // MPI_Finalize
  return errors ? EXIT_FAILURE : EXIT_SUCCESS;
}

}  // namespace perf
