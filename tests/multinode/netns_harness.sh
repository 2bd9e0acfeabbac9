#!/usr/bin/env bash
# Multi-node tests on one machine: every "host" is a network namespace with
# its own address (10.77.0.x/24 on a veth joined to a private bridge) and
# its own BRAID_HOSTID; ranks are started inside with `ip netns exec`.
# Names carry this script's pid, so parallel runs do not collide, and
# everything is removed on exit (trap). Only namespace traffic: the bridge
# has no address in the root namespace, so nothing leaves the machine.
#
#   netns_harness.sh RANK_PROGRAM SCENARIO NODES RANKS_PER_NODE [VAR=value...]
#   Ranks fill the nodes in blocks (rank r on node r / RANKS_PER_NODE), or
#   round-robin (rank r on node r % NODES, as mpirun --map-by node) when the
#   variables include PLACEMENT=cyclic (read here, not passed on).
#   RANKS=n (read here): n ranks instead of NODES x RANKS_PER_NODE, so the
#   last nodes hold fewer (hosts with different rank counts).
#   SCENARIO sweep     every rank runs the sweep; all must succeed
#            kill      all-reduces in a loop; the last rank is killed (SIGKILL):
#                      every other rank must fail, naming a rank, in time
#            linkdown  all-reduces in a loop; the last node's link goes down:
#                      every rank must fail in time
#            split     all-reduces for a few seconds, each also on a communicator
#                      split off for it (connectors made and closed again and
#                      again): every rank must succeed
#            stray     the same while stray clients connect
#                      to every listening port (bootstrap and proxy) and send
#                      garbage or nothing: every rank must succeed
#            qperror   all-reduces in a loop; a fault injected into the last
#                      rank (its LAST_RANK_ variables, e.g. a software verbs
#                      device's BRAID_SOFTVERBS_FAIL_AFTER): every rank must
#                      fail in time, naming a rank
#   Variables LAST_RANK_VAR=value go to the last rank only, as VAR=value.
#   EXPECT_NET=name (read here): every rank must report that its traffic to
#   other hosts used that Net ("rank R: net name"), so a silent fallback to
#   another transport fails the test.
#   DECOY=nocarrier|isolated (read here): each namespace first gets another
#   interface (dec0, 10.78.0.x/24, listed before eth0) that reaches nothing:
#   with no carrier (its veth peer down), or up but isolated. Interface
#   choice must skip the first and, given NCCL_COMM_ID on eth0's subnet,
#   prefer eth0 to the second, as NCCL's does.
#   RXE=1 (read here): each namespace gets a kernel soft-RoCE device
#   (`rdma link add rxeID-N type rxe netdev eth0`) and its ranks are pointed
#   at it (NCCL_IB_HCA==rxeID-N); with NCCL_NET=IB the ranks then run on the
#   real libibverbs and the kernel's RoCE v2 instead of the software verbs
#   device. Skipped, saying why, where the kernel has no rdma_rxe module or
#   iproute2 no `rdma` tool.
# Exit 0: passed; 1: failed; 77: skipped (not root, or no `ip netns`).
set -u
prog=$1 scenario=$2 nodes=$3 per=$4
shift 4
extra_env=()
last_env=()
placement=block
ranks=
expect_net=
rxe=0
decoy=
for v in "$@"; do
  case $v in
    DECOY=*) decoy=${v#DECOY=} ;;
    PLACEMENT=*) placement=${v#PLACEMENT=} ;;
    RANKS=*) ranks=${v#RANKS=} ;;
    EXPECT_NET=*) expect_net=${v#EXPECT_NET=} ;;
    RXE=*) rxe=${v#RXE=} ;;
    LAST_RANK_*) last_env+=("${v#LAST_RANK_}") ;;
    *) extra_env+=("$v") ;;
  esac
done

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: multinode tests need root (network namespaces)"; exit 77
fi
if ! command -v ip > /dev/null || ! ip netns list > /dev/null 2>&1; then
  echo "SKIP: 'ip netns' is not available"; exit 77
