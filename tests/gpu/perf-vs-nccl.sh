#!/usr/bin/env bash
# Same-run comparison of Braid against NCCL on the GPUs of this machine (the
# device tool's nvidia-h200-x2): builds the perf programs twice -- against
# Braid and, as <name>.nccl, against the NCCL of PyTorch's Python packages --
# and runs each collective alternately, Braid then NCCL then Braid then NCCL,
# one process driving every GPU (-g N). Keeps the better run of each side per
# size and prints the ratio. Outputs go to $OUT (or ./gpu-results).
#   [BUILD=build/dir] [ROUNDS=2] bash tests/gpu/perf-vs-nccl.sh [max-bytes] [collectives...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
max=${1:-1G}
shift || true
colls=${*:-all_reduce all_gather reduce_scatter broadcast sendrecv alltoall}
ngpus=$(nvidia-smi -L | wc -l)
nccl=$(python3 -c "import nvidia.nccl, os; print(nvidia.nccl.__path__[0])" 2>/dev/null) \
  || { echo "no NCCL in the Python packages"; exit 1; }
mkdir -p /tmp/braid-nccl/include /tmp/braid-nccl/lib
ln -sf "$nccl"/include/*.h /tmp/braid-nccl/include/
ln -sf "$nccl/lib/libnccl.so.2" /tmp/braid-nccl/lib/libnccl.so
build=${BUILD:-build/device-perf}  # a build configured with BRAID_PERF_NCCL_HOME is reused
if [ ! -x "$build/bin/all_reduce_perf.nccl" ]; then
  cmake -S . -B "$build" -G Ninja -DBRAID_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES=90 -DBRAID_BUILD_TESTS=OFF \
    -DBRAID_PERF_NCCL_HOME=/tmp/braid-nccl > "$out/perf-configure.log" 2>&1 || { tail -20 "$out/perf-configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" > "$out/perf-build.log" 2>&1 || { tail -40 "$out/perf-build.log"; exit 1; }
fi
bin=$build/bin
for c in $colls; do
  args="-b 8 -e $max -f 4 -g $ngpus -n 20 -w 5"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    LD_LIBRARY_PATH="$nccl/lib" timeout 300 "$bin/${c}_perf" $args > "$out/$c.braid.$round.txt" 2>&1
    LD_LIBRARY_PATH="$nccl/lib" timeout 300 "$bin/${c}_perf.nccl" $args > "$out/$c.nccl.$round.txt" 2>&1
  done
  python3 - "$out" "$c" <<'PY'
import sys, glob, re
out, c = sys.argv[1], sys.argv[2]
def best(side):
    res = {}
    for f in glob.glob(f"{out}/{c}.{side}.*.txt"):
        for line in open(f):
            p = line.split()
            if len(p) >= 12 and p[0].isdigit():
                size, t, bus = int(p[0]), float(p[5]), float(p[7])
                if size not in res or t < res[size][0]:
                    res[size] = (t, bus)
    return res
b, n = best("braid"), best("nccl")
print(f"# {c}: best of 2 runs each, out-of-place; ratio = NCCL time / Braid time (> 1: Braid faster)")
print(f"{'bytes':>12} {'braid us':>10} {'braid GB/s':>10} {'nccl us':>10} {'nccl GB/s':>10} {'ratio':>6}")
for s in sorted(set(b) | set(n)):
    bt, bb = b.get(s, (float('nan'), float('nan')))
    nt, nb = n.get(s, (float('nan'), float('nan')))
    print(f"{s:>12} {bt:>10.2f} {bb:>10.2f} {nt:>10.2f} {nb:>10.2f} {nt / bt if bt == bt and bt > 0 else float('nan'):>6.2f}")
PY
  grep -h "Out of bounds\|error\|Error" "$out/$c.braid.1.txt" | head -3
done
