#!/usr/bin/env bash
# On the GPU node, from the repo root: the agreement benchmark against the sim (no GPU), as on
# the dev VM but on the node's faster CPUs: ours, `vllm bench serve` (the node's vLLM 0.26),
# ours, ours with aiohttp, with the sim's own TTFT and the vLLM client's TTFT split request
# by request (benchmarks/loadgen_agreement.py). Results JSON go to $OUT.
#   usage: bash deploy/h200/agreement_sim.sh ["ARGS" ...]   (after device_setup.sh stash of
#          the payload; each ARGS is one benchmark run's options, default: 1 stream, 16 streams)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
bash "$HERE/device_setup.sh" install || exit 1
source "$HERE/device_setup.sh" bench
[ $# -gt 0 ] || set -- "--streams 1 --requests 64" "--streams 16"
for args in "$@"; do
  # shellcheck disable=SC2086
  python3 benchmarks/loadgen_agreement.py --vllm-cli "python3 -m vllm.entrypoints.cli.main" \
    $args 2>&1 | tail -n 10
done
if [ -n "${OUT:-}" ]; then cp benchmarks/results/loadgen_agreement*.json "$OUT/" 2>/dev/null; fi
