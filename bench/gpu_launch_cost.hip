// The host's cost of issuing a small collective on GPUs, against the GPU
// runtime's own costs, measured in the same process. Prints figures;
// asserts nothing about time.
//
//   gpu_launch_cost [--iters 200] [--reps 7]
//
// Every figure is host time per call (median over the repetitions of a
// loop of --iters calls, no synchronization inside the loop): what bounds
// an eager small collective when the GPU's part is shorter. The Braid rows
// use two ranks in this process (ncclCommInitAll over the first two GPUs,
// or twice GPU 0 when BRAID_SHARE_GPU=1 and there is one), 8-byte float
// sums, as the perf programs' -g 2 does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "nccl.h"
#include "platform/gpu_runtime.h"

namespace {

struct Args256 {
  char bytes[256];
};
struct Args3K {
  char bytes[3072];
};

__global__ void emptySmall(Args256 a) {
  if (a.bytes[0] == 1 && threadIdx.x == 0) a.bytes[1] = 0;
}
__global__ void emptyLarge(Args3K a) {
  if (a.bytes[0] == 1 && threadIdx.x == 0) a.bytes[1] = 0;
}

void die(const char* what, const char* why) {
  std::fprintf(stderr, "gpu_launch_cost: %s: %s\n", what, why);
  std::exit(1);
}
void check(hipError_t e, const char* what) {
  if (e != hipSuccess) die(what, hipGetErrorString(e));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(what, ncclGetErrorString(r));
}

int gIters = 200, gReps = 7;
std::vector<hipStream_t> gStreams;

void syncAll() {
  for (hipStream_t s : gStreams) check(hipStreamSynchronize(s), "synchronizing");
}

// Median host microseconds of one call of `body` (which makes `perLoop`
// calls per invocation).
double perCall(const std::function<void()>& body, int perLoop = 1) {
  for (int i = 0; i < 20; ++i) body();
  syncAll();
  std::vector<double> us;
  for (int r = 0; r < gReps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < gIters; ++i) body();
    auto t1 = std::chrono::steady_clock::now();
    syncAll();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / gIters / perLoop);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void row(const char* what, double us) {
  std::printf("%-62s %8.2f\n", what, us);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) gIters = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--reps") == 0) gReps = std::max(1, std::atoi(argv[i + 1]));
  }
  int ngpus = 0;
  check(hipGetDeviceCount(&ngpus), "counting GPUs");
  if (ngpus == 0) die("counting GPUs", "no GPU");
  const char* share = std::getenv("BRAID_SHARE_GPU");
  const bool shared = ngpus < 2;
  if (shared && (share == nullptr || std::strcmp(share, "1") != 0)) {
    die("two ranks", "one GPU: set BRAID_SHARE_GPU=1 to put both ranks on it");
  }
  int devs[2] = {0, shared ? 0 : 1};
  gStreams.resize(2);
  float* bufs[2];
  for (int r = 0; r < 2; ++r) {
    check(hipSetDevice(devs[r]), "selecting a GPU");
    check(hipStreamCreateWithFlags(&gStreams[static_cast<size_t>(r)], hipStreamNonBlocking),
          "creating a stream");
    check(hipMalloc(reinterpret_cast<void**>(&bufs[r]), 4096), "allocating");
    check(hipMemset(bufs[r], 0, 4096), "zeroing");
  }
  check(hipSetDevice(devs[0]), "selecting a GPU");
  std::printf("# host microseconds per call, median of %d loops of %d calls; %s\n", gReps, gIters,
              shared ? "two ranks sharing GPU 0" : "ranks on GPUs 0 and 1");
  std::printf("%-62s %8s\n", "# what", "us");

  Args256 small{};
  Args3K large{};
  hipStream_t s0 = gStreams[0], s1 = gStreams[1];
  row("runtime: launch, 256-byte parameters",
      perCall([&] { hipLaunchKernelGGL(emptySmall, dim3(1), dim3(512), 0, s0, small); }));
  row("runtime: launch, 3 KB parameters",
      perCall([&] { hipLaunchKernelGGL(emptyLarge, dim3(1), dim3(512), 0, s0, large); }));
  row("runtime: launch 256 B on each of two streams (per launch)",
      perCall(
          [&] {
            hipLaunchKernelGGL(emptySmall, dim3(1), dim3(512), 0, s0, small);
            hipLaunchKernelGGL(emptySmall, dim3(1), dim3(512), 0, s1, small);
          },
          2));
  row("runtime: hipSetDevice", perCall([&] { (void)hipSetDevice(devs[0]); }));
  row("runtime: hipGetLastError", perCall([&] { (void)hipGetLastError(); }));
  row("runtime: capture mode exchanged and restored", perCall([&] {
        hipStreamCaptureMode m = hipStreamCaptureModeRelaxed;
        (void)hipThreadExchangeStreamCaptureMode(&m);
        (void)hipThreadExchangeStreamCaptureMode(&m);
      }));

  ncclComm_t comms[2];
  check(ncclCommInitAll(comms, 2, devs), "ncclCommInitAll");
  auto allReduce = [&](int r) {
    check(ncclAllReduce(bufs[r], bufs[r] + 64, 2, ncclFloat, ncclSum, comms[r],
                        gStreams[static_cast<size_t>(r)]),
          "ncclAllReduce");
  };
  row("braid: group of 2 all-reduces, 8 B (per rank)", perCall(
                                                           [&] {
                                                             check(ncclGroupStart(), "ncclGroupStart");
                                                             allReduce(0);
                                                             allReduce(1);
                                                             check(ncclGroupEnd(), "ncclGroupEnd");
                                                           },
                                                           2));
  // The same calls split in two: the calls inside the group only record
  // their operation; ncclGroupEnd plans and launches.
  std::vector<double> inside, end;
  for (int r = 0; r < gReps; ++r) {
    double a = 0, b = 0;
    for (int i = 0; i < gIters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      check(ncclGroupStart(), "ncclGroupStart");
      allReduce(0);
      allReduce(1);
      auto t1 = std::chrono::steady_clock::now();
      check(ncclGroupEnd(), "ncclGroupEnd");
      auto t2 = std::chrono::steady_clock::now();
      a += std::chrono::duration<double, std::micro>(t1 - t0).count();
      b += std::chrono::duration<double, std::micro>(t2 - t1).count();
    }
    syncAll();
    inside.push_back(a / gIters / 2);
    end.push_back(b / gIters / 2);
  }
  std::sort(inside.begin(), inside.end());
  std::sort(end.begin(), end.end());
  row("braid:   of which recording the calls in the group (per rank)", inside[inside.size() / 2]);
  row("braid:   of which ncclGroupEnd (per rank)", end[end.size() / 2]);
  row("braid: group of send+recv each way, 8 B (per rank)",
      perCall(
          [&] {
            check(ncclGroupStart(), "ncclGroupStart");
            for (int r = 0; r < 2; ++r) {
              check(ncclSend(bufs[r], 2, ncclFloat, 1 - r, comms[r], gStreams[static_cast<size_t>(r)]),
                    "ncclSend");
              check(ncclRecv(bufs[r] + 64, 2, ncclFloat, 1 - r, comms[r], gStreams[static_cast<size_t>(r)]),
                    "ncclRecv");
            }
            check(ncclGroupEnd(), "ncclGroupEnd");
          },
          2));
  for (ncclComm_t c : comms) check(ncclCommDestroy(c), "ncclCommDestroy");

  ncclComm_t one;
  check(ncclCommInitAll(&one, 1, devs), "ncclCommInitAll");
  row("braid: all-reduce, 8 B, one rank alone (no group)", perCall([&] {
        check(ncclAllReduce(bufs[0], bufs[0] + 64, 2, ncclFloat, ncclSum, one, s0), "ncclAllReduce");
      }));
  check(ncclCommDestroy(one), "ncclCommDestroy");
  return 0;
}
