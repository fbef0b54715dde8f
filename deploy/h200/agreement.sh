#!/usr/bin/env bash
# On the GPU node, from the repo root: the load generator's agreement benchmark against real
# vLLM (ours, `vllm bench serve`, ours, ours with aiohttp; benchmarks/loadgen_agreement.py)
# at 16 streams and at 1 stream, on the random 8B model. Results JSON and logs go to $OUT.
# With --url the benchmark also reads vLLM's own TTFT (its /metrics histogram: mean) per run.
#   usage: bash deploy/h200/agreement.sh ["ARGS" ...]   (after device_setup.sh stash of the
#          payload; each ARGS is one benchmark run's options, default: 16 streams, 1 stream;
#          MAX_MODEL_LEN=8192 for prompts over ~1,900 tokens)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
bash "$HERE/device_setup.sh" install || exit 1
source "$HERE/device_setup.sh" env
export PYTHONPATH=$PWD:$PYTHONPATH
if [ -f /tmp/servesweep-node/model.pid ]; then while kill -0 "$(cat /tmp/servesweep-node/model.pid)" 2>/dev/null; do sleep 1; done; fi
URL=http://127.0.0.1:8000 LOG=/tmp/vllm-agreement.log
up() { python3 -c "import urllib.request as u; u.urlopen('$1', timeout=2)" 2>/dev/null; }
setsid python3 -m vllm.entrypoints.cli.main serve /tmp/model --host 127.0.0.1 --port 8000 \
  --max-model-len "${MAX_MODEL_LEN:-2048}" --max-num-seqs 256 >"$LOG" 2>&1 </dev/null &
PID=$!
for ((i = 0; i < 400; i++)); do up "$URL/health" && break; kill -0 $PID 2>/dev/null || break; sleep 1; done
up "$URL/health" || { tail -n 60 "$LOG"; kill -KILL -- -$PID; exit 1; }
echo "vllm healthy after ${i} s"
CLI="python3 -m vllm.entrypoints.cli.main"
[ $# -gt 0 ] || set -- "--streams 16" "--streams 1 --requests 48"
for args in "$@"; do
  # shellcheck disable=SC2086
  python3 benchmarks/loadgen_agreement.py --url "$URL" --model /tmp/model --tokenizer /tmp/model \
    --vllm-cli "$CLI" $args 2>&1 | tail -n 9
  if [ -n "${OUT:-}" ]; then cp benchmarks/results/loadgen_agreement*.json "$OUT/" 2>/dev/null; fi
done
kill -TERM -- -$PID; sleep 5; kill -KILL -- -$PID 2>/dev/null
if [ -n "${OUT:-}" ]; then cp benchmarks/results/loadgen_agreement*.json "$LOG" "$OUT/" 2>/dev/null; fi
