#!/usr/bin/env bash
# On the GPU node, from the repo root: the load generator's sustained-rate benchmark
# (benchmarks/loadgen_sustained.py: ours vs `vllm bench serve`'s client, each on one core,
# the C SSE server on another) on that node's CPUs, where the client runs in a sweep.
# Results JSON go to $OUT.
#   usage: bash deploy/h200/loadgen_sustained.sh ["ARGS" ...]   (after device_setup.sh stash
#          of the payload; each ARGS is one benchmark run's options, default: 256 streams
#          at 2-20 ms steps, then 64 streams at 1-5 ms)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
bash "$HERE/device_setup.sh" install || exit 1
source "$HERE/device_setup.sh" bench
[ $# -gt 0 ] || set -- "--steps 2,3,4,5,6,8,10,12.5,16,20" "--streams 64 --steps 1,1.5,2,3,4,5"
for args in "$@"; do
  # shellcheck disable=SC2086
  python3 benchmarks/loadgen_sustained.py $args 2>&1 | tail -n 28
done
if [ -n "${OUT:-}" ]; then cp benchmarks/results/loadgen_sustained*.json "$OUT/" 2>/dev/null; fi
