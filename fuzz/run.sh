#!/usr/bin/env bash
# Runs every fuzz target (or those in $TARGETS) for SECONDS each (default 60), JOBS at a time
# (default 1; CI uses one per core), on the stable toolchain without a sanitizer. New inputs
# stay in fuzz/corpus/<target>; a crash fails the script with the target's name and leaves the
# input in fuzz/artifacts/<target> (and libFuzzer's output in fuzz/target/<target>.log).
#
#   fuzz/run.sh 30                       # CI smoke
#   JOBS=2 fuzz/run.sh 20
#   TARGETS="pipeline config" fuzz/run.sh 1800
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
jobs=${JOBS:-1}
targets=${TARGETS:-$(cargo fuzz list)}
mkdir -p target

# One target: its libFuzzer output goes to target/<target>.log, and its summary lines are printed
# when it ends (so parallel runs do not interleave).
run_one() {
  local target=$1 seconds=$2 status
  mkdir -p "corpus/$target" "seeds/$target"
  cargo fuzz run -s none "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 > "target/$target.log" 2>&1
  status=$?
  {
    echo "== $target: ${seconds}s"
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|INFO: seed corpus|==[0-9]+==|thread .* panicked|SUMMARY|Done)' \
      "target/$target.log"
    if [ "$status" -ne 0 ]; then
      echo "$target failed (exit $status); see fuzz/artifacts/$target and fuzz/target/$target.log"
    fi
  } 2>&1
  return "$status"
}
export -f run_one

failed=0
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2"' _ {} "$seconds" || failed=1
if [ "$failed" -ne 0 ]; then
  echo "a fuzz target failed (see above)" >&2
  exit 1
fi
