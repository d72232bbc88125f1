#!/usr/bin/env bash
# Instructions per UDP cache-hit answer, counted by callgrind (user space, every thread of the
# server): repeatable whatever else the machine does, where `perf stat` cannot count
# instructions (a VM without PMU access). For an A/B of a hot-path change:
#
#   benches/peers/instructions.sh 20000 OLD/kudurru NEW/kudurru OLD/kudurru NEW/kudurru
#
# Each binary in turn runs `serve --cores 1` under valgrind next to the `kudurru-echo --mode
# answer` upstream (a release build in target/release), gets 1,000 names twice to warm its
# cache, has its counters zeroed, answers N queries (dnsperf, 32 outstanding on one socket) and
# dumps them: Ir/answer is the dump's instructions over the answers. The idle loop's share is
# in the figure too; run-to-run spread is about 3 % (batch sizes vary), so alternate binaries.
# Needs valgrind, dnsperf, dig. Ports 27400 (upstream), 27402, 27481: 127.0.0.1 only.
set -euo pipefail
N=${1:?usage: instructions.sh N BINARY...}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $upstream 2>/dev/null; rm -rf "$work"' EXIT
for i in $(seq 0 999); do echo "n$i.bench.example A"; done > "$work/names"
taskset -c 1 "$target/release/kudurru-echo" --mode answer --listen 127.0.0.1:27400 > "$work/upstream.log" 2>&1 &
upstream=$!
for bin in "$@"; do
  out="$work/callgrind.out"
  rm -f "$out"*
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve --cores 1 --cpus 0 \
    --listen 127.0.0.1:27402 --upstream udp://127.0.0.1:27400 --ops-address 127.0.0.1:27481 \
    --log-level warn > "$work/valgrind.log" 2>&1 &
  server=$!
  for _ in $(seq 60); do
    dig +short -p 27402 @127.0.0.1 n1.bench.example A +time=2 +tries=1 > /dev/null 2>&1 && break
    sleep 1
  done
  taskset -c 1 dnsperf -s 127.0.0.1 -p 27402 -d "$work/names" -n 2 -c 1 -q 32 > /dev/null 2>&1
  sleep 1
  callgrind_control -z "$server" > /dev/null 2>&1
  report=$(taskset -c 1 dnsperf -s 127.0.0.1 -p 27402 -d "$work/names" -n $((N / 1000)) -c 1 -q 32 2>&1)
  callgrind_control -d "$server" > /dev/null 2>&1
  sleep 1
  kill "$server"
  wait "$server" 2> /dev/null || true
  answers=$(awk '/Queries completed/{print $3}' <<< "$report")
  ir=$(grep -h '^summary:\|^totals:' "$out".* | awk '{s += $2} END {print s}')
  echo "$bin answers=$answers Ir=$ir Ir/answer=$((ir / answers))"
done
