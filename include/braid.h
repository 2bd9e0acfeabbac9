/*
 * Braid extensions to the NCCL API.
 *
 * RCCL's extra collectives, spelled as RCCL spells them, so programs written
 * for RCCL build against Braid unchanged. ncclGather and ncclScatter are part
 * of NCCL 2.28's own API and are declared in nccl.h with RCCL's signature.
 */
#ifndef BRAID_H_
#define BRAID_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank sends `count` elements to every rank (RCCL's name for ncclAlltoAll). */
ncclResult_t ncclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream);
ncclResult_t pncclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream);

/*
 * All-to-all with per-peer counts and displacements, in elements: rank r sends
 * sendcounts[p] elements from sendbuff + sdispls[p] to peer p, and receives
 * recvcounts[p] elements from p into recvbuff + rdispls[p].
 */
ncclResult_t ncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           ncclDataType_t datatype, ncclComm_t comm, braidStream_t stream);
ncclResult_t pncclAllToAllv(const void* sendbuff, const size_t sendcounts[],
                            const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                            const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                            braidStream_t stream);

/* Braid's release as MAJOR*10000 + MINOR*100 + PATCH (ncclGetVersion reports the NCCL level). */
ncclResult_t braidGetVersion(int* version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_H_ */
