#!/usr/bin/env bash
# Where the time of a small collective goes, on the GPUs of this machine:
# each perf program run three ways over small sizes -- eager (wall time per
# call), eager with -C 1 (the host's time to issue one call: the launch path)
# and with -G (CUDA graphs replayed: the GPU's time with no host in the way).
# With one GPU, two ranks share it (BRAID_SHARE_GPU=1). Outputs go to $OUT.
#   BUILD=build/dir bash tests/gpu/small-latency.sh [max-bytes] [collectives...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 BRAID_SHARE_GPU=1
max=${1:-128K}
shift || true
colls=${*:-all_reduce sendrecv all_gather}
bin=${BUILD:-build/device}/bin
for c in $colls; do
  args="-b 8 -e $max -f 8 -g 2 -n 200 -w 50"
  timeout 120 "$bin/${c}_perf" $args > "$out/$c.eager.txt" 2>&1
  timeout 120 "$bin/${c}_perf" $args -C 1 > "$out/$c.cpu.txt" 2>&1
  timeout 120 "$bin/${c}_perf" $args -G 10 > "$out/$c.graph.txt" 2>&1
  python3 - "$out" "$c" <<'PY'
import sys
out, c = sys.argv[1], sys.argv[2]
def times(mode):
    res = {}
    for line in open(f"{out}/{c}.{mode}.txt"):
        p = line.split()
        if len(p) >= 12 and p[0].isdigit():
            res[int(p[0])] = float(p[5])
    return res
e, h, g = times("eager"), times("cpu"), times("graph")
print(f"# {c}, 2 ranks: out-of-place us per call")
print(f"{'bytes':>10} {'eager':>8} {'host':>8} {'graph':>8}")
for s in sorted(e):
    print(f"{s:>10} {e[s]:>8.2f} {h.get(s, float('nan')):>8.2f} {g.get(s, float('nan')):>8.2f}")
PY
done
