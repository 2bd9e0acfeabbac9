// Process-wide start-up of Braid and the choice of backend.
//
// libraryInit() runs on the first call of any entry point that starts work
// (unique id, communicator init, memory allocation): it validates every
// parameter in the environment (a bad value fails the call, naming the
// variable) and prints the version banner. It is cheap after the first call
// and safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace braid {

enum class Backend { Host, Gpu };
const char* backendName(Backend backend);

Status libraryInit();

// The backends this build contains: always "host", plus "cuda" or "hip".
std::vector<std::string> backendsBuilt();

// GPU architectures the kernels were compiled for ("sm_90", "gfx90a,gfx940"; "" for host).
std::string gpuArchsBuilt();

// Backend for new work: BRAID_BACKEND=host|gpu if set, else the GPU when this
// build has one and a GPU is visible, else the host.
Status selectBackend(Backend* backend);

}  // namespace braid
