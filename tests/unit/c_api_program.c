/*
 * A plain C99 program using the NCCL API as an NCCL user would. Built against
 * Braid's libnccl.so.2 (c_api_program) and against NVIDIA's libnccl.so
 * (dropin_program, then run with Braid's libnccl.so.2 on LD_LIBRARY_PATH).
 * With --expect-braid it also checks that the library it got is Braid. The
 * device API's header (nccl_device.h) is included too: its structures and
 * host functions are plain C.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"
#include "nccl_device.h"

static int failures = 0;
#define EXPECT(cond)                                              \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                 \
    }                                                             \
  } while (0)

int main(int argc, char** argv) {
  int expectBraid = argc > 1 && strcmp(argv[1], "--expect-braid") == 0;
  int version = 0;
  EXPECT(ncclGetVersion(&version) == ncclSuccess);
  EXPECT(version >= NCCL_VERSION(2, 28, 0));
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);

  for (int r = -1; r <= ncclNumResults + 1; ++r) {
    const char* text = ncclGetErrorString((ncclResult_t)r);
    EXPECT(text != NULL && text[0] != '\0');
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  EXPECT(config.size == sizeof(ncclConfig_t));
  EXPECT(sizeof(ncclUniqueId) == 128);

  /* A NULL communicator is an invalid argument, whatever the call. */
  float x = 0.0f;
  EXPECT(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument);
  const char* last = ncclGetLastError(NULL);
  EXPECT(last != NULL);

  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclGroupEnd() == ncclSuccess);

  /* The device API's host side: requirements for LSA barriers, teams. */
  ncclTeam_t team = {2, 0, 1};
  ncclLsaBarrierHandle_t barrier;
  ncclDevResourceRequirements_t req;
  EXPECT(ncclLsaBarrierCreateRequirement(team, 2, &barrier, &req) == ncclSuccess);
  EXPECT(req.bufferSize == (3 + 2) * 2 * 4 && barrier.nBarriers == 2);
  EXPECT(req.outBufferHandle == &barrier.bufHandle);
  EXPECT(sizeof(ncclDevComm_t) == 200 && sizeof(struct ncclWindow_vidmem) == 72);
  EXPECT(ncclTeamWorld(NULL).nRanks == 0);

  void* braidVersion = dlsym(RTLD_DEFAULT, "braidGetVersion");
  if (expectBraid) {
    EXPECT(braidVersion != NULL);
    EXPECT(last != NULL && strstr(last, "comm") != NULL);
  }
  Dl_info info;
  if (dladdr((void*)&ncclGetVersion, &info) && info.dli_fname) {
    printf("ncclGetVersion comes from %s\n", info.dli_fname);
  }
  printf("%s: NCCL version code %d, %d failure(s)\n", braidVersion ? "Braid" : "not Braid", version,
         failures);
  return failures == 0 ? 0 : 1;
}