fi
if [[ $rxe == 1 ]]; then
  if ! command -v rdma > /dev/null; then
    echo "SKIP: RXE=1 needs iproute2's rdma tool (apt-get install iproute2)"; exit 77
  fi
  if ! modprobe rdma_rxe 2> /dev/null && [[ ! -d /sys/module/rdma_rxe ]]; then
    echo "SKIP: this kernel ($(uname -r)) has no rdma_rxe (soft-RoCE) module; the multinode_ibverbs_*" \
      "tests cover the verbs transport on the software verbs device instead"
    exit 77
  fi
fi

id=$$
bridge="bnb$id"
work=$(mktemp -d "/tmp/braid-multinode.$id.XXXX")
pids=()
cleanup() {
  [[ -n ${stray_pid:-} ]] && kill "$stray_pid" 2> /dev/null
  # only ranks not reaped yet (a reaped pid may belong to someone else by now)
  for p in "${pids[@]}"; do [[ -n $p ]] && kill -9 "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do [[ -n $p ]] && wait "$p" 2> /dev/null; done
  for ((i = 0; i < nodes; i++)); do
    [[ $rxe == 1 ]] && ip netns exec "bn$id-$i" rdma link delete "rxe$id-$i" 2> /dev/null
    ip netns del "bn$id-$i" 2> /dev/null
    ip link del "bv$id-$i" 2> /dev/null
    ip link del "bd$id-$i" 2> /dev/null
  done
  ip link del "$bridge" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip link add "$bridge" type bridge || { echo "SKIP: cannot create a bridge"; exit 77; }
ip link set "$bridge" up
for ((i = 0; i < nodes; i++)); do
  ns="bn$id-$i"
  ip netns add "$ns" || { echo "SKIP: cannot create a network namespace"; exit 77; }
  if [[ -n $decoy ]]; then  # made first: it comes before eth0 in the namespace's list
    ip link add "bd$id-$i" type veth peer name "bq$id-$i"
    ip link set "bq$id-$i" netns "$ns"
    ip -n "$ns" link set "bq$id-$i" name dec0
    ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev dec0
    ip -n "$ns" link set dec0 up
    [[ $decoy == isolated ]] && ip link set "bd$id-$i" up  # a carrier, but nothing behind it
  fi
  ip link add "bv$id-$i" type veth peer name "bp$id-$i"
  ip link set "bv$id-$i" master "$bridge" up
  ip link set "bp$id-$i" netns "$ns"
  ip -n "$ns" link set "bp$id-$i" name eth0
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  if [[ $rxe == 1 ]] && ! ip netns exec "$ns" rdma link add "rxe$id-$i" type rxe netdev eth0; then
    echo "SKIP: 'rdma link add rxe$id-$i type rxe netdev eth0' failed in namespace $ns"; exit 77
  fi
done

nranks=${ranks:-$((nodes * per))}
common=(BRAID_BACKEND=host BRAID_BOOTSTRAP_TIMEOUT=20 BRAID_STALL_TIMEOUT=10 BRAID_NET_LINK_TIMEOUT=4
        NCCL_DEBUG=WARN)
mode=sweep
case $scenario in
  sweep) limit=240 ;;
  kill | linkdown | qperror) mode=loop limit=60 common+=(BRAID_TEST_LOOP_SECONDS=120) ;;
  stray | split) mode=loop limit=60 common+=(BRAID_TEST_LOOP_SECONDS=8 BRAID_TEST_SPLIT=1) ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac

start=$(date +%s)
for ((r = 0; r < nranks; r++)); do
  node=$((r / per))
  [[ $placement == cyclic ]] && node=$((r % nodes))
  nodeOf[$r]=$node
  rank_env=()
  ((r == nranks - 1)) && rank_env=("${last_env[@]}")
  [[ $rxe == 1 ]] && rank_env+=("NCCL_IB_HCA==rxe$id-$node")
  ip netns exec "bn$id-$node" env "${common[@]}" BRAID_HOSTID="node$node" "${extra_env[@]}" "${rank_env[@]}" \
    "$prog" "$mode" "$r" "$nranks" "$work/id" > "$work/rank$r.log" 2>&1 &
  pids+=($!)
done

