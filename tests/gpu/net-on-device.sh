#!/usr/bin/env bash
# GPU communicators across hosts on one GPU machine: every rank gets its own
# host id (BRAID_HOSTID; NCCL_HOSTID for NCCL), so connectors between them go
# through the net transport (sockets on loopback) and host memory the GPU
# maps. Runs the multi-host GPU tests, then all_reduce_perf with 2 ranks on 2
# "hosts" for Braid and for NCCL (its socket transport), alternately, and
# prints both. With one GPU both ranks share it. Outputs go to $OUT.
#   bash tests/gpu/net-on-device.sh [max-bytes]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_NET=Socket
max=${1:-256M}
ngpus=$(nvidia-smi -L | wc -l)
nccl=$(python3 -c "import nvidia.nccl, os; print(nvidia.nccl.__path__[0])" 2>/dev/null) \
  || { echo "no NCCL in the Python packages"; exit 1; }
mkdir -p /tmp/braid-nccl/include /tmp/braid-nccl/lib
ln -sf "$nccl"/include/*.h /tmp/braid-nccl/include/
ln -sf "$nccl/lib/libnccl.so.2" /tmp/braid-nccl/lib/libnccl.so
build=${BUILD:-build/device-net}
s=$(date +%s)
cmake -S . -B "$build" -G Ninja -DBRAID_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DBRAID_PERF_NCCL_HOME=/tmp/braid-nccl > "$out/net-configure.log" 2>&1 || { tail -20 "$out/net-configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$out/net-build.log" 2>&1 || { tail -40 "$out/net-build.log"; exit 1; }
echo "built in $(( $(date +%s) - s )) s"
# The tests: ranks on two host ids (sweeps, point-to-point, a rank dying).
"$build/tests/gpu_coll_test" --gtest_filter='*MultiHost*' > "$out/net-tests.log" 2>&1
grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|\[ fault \]' "$out/net-tests.log"
# 2 ranks, one per host id, under mpirun; each process takes GPU (rank % ngpus).
run() {  # lib binary
  local lib=$1 bin=$2
  mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none bash -c "
    export OMPI_COMM_WORLD_LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=\$(( OMPI_COMM_WORLD_RANK % $ngpus ))
    export BRAID_HOSTID=gpuhost\$OMPI_COMM_WORLD_RANK NCCL_HOSTID=gpuhost\$OMPI_COMM_WORLD_RANK
    export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
    export LD_LIBRARY_PATH=$nccl/lib
    exec $bin -b 8 -e $max -f 8 -g 1 -n 10 -w 3"
}
for round in 1 2; do
  run braid "$build/bin/all_reduce_perf" > "$out/net-allreduce.braid.$round.txt" 2>&1
  run nccl "$build/bin/all_reduce_perf.nccl" > "$out/net-allreduce.nccl.$round.txt" 2>&1
done
# Proof of the path: Braid's and NCCL's INFO lines for the net connectors.
grep -h -m3 -E 'connectors to ranks on other hosts|transport:' "$out/net-allreduce.braid.1.txt"
grep -h -m2 -E 'NET/Socket : Using|Channel 00.*via NET' "$out/net-allreduce.nccl.1.txt"
python3 - "$out" <<'PY'
import sys, glob
out = sys.argv[1]
def best(side):
    res = {}
    for f in glob.glob(f"{out}/net-allreduce.{side}.*.txt"):
        for line in open(f):
            p = line.split()
            if len(p) >= 12 and p[0].isdigit():
                size, t, bus, err = int(p[0]), float(p[5]), float(p[7]), p[8]
                if size not in res or t < res[size][0]:
                    res[size] = (t, bus, err)
    return res
b, n = best("braid"), best("nccl")
print("# all_reduce, 2 ranks on 2 host ids (socket net on loopback), best of 2 runs, out-of-place")
print(f"{'bytes':>12} {'braid us':>10} {'braid GB/s':>10} {'#wrong':>6} {'nccl us':>10} {'nccl GB/s':>10} {'ratio':>6}")
for s in sorted(set(b) | set(n)):
    bt, bb, be = b.get(s, (float('nan'), float('nan'), '-'))
    nt, nb, _ = n.get(s, (float('nan'), float('nan'), '-'))
    print(f"{s:>12} {bt:>10.1f} {bb:>10.2f} {be:>6} {nt:>10.1f} {nb:>10.2f} {nt / bt if bt == bt and bt > 0 else float('nan'):>6.2f}")
PY
