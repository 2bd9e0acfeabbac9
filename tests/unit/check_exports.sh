#!/usr/bin/env bash
# Checks that a library exports every function of NCCL 2.28's nccl.h (list in
# $2, one name per line, pncclX twins included) as a defined dynamic symbol,
# and nothing but the C API (nccl*, pnccl*, braid*).
set -euo pipefail
lib=$1 list=$2
nm=${NM:-nm}
defined=$($nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwVviI]$/ {print $3}' | sort -u)
missing=$(comm -23 <(sort -u "$list") <(printf '%s\n' "$defined"))
if [[ -n "$missing" ]]; then
  echo "missing exports in $lib:"; echo "$missing"; exit 1
fi
extra=$(printf '%s\n' "$defined" | grep -vE '^(p?nccl|braid)[A-Za-z0-9_]*$' || true)
if [[ -n "$extra" ]]; then
  echo "unexpected exports in $lib (only the C API may be exported):"; echo "$extra"; exit 1
fi
echo "$lib exports all $(wc -l < "$list") NCCL 2.28 API symbols and only the C API"
