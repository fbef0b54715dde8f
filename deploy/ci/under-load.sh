#!/usr/bin/env bash
# Run a command with busy loops beside it (default: `make test` with two), the check that
# the suite passes on a busy machine. The loops are stopped however the command ends.
#   bash deploy/ci/under-load.sh [LOOPS] [COMMAND...]      e.g. bash deploy/ci/under-load.sh 2 make test
set -uo pipefail
loops=${1:-2}
shift || true
[[ $# -gt 0 ]] || set -- make test
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$loops"); do
  yes > /dev/null &
  pids+=($!)
done
echo "[under-load] $loops busy loop(s) (pids ${pids[*]}) beside: $*" >&2
start=$(date +%s)
"$@"
rc=$?
echo "[under-load] exit $rc after $(( $(date +%s) - start )) s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit $rc
