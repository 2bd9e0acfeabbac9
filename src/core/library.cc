#include "core/library.h"

#include <mutex>

#include "platform/gpu.h"
#include "util/log.h"
#include "util/param.h"

namespace braid {
namespace {
StringParam paramBackend("BACKEND", "auto",
                         "Where collectives run: auto (GPU if this build has one and a GPU is "
                         "visible, else host), host or gpu",
                         {"auto", "host", "gpu"});
}  // namespace

const char* backendName(Backend backend) { return backend == Backend::Gpu ? "gpu" : "host"; }

Status libraryInit() {
  BRAID_CHECK(ParamRegistry::instance().validate());
  logVersionOnce();
  return okStatus();
}

std::vector<std::string> backendsBuilt() {
  std::vector<std::string> out{"host"};
  if (std::string(gpuFlavorName()) != "none") out.emplace_back(gpuFlavorName());
  return out;
}

std::string gpuArchsBuilt() { return BRAID_GPU_ARCHS; }

Status selectBackend(Backend* backend) {
  std::string wanted = paramBackend.get();
  int gpus = 0;
  if (wanted == "host") {
    // No GPU runtime call at all: initializing it costs time (and memory on
    // every GPU) that a host-backend job should not pay.
    *backend = Backend::Host;
    BRAID_INFO(kLogInit, "backend host (BRAID_BACKEND=host)");
    return okStatus();
  }
  BRAID_CHECK(gpuDeviceCount(&gpus));
  if (wanted == "gpu") {
    if (std::string(gpuFlavorName()) == "none") {
      return invalidUsage("BRAID_BACKEND=gpu, but this build of Braid has no GPU backend "
                          "(rebuild with -DBRAID_GPU=cuda or hip)");
    }
    if (gpus == 0) return invalidUsage("BRAID_BACKEND=gpu, but no GPU is visible to this process");
    *backend = Backend::Gpu;
  } else {
    *backend = gpus > 0 ? Backend::Gpu : Backend::Host;
  }
  BRAID_INFO(kLogInit, "backend %s (BRAID_BACKEND=%s, %d GPU(s) visible)", backendName(*backend),
             wanted.c_str(), gpus);
  return okStatus();
}

}  // namespace braid
