# Shared by the quick-start scripts: picks the build flavor and folder.
# Sourced, not run.

# The flavor to build: BRAID_GPU if set, else cuda when nvcc and an NVIDIA GPU
# are present, hip when ROCm sees an AMD GPU, else none (host only).
braid_flavor() {
  if [[ -n ${BRAID_GPU:-} ]]; then echo "$BRAID_GPU"; return; fi
  local nvcc
  nvcc=$(command -v nvcc || true)
  [[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  if [[ -n $nvcc ]] && command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo cuda
  elif command -v rocminfo > /dev/null && [[ -e /dev/kfd ]] && rocminfo 2>/dev/null | grep -q 'gfx'; then
    echo hip
  else
    echo none
  fi
}

# Configures and builds flavor $1 into build/<preset>; prints the folder.
braid_build() {
  local flavor=$1 dir args=()
  case $flavor in
    none) dir=build/host ;;
    cuda) dir=build/cuda; args+=(-DCMAKE_CUDA_ARCHITECTURES="${BRAID_CUDA_ARCHS:-90}") ;;
    hip) dir=build/hip; args+=(-DCMAKE_CXX_COMPILER="${BRAID_HIP_CXX:-clang++-15}" -DCMAKE_C_COMPILER="${BRAID_HIP_CC:-clang-15}") ;;
    *) echo "unknown flavor '$flavor' (none, cuda or hip)" >&2; return 1 ;;
  esac
  cmake -S . -B "$dir" -G Ninja -DBRAID_GPU="$flavor" "${args[@]}" >&2
  cmake --build "$dir" -j "$(nproc)" >&2
  echo "$dir"
}

# Installs what flavor $1 needs and builds it; prints the build folder.
braid_prepare() {
  local flavor=$1 extra=()
  [[ $flavor == hip ]] && extra+=(--hip)
  [[ $flavor == cuda ]] && extra+=(--cuda)
  bash scripts/install-deps.sh "${extra[@]}" >&2
  braid_build "$flavor"
}
