#!/usr/bin/env bash
# README's first command: installs what is missing, builds Braid for this
# machine (GPU flavor if it has a GPU and toolkit, else host only) and runs
# the main job. Until the collectives exist, the main job is braid-info.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
dir=$(braid_prepare "$(braid_flavor)")
"$dir/bin/braid-info"
