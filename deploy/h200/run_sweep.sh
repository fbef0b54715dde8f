#!/usr/bin/env bash
# On the GPU node, from the repo root: unpack the carried payload (vLLM 0.26 + Ray), wait for
# the random model, run a servesweep spec without MLflow (the node has none), and pack the
# sweep's folder into $OUT/sweep.tar.gz. Locally: untar into mlruns/sweeps/ and run
# `servesweep sync <id>` to log it into MLflow, `servesweep calibrate <id>` to fit the sim.
#   usage: bash deploy/h200/run_sweep.sh SPEC
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SPEC=${1:?spec}
bash "$HERE/device_setup.sh" install || exit 1
source "$HERE/device_setup.sh" env
export PYTHONPATH=$PWD:$PYTHONPATH SERVESWEEP_HOME=/tmp/state RAY_AUTH_MODE=disabled
if [ -f /tmp/model.pid ]; then while kill -0 "$(cat /tmp/model.pid)" 2>/dev/null; do sleep 1; done; fi
tail -n 2 /tmp/model.log 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout -s INT "${SWEEP_BUDGET_S:-530}" python3 -m orchestrator.commands.cli run "$SPEC" --no-mlflow 2>&1 | tee /tmp/sweep.out
rc=${PIPESTATUS[0]}
id=$(cat /tmp/state/sweeps/LATEST 2>/dev/null)
if [ -n "${OUT:-}" ] && [ -n "$id" ]; then
  tar -C /tmp/state/sweeps -czf "$OUT/sweep.tar.gz" "$id"
  cp /tmp/sweep.out "$OUT/"
fi
exit "$rc"
