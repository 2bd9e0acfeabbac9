#!/usr/bin/env bash
# README's first command: installs what is missing, builds Braid for this
# machine (GPU flavor if it has a GPU and toolkit, else host only), prints
# what Braid sees (braid-info --summary) and runs the main job: the host
# backend's all-reduce perf sweep over 4 forked ranks, 8 B to 128 MB, data
# checked (#wrong must be 0).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
dir=$(braid_prepare "$(braid_flavor)")
"$dir/bin/braid-info" | head -n 12
BRAID_BACKEND=host "$dir/bin/all_reduce_perf" -P 4 -b 8 -e 128M -f 4 -c 1
