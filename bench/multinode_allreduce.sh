#!/usr/bin/env bash
# All-reduce bus bandwidth across two "nodes" made of network namespaces
# (veth pairs on a private bridge), for Braid's socket transport and for
# Open MPI over TCP between the same namespaces, with a raw single-stream
# TCP transfer between them measured in the same run as the ceiling.
# Needs root, `ip netns` and Open MPI's mpirun; nothing leaves the machine
# (the bridge's address is private to this run, for mpirun's control traffic).
#
#   bench/multinode_allreduce.sh [BUILD_DIR] [extra all_reduce_perf flags...]
# Environment: RANKS_PER_NODE (default 1), ONLY=braid|mpi (default both),
# BRAID_* / NCCL_* pass through to Braid (e.g. NCCL_SOCKET_NTHREADS,
# NCCL_NSOCKS_PERTHREAD).
set -euo pipefail
build=$(cd "${1:-build/host}" && pwd)
shift || true
per=${RANKS_PER_NODE:-1}
perf=$build/bin/all_reduce_perf
tcp=$build/bin/tcp_stream
[[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; exit 1; }
[[ -x $perf && -x $tcp ]] || { echo "build all_reduce_perf and tcp_stream first"; exit 1; }

id=$$
net=10.79.$((id % 200)).
work=$(mktemp -d "/tmp/braid-bench.$id.XXXX")
cleanup() {
  for i in 0 1; do ip netns del "bb$id-$i" 2> /dev/null || true; ip link del "bw$id-$i" 2> /dev/null || true; done
  ip link del "bbr$id" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip link add "bbr$id" type bridge
ip link set "bbr$id" up
ip addr add "${net}254/24" dev "bbr$id"
for i in 0 1; do
  ns="bb$id-$i"
  ip netns add "$ns"
  ip link add "bw$id-$i" type veth peer name "bq$id-$i"
  ip link set "bw$id-$i" master "bbr$id" up
  ip link set "bq$id-$i" netns "$ns"
  ip -n "$ns" link set "bq$id-$i" name eth0
  ip -n "$ns" addr add "${net}$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

# Open MPI launches its daemons in the namespaces through this "rsh".
cat > "$work/nsrsh" << 'AGENT'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
exec ip netns exec "$host" /bin/sh -c "$*"
AGENT
cat > "$work/rank" << 'RANK'
#!/bin/sh
BRAID_HOSTID=$(ip netns identify $$) BRAID_BACKEND=host exec "$@"
RANK
chmod +x "$work/nsrsh" "$work/rank"
hosts="bb$id-0:$per,bb$id-1:$per"
mpirun_ns() {
  mpirun --allow-run-as-root -np $((2 * per)) --host "$hosts" --mca routed direct \
    --mca plm_rsh_agent "$work/nsrsh" --mca oob_tcp_if_include "${net}0/24" \
    --mca btl self,tcp --mca btl_tcp_if_include "${net}0/24" \
    "$@"
}

tcp_ceiling() {
  ip netns exec "bb$id-1" "$tcp" server 5201 > /dev/null &
  local server=$!
  ip netns exec "bb$id-0" "$tcp" client "${net}2" 5201 $((4 << 30))
  wait $server
}

# The same, one stream each way at once (an all-reduce moves its bytes both
# ways at once: on a machine whose cores both "nodes" share, this is the
# ceiling that applies).
tcp_duplex() {
  ip netns exec "bb$id-1" "$tcp" server 5202 > /dev/null &
  local s1=$!
  ip netns exec "bb$id-0" "$tcp" server 5203 > /dev/null &
  local s0=$!
  ip netns exec "bb$id-0" "$tcp" client "${net}2" 5202 $((2 << 30)) | sed 's/^/0->1 /' &
  local c0=$!
  ip netns exec "bb$id-1" "$tcp" client "${net}1" 5203 $((2 << 30)) | sed 's/^/1->0 /'
  wait $c0 $s0 $s1
}

echo "# 2 nodes (network namespaces) x $per ranks, $(nproc) cores; $(date -u +%FT%TZ)"
echo "# raw TCP, one stream, before:"
tcp_ceiling
echo "# raw TCP, one stream each way at once:"
tcp_duplex
args=(-b 1M -e 256M -f 2 -w 2 -n 10 -c 1 "$@")
if [[ ${ONLY:-braid} == braid ]]; then
  echo "# Braid (socket transport):"
  mpirun_ns "$work/rank" "$perf" "${args[@]}"
fi
if [[ ${ONLY:-mpi} == mpi ]]; then
  echo "# Open MPI (btl tcp):"
  mpirun_ns "$work/rank" "$perf" -R mpi "${args[@]}"
fi

echo "# raw TCP, one stream, after:"
tcp_ceiling
