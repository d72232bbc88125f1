#!/usr/bin/env bash
# Runs every fuzz target (or those in $TARGETS) for SECONDS each (default 60), one after another,
# on the stable toolchain without a sanitizer. New inputs stay in fuzz/corpus/<target>; a crash
# stops the script with libFuzzer's exit code and leaves the input in fuzz/artifacts/<target>.
#
#   fuzz/run.sh 30                       # CI smoke
#   TARGETS="pipeline config" fuzz/run.sh 1800
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
targets=${TARGETS:-$(cargo fuzz list)}
for target in $targets; do
  mkdir -p "corpus/$target" "seeds/$target" target
  echo "== $target: ${seconds}s"
  set +e +o pipefail
  cargo fuzz run -s none "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 2>&1 | tee "target/$target.log" \
    | grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|INFO: seed corpus|==[0-9]+==|thread .* panicked|SUMMARY|Done)'
  status=${PIPESTATUS[0]}
  set -e -o pipefail
  if [ "$status" -ne 0 ]; then
    echo "$target failed (exit $status); see fuzz/artifacts/$target" >&2
    exit "$status"
  fi
done
