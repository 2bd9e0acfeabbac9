#!/usr/bin/env bash
# PyTorch's NCCL process group on Braid (the device tool's machines: PyTorch
# with CUDA and NCCL in its Python packages). Runs tests/gpu/torch_dropin.py
# twice -- with Braid's libnccl.so.2 in NCCL's place, then with PyTorch's own
# NCCL -- compares the DistributedDataParallel losses of the two runs; on a
# machine with one GPU also runs the checks with two Braid ranks sharing it
# (BRAID_SHARE_GPU=1; NCCL refuses that), so the two-rank checks run; checks
# that a rank's abrupt exit gives the survivor an error on Braid, and prints
# one line per check and "N passed, M failed". Logs go to $OUT (or
# ./gpu-results/torch).
#   [BUILD=build/device] bash tests/gpu/torch-dropin.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}/torch
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
build=${BUILD:-build/device}
if [ ! -e "$build/lib/libnccl.so.2" ]; then
  cmake -S . -B "$build" -G Ninja -DBRAID_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES=90 -DBRAID_BUILD_TESTS=OFF \
    > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target braid_nccl > "$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; exit 1; }
fi
braid_lib=$(readlink -f "$build/lib/libnccl.so.2")
torch_lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))") \
  || { echo "no PyTorch"; exit 1; }
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', \
'.'.join(map(str, torch.cuda.nccl.version())), 'gpus', torch.cuda.device_count())" | tee "$out/versions.txt"

# The NCCL functions PyTorch calls that Braid's library does not define: with
# LD_PRELOAD they would resolve to NCCL's own library, mixing the two.
nm -D --undefined-only "$torch_lib"/libtorch_cuda.so 2> /dev/null | awk '/ nccl/ {print $2}' | sort -u \
  > "$out/torch-nccl-symbols.txt"
nm -D --defined-only "$braid_lib" | awk '{print $3}' | sed 's/@.*//' | sort -u > "$out/braid-symbols.txt"
missing=$(comm -23 "$out/torch-nccl-symbols.txt" "$out/braid-symbols.txt" | tr '\n' ' ')
echo "PyTorch imports $(wc -l < "$out/torch-nccl-symbols.txt") NCCL functions; missing from Braid: ${missing:-none}"

# How PyTorch's libraries find libnccl.so.2, and whether LD_LIBRARY_PATH
# alone puts Braid in NCCL's place (only with RUNPATH, not RPATH).
readelf -d "$torch_lib"/libtorch_cuda.so | grep -E "RPATH|RUNPATH" | sed 's/^ */# libtorch_cuda.so /'
mkdir -p "$out/libdir" && ln -sf "$braid_lib" "$out/libdir/libnccl.so.2"
echo "# with LD_LIBRARY_PATH=<dir holding Braid's libnccl.so.2> the process maps: $(LD_LIBRARY_PATH="$out/libdir" \
  python3 -c "import torch; torch.cuda.nccl.version(); print(' '.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l})))")"

pass=0 fail=0
result() {  # result PASS|FAIL text
  echo "$1 $2"
  if [ "$1" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}

# Braid in NCCL's place. LD_LIBRARY_PATH works when PyTorch's libraries find
# libnccl.so.2 through RUNPATH; LD_PRELOAD always wins for the symbols.
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
LD_PRELOAD="$braid_lib" timeout "${RUN_TIMEOUT:-300}" python3 tests/gpu/torch_dropin.py --out "$out/braid" \
  > "$out/braid.txt" 2> "$out/braid.log"
rc=$?
grep -E "^(PASS|FAIL|SKIP) |passed," "$out/braid.txt"
if grep -q "BRAID VERSION" "$out/braid.log" && ! grep -q "NCCL INFO" "$out/braid.log"; then
  result PASS "Braid ran (its INFO log: $(grep -m1 'BRAID VERSION' "$out/braid.log" | sed 's/.*VERSION //'))"
else
  result FAIL "Braid ran: no BRAID VERSION line in the log, or NCCL's own INFO lines present (see braid.log)"
fi
[ $rc -eq 0 ] && result PASS "every check of the Braid run" || result FAIL "checks of the Braid run (exit $rc)"

unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
timeout "${RUN_TIMEOUT:-300}" python3 tests/gpu/torch_dropin.py --out "$out/nccl" > "$out/nccl.txt" 2> "$out/nccl.log"
echo "# the same checks on NCCL: $(grep 'passed,' "$out/nccl.txt")"
if python3 - "$out" << 'PY'; then
import json, sys
out = sys.argv[1]
b = json.load(open(f"{out}/braid/ddp_losses.json"))
n = json.load(open(f"{out}/nccl/ddp_losses.json"))
ok = len(b) == len(n) and all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(b, n))
print("  braid:", " ".join(f"{x:.7f}" for x in b))
print("  nccl: ", " ".join(f"{x:.7f}" for x in n))
sys.exit(0 if ok else 1)
PY
  result PASS "DDP losses equal to NCCL's"
else
  result FAIL "DDP losses equal to NCCL's"
fi

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
share=()
if [ "$gpus" -lt 2 ]; then
  share=(BRAID_SHARE_GPU=1)
  echo "# one GPU: the checks again with two Braid ranks on it (their processes time-slice the GPU)"
  env LD_PRELOAD="$braid_lib" "${share[@]}" NCCL_DEBUG=WARN timeout "${RUN_TIMEOUT:-600}" \
    python3 tests/gpu/torch_dropin.py --out "$out/braid-shared" --world 2 > "$out/braid-shared.txt" \
    2> "$out/braid-shared.log"
  rc=$?
  grep -E "^(PASS|FAIL|SKIP) |passed," "$out/braid-shared.txt" | sed 's/^/  [2 ranks, 1 GPU] /'
  [ $rc -eq 0 ] && result PASS "every check of the two-rank Braid run on one GPU" \
    || result FAIL "checks of the two-rank Braid run on one GPU (exit $rc)"
fi

env LD_PRELOAD="$braid_lib" "${share[@]}" BRAID_STALL_TIMEOUT=20 timeout "${RUN_TIMEOUT:-300}" \
  python3 tests/gpu/torch_dropin.py --out "$out/abrupt" --abrupt-exit --world 2 > "$out/abrupt.txt" 2> "$out/abrupt.log"
line=$(grep -E "^(PASS|FAIL|SKIP)" "$out/abrupt.txt" | head -1)
case $line in
  PASS*) result PASS "${line#PASS }" ;;
  SKIP*) echo "$line" ;;
  *) result FAIL "${line:-abrupt exit: no result (see abrupt.log)}" ;;
esac
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
