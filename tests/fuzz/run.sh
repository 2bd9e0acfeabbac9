#!/usr/bin/env bash
# Fuzzes every target in tests/fuzz/ for a bounded time.
#
#   bash tests/fuzz/run.sh BUILD_DIR SECONDS
#
# BUILD_DIR was configured with -DBRAID_FUZZ=ON and the targets built
# (cmake --build BUILD_DIR --target braid_fuzzers). Each target fuzzes a
# temporary copy of its corpus (tests/fuzz/corpus/<target>/, never modified),
# with the repo's corpus as a read-only seed dir. Logs and any crashing input
# land in BUILD_DIR/fuzz-out/<target>/. Fails if any target fails.
set -euo pipefail

if [[ $# -ne 2 || ! $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/braid-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

failed=0
for dir in "$here"/corpus/*/; do
  target=$(basename "$dir")
  bin=$build/tests/fuzz/$target
  out=$build/fuzz-out/$target
  rm -rf "$out"
  mkdir -p "$out"
  if [[ ! -x $bin ]]; then
    printf '%-18s FAIL  not built (%s)\n' "$target" "$bin"
    failed=1
    continue
  fi
  mkdir -p "$work/$target"
  cp -R "$dir". "$work/$target/"
  rc=0
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="$out/" "$work/$target" "$dir" > "$out/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log" | tail -n 1)
  if [[ -z $execs ]]; then  # no final stats (killed?): the last "#N ..." status line
    execs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$out/log" | tail -n 1)
  fi
  cov=$(grep -o 'cov: [0-9]*' "$out/log" | tail -n 1 || true)
  if (( rc == 0 )); then
    printf '%-18s ok    %s executions, %s/s, %s, corpus %s inputs\n' "$target" "${execs:-?}" "${rate:-?}" \
           "${cov:-cov: ?}" "$(ls "$work/$target" | wc -l)"
  else
    artifact=$(ls "$out" | grep -v '^log$' | head -n 1 || true)
    printf '%-18s FAIL  exit %d after %s executions; input: %s; log: %s\n' "$target" "$rc" "${execs:-?}" \
           "${artifact:+$out/$artifact}" "$out/log"
    grep -m 1 -E '^==[0-9]+==ERROR|runtime error|deadly signal|ERROR: libFuzzer' "$out/log" | sed 's/^/    /' || true
    failed=1
  fi
done
exit "$failed"
