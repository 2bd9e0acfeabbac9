#!/usr/bin/env bash
# Installs what building and testing Braid needs, with apt-get, skipping
# packages already present (so it needs no network when nothing is missing).
#
#   scripts/install-deps.sh          compiler, CMake, Ninja, GoogleTest, Open MPI, rdma-core and
#                                    hwloc headers (both libraries are opened with dlopen)
#   scripts/install-deps.sh --hip    also Debian's HIP toolchain (hipcc, clang, HIP headers)
#   scripts/install-deps.sh --fuzz   also clang with libFuzzer (the fuzz targets)
#
# The cuda flavor needs NVIDIA's CUDA toolkit (nvcc), which Debian does not
# package: install it from NVIDIA; this script only checks for it (--cuda).
set -euo pipefail

want_hip=0 want_cuda=0 want_fuzz=0
for arg in "$@"; do
  case $arg in
    --hip) want_hip=1 ;;
    --cuda) want_cuda=1 ;;
    --fuzz) want_fuzz=1 ;;
    *) echo "install-deps.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

packages=(g++ gcc make cmake ninja-build libgtest-dev binutils pkg-config ca-certificates
          libopenmpi-dev openmpi-bin libibverbs-dev libhwloc-dev)
if (( want_hip )); then
  packages+=(hipcc libamdhip64-dev)
fi
if (( want_fuzz )); then
  packages+=(clang libclang-rt-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} > 0 )); then
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo > /dev/null; then
      SUDO=sudo
    else
      echo "install-deps.sh: missing packages (${missing[*]}) and not root; run as root" >&2
      exit 1
    fi
  else
    SUDO=
  fi
  echo "install-deps.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

if (( want_cuda )); then
  nvcc=$(command -v nvcc || true)
  [[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  if [[ -z $nvcc ]]; then
    echo "install-deps.sh: nvcc not found; install NVIDIA's CUDA toolkit (12.x or 13.x)" >&2
    exit 1
  fi
fi
