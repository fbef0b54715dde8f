#!/usr/bin/env bash
# An exported deployment, started as a user would and measured again (the hardware round
# trip of `servesweep export`). Run on the GPU node from the repository root, after the
# payload's chunks were stashed (steps 1-2 of README.md), carrying the last chunk:
#   bash deploy/h200/roundtrip.sh EXPORT_DIR SPEC [PORT]
# EXPORT_DIR holds `vllm-serve.sh` as `servesweep export` wrote it; it is run unchanged
# (`vllm` on PATH is the carried vLLM's CLI, the node's offline switches in the environment).
# SPEC is an `engine: external` spec whose base_url is http://127.0.0.1:PORT (8000: vLLM's
# default, the exported command sets none). servesweep then measures the running server
# with the spec's workload. Brought back in $OUT: the server's log, servesweep's console and
# the sweep folder as roundtrip-<sweep-id>.tar.gz. The server is stopped at the end.
set -euo pipefail
EXPORT_DIR=$1 SPEC=$2 PORT=${3:-8000}
REPO=$PWD NODE=${H200_NODE_DIR:-/tmp/servesweep-node} PY=${H200_NODE_PYTHON:-python3}
MODEL=${H200_MODEL:-/tmp/model}
case $SPEC in /*) ;; *) SPEC=$REPO/$SPEC ;; esac
OUT=${OUT:-$NODE/out}; mkdir -p "$OUT" "$NODE/bin"
t0=$SECONDS
"$PY" deploy/h200/node.py install
source deploy/h200/device_setup.sh env
printf '#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n' > "$NODE/bin/vllm"
chmod +x "$NODE/bin/vllm"; export PATH=$NODE/bin:$PATH
while pgrep -f make_random_model.py >/dev/null; do sleep 1; done   # node.sh model
[ -f "$MODEL/config.json" ] || { echo "no model in $MODEL: run node.sh model"; exit 2; }

echo "[roundtrip] $(date -u +%T) starting the exported command: $EXPORT_DIR/vllm-serve.sh"
setsid sh "$EXPORT_DIR/vllm-serve.sh" > "$OUT/exported-server.log" 2>&1 < /dev/null &
SERVER=$!
stop_server() { kill -TERM -- "-$SERVER" 2>/dev/null || true; sleep 5; kill -KILL -- "-$SERVER" 2>/dev/null || true; }
trap stop_server EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
  kill -0 "$SERVER" 2>/dev/null || { tail -40 "$OUT/exported-server.log"; echo "the server exited"; exit 1; }
  [ $((SECONDS - t0)) -lt 400 ] || { tail -40 "$OUT/exported-server.log"; echo "not healthy in time"; exit 1; }
  sleep 1
done
echo "[roundtrip] $(date -u +%T) healthy after $((SECONDS - t0)) s (payload check and model wait included)"

export SERVESWEEP_HOME=$NODE/roundtrip
rc=0
# from $NODE, as node.sh runs sweeps: servesweep is the carried build, not this checkout
(cd "$NODE" && "$PY" -m orchestrator.commands.cli run "$SPEC" --no-mlflow) 2>&1 \
  | tee "$OUT/roundtrip-console.txt" || rc=$?
if [ -f "$SERVESWEEP_HOME/sweeps/LATEST" ]; then
  SWEEP=$SERVESWEEP_HOME/sweeps/$(cat "$SERVESWEEP_HOME/sweeps/LATEST")
  tar -czf "$OUT/roundtrip-$(basename "$SWEEP").tar.gz" -C "$(dirname "$SWEEP")" "$(basename "$SWEEP")"
fi
echo "[roundtrip] $(date -u +%T) servesweep exited $rc after $((SECONDS - t0)) s; brought back: $(ls "$OUT")"
exit $rc
