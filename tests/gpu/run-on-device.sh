#!/usr/bin/env bash
# Builds the cuda flavor and runs the whole suite on a GPU machine (the
# device tool's nvidia-h200-x2): GPU tests included, the rest on the host
# backend. Writes logs to $OUT (or ./gpu-results) and prints a summary.
#   bash tests/gpu/run-on-device.sh [cuda-arch]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
arch=${1:-90}
nvidia-smi -L | tee "$out/gpus.txt"
s=$(date +%s)
# NCCL's own headers (PyTorch's NCCL package) for the ABI check and the
# device-API program, where the CUDA toolkit has none.
nccl_ref=()
ref=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
if [ -n "$ref" ] && [ -f "$ref/include/nccl_device.h" ]; then nccl_ref=(-DBRAID_NCCL_REFERENCE_INCLUDE="$ref/include"); fi
cmake -S . -B build/device -G Ninja -DBRAID_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES="$arch" "${nccl_ref[@]}" \
  > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build/device -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "cuda flavor (sm_$arch) built in $(( $(date +%s) - s )) s"
build/device/bin/braid-info | head -12 | tee "$out/braid-info.txt"
ctest --test-dir build/device -j 8 --timeout 300 --output-on-failure > "$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log"
# One line per GPU test (label gpu: suites named Gpu*, parameterized ones
# "Prefix/Gpu*"), taken from the run above rather than running them again:
# the collective sweeps (gpu_coll_test) take minutes. Passed, Failed or
# Skipped (fewer than 2 GPUs), with the time.
echo "GPU tests:"
grep -E "Test +#[0-9]+: ([^ /]+/)?Gpu" "$out/ctest.log" | sed -E 's/^ *[0-9]+\/[0-9]+ //' | tee "$out/gpu-tests.txt"
exit $rc
