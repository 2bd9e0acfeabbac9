#!/usr/bin/env bash
# The host backend's benchmarks in one go, for any machine (the device
# machine's host CPU has no network namespaces, so two "nodes" are two host
# ids talking over loopback here):
#   1. all-reduce against Open MPI (bench/allreduce_vs_mpi) for each rank
#      count in RANKS (default "2 4 8"), on plain buffers and on windows
#      (ncclMemAlloc + ncclCommWindowRegister: zero-copy);
#   2. all-gather and reduce-scatter, 4 forked ranks, plain (-R 0) and
#      windows (-R 2);
#   3. all-reduce between two host ids (BRAID_HOSTID) over loopback, Braid's
#      socket transport against Open MPI's btl tcp on lo, two rounds, and a
#      raw TCP stream over lo in the same run.
#   bash bench/host_runs.sh [BUILD_DIR] [MAX_BYTES]
# Environment: RANKS (rank counts of step 1), BIND (mpirun --bind-to for
# step 1; default mpirun's own: a core per rank for 2 ranks, a socket for
# more), OFFSET (step 1's output buffer this many bytes past a page: a
# misaligned view; default 0), STEPS (which of 1 2 3 to run; default all).
# Step 3 runs unbound, so each rank's proxy threads get cores.
set -uo pipefail
build=$(cd "${1:-build/host}" && pwd)
max=${2:-256M}
export BRAID_BACKEND=host
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)

steps=" ${STEPS:-1 2 3} "
for n in ${RANKS:-2 4 8}; do
  [[ $steps == *" 1 "* ]] || break
  for w in 0 1; do
    "${mpi[@]}" ${BIND:+--bind-to $BIND} -np "$n" "$build/bin/allreduce_vs_mpi" -b 8 -e "$max" -f 4 -w $w -o "${OFFSET:-0}"
  done
done

for c in all_gather reduce_scatter; do
  [[ $steps == *" 2 "* ]] || break
  for r in 0 2; do
    echo "# $c, 4 forked ranks, -R $r (busbw out of place | in place, GB/s)"
    "$build/bin/${c}_perf" -P 4 -b 64K -e 64M -f 4 -R $r 2>&1 | awk '/^ +[0-9]/ {print "  ", $1, $8, $12}'
  done
done

[[ $steps == *" 3 "* ]] || exit 0
echo "# two host ids over loopback: raw TCP, one stream"
"$build/bin/tcp_stream" server 5301 > /dev/null &
sleep 0.3
"$build/bin/tcp_stream" client 127.0.0.1 5301 $((4 << 30))
wait
hosts=(mpirun --allow-run-as-root -np 2 --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo
  -x BRAID_BACKEND sh -c 'BRAID_HOSTID=host$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
for round in 1 2; do
  for ref in braid mpi; do
    echo "# two host ids over loopback, round $round, $ref (busbw out of place | in place, GB/s)"
    "${hosts[@]}" "$build/bin/all_reduce_perf" -b 256K -e 64M -f 4 $([[ $ref == mpi ]] && echo -R mpi) 2>&1 |
      awk '/^ +[0-9]/ {print "  ", $1, $8, $12}'
  done
done
