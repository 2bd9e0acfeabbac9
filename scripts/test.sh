#!/usr/bin/env bash
# README's second command: installs what is missing, builds Braid for this
# machine and runs the whole test suite (GPU tests skip without a GPU).
# Extra arguments go to ctest (e.g. -L unit, -R Param).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
dir=$(braid_prepare "$(braid_flavor)")
ctest --test-dir "$dir" -j "$(nproc)" --timeout 300 --output-on-failure "$@"