running() { # true once every rank logged "running"
  local r
  for ((r = 0; r < nranks; r++)); do grep -q "running" "$work/rank$r.log" 2> /dev/null || return 1; done
}
wait_running() {
  local t0=$SECONDS
  until running; do
    ((SECONDS - t0 > 30)) && { echo "ranks did not start within 30 s"; return 1; }
    sleep 0.1
  done
}

stray_loop() { # connects to every listening TCP port of every node, again and again
  local i port addr
  while :; do
    for ((i = 0; i < nodes; i++)); do
      for port in $(ip netns exec "bn$id-$i" ss -ltnH 2> /dev/null | awk '{print $4}' | sed 's/.*://'); do
        addr="10.77.0.$((i + 1))"
        # garbage; nothing at all; a hello-sized run of zeros
        ip netns exec "bn$id-0" timeout 1 bash -c "exec 3<>/dev/tcp/$addr/$port && echo 'GET / HTTP/1.0' >&3" \
          2> /dev/null
        ip netns exec "bn$id-0" timeout 0.3 bash -c "exec 3<>/dev/tcp/$addr/$port && sleep 1" 2> /dev/null
        ip netns exec "bn$id-0" timeout 1 bash -c "exec 3<>/dev/tcp/$addr/$port && head -c 4096 /dev/zero >&3" \
          2> /dev/null
      done
    done
    sleep 0.05
  done
}

fault_at=0
case $scenario in
  kill)
    wait_running || exit 1
    kill -9 "${pids[$((nranks - 1))]}"  # `ip netns exec` and env exec the rank: this is its pid
    fault_at=$SECONDS
    echo "killed rank $((nranks - 1)) (node $((nodes - 1)))"
    ;;
  linkdown)
    wait_running || exit 1
    ip link set "bv$id-$((nodes - 1))" down
    fault_at=$SECONDS
    echo "took the link of node $((nodes - 1)) down"
    ;;
  qperror)
    echo "the last rank's injected fault: ${last_env[*]}"
    ;;
  stray)
    stray_loop &
    stray_pid=$!
    wait_running || exit 1
    ;;
esac

# Wait for the ranks (bounded).
status=0
deadline=$((start + limit))
for ((r = 0; r < nranks; r++)); do
  p=${pids[$r]}
  while kill -0 "$p" 2> /dev/null && (($(date +%s) < deadline)); do sleep 0.1; done
  if kill -0 "$p" 2> /dev/null; then
    echo "rank $r: HUNG (still running after $limit s)"
    status=1
    continue
  fi
  wait "$p"
  codes[$r]=$?
  pids[$r]=
done
[[ -n ${stray_pid:-} ]] && { kill "$stray_pid" 2> /dev/null; wait "$stray_pid" 2> /dev/null; stray_pid=; }
end=$SECONDS

for ((r = 0; r < nranks; r++)); do
  echo "--- rank $r (node ${nodeOf[$r]}, exit ${codes[$r]:-none})"
  grep -v "^$" "$work/rank$r.log" | tail -n 15
done

case $scenario in
  sweep | stray | split)
    for ((r = 0; r < nranks; r++)); do
      [[ ${codes[$r]:-1} -eq 0 ]] || { echo "FAIL: rank $r did not succeed"; status=1; }
    done
    ;;
  kill | linkdown | qperror)
    last=$((nranks - 1))
    for ((r = 0; r < nranks; r++)); do
      [[ $scenario == kill && $r -eq $last ]] && continue
      if [[ ${codes[$r]:-0} -ne 1 ]] || ! grep -q "FAILED" "$work/rank$r.log"; then
        echo "FAIL: rank $r did not report an error"; status=1
      elif ! grep "FAILED" "$work/rank$r.log" | grep -q "rank [0-9]"; then
        echo "FAIL: rank $r's error names no rank"; status=1
      fi
    done
    echo "the ranks ended $((end - fault_at)) s after the fault"
    ;;
esac
if [[ -n $expect_net ]]; then
  for ((r = 0; r < nranks; r++)); do
    grep -q "^rank $r: net $expect_net\$" "$work/rank$r.log" ||
      { echo "FAIL: rank $r did not report using the $expect_net net"; status=1; }
  done
fi
[[ $status -eq 0 ]] && echo "PASS: $scenario, $nodes nodes x $per ranks${expect_net:+ over $expect_net}"
exit $status
