// The host flavor has no GPU backend (selectBackend never picks it there).
#include "core/gpu_engine.h"

namespace braid {

Status GpuEngine::create(Communicator*, std::unique_ptr<GpuEngine>*) {
  return invalidUsage("this Braid was built without GPU support (BRAID_GPU=none)");
}

}  // namespace braid
