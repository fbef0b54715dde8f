#!/usr/bin/env bash
# ONE command, on the workstation: pack everything the offline GPU node lacks into chunks.
#   bash deploy/h200/build_payload.sh
# What goes in: vLLM (slimmed: parts a text-only model on an H200 never loads) and every
# dependency the node's image lacks (resolve_deps.py, device_pkgs.txt), Ray and Optuna at the
# versions of this workstation's .venv, pydantic, and servesweep itself as a CPython 3.12
# wheel (its load generator's C read pass compiled here with gcc). MLflow is not carried: the
# node runs with --no-mlflow and nothing servesweep does there imports it; `servesweep import`
# logs the sweep into MLflow back here.
# What comes out: .payload/c1 .. .payload/cN (git-ignored), each one part of site.tar.xz of at
# most CHUNK_MIB MiB plus MANIFEST.json (versions, parts, sizes, sha256) and SHA256SUMS.
# Needs: PyPI through pip, a Python 3.12 (uv, pyenv or PATH; or PY312=...), gcc, xz, unzip,
# and `make` run once (.venv: the Ray and Optuna versions). About 6-8 min on 2 cores.
# env: CHUNK_MIB (default: what a call has room for beside the repository's tracked files,
#      64 MiB in all, less 4 MiB for growth; `split_payload.py --rechunk` cuts a
#      built payload again when the repository has outgrown its chunks),
#      VLLM_VERSION (0.26.0), VLLM_WHEEL (a downloaded vLLM wheel to reuse), PY312,
#      H200_PAYLOAD_REF (a commit to build servesweep from; default: the working tree),
#      RAY_VERSION / OPTUNA_VERSION (default: .venv's), WORK (build folder),
#      LM_EVAL_VERSION (0.4.13: lm-evaluation-harness for `quality:` runs; LM_EVAL_VERSION=none
#      leaves it out; the node's `lm_eval` is a wrapper node.sh writes, see README).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel)
WORK=${WORK:-${TMPDIR:-/tmp}/servesweep_payload_build}
VLLM_VERSION=${VLLM_VERSION:-0.26.0}
REPO_MIB=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 stat -c %s 2>/dev/null) \
  | awk '{s += $1} END {print int(s / 1048576) + 1}')
CHUNK_MIB=${CHUNK_MIB:-$(( 64 - REPO_MIB - 4 ))}
LM_EVAL_VERSION=${LM_EVAL_VERSION:-0.4.13}
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
die() { echo "build_payload: $*" >&2; exit 2; }
[ "$CHUNK_MIB" -ge 8 ] || die "the repository (${REPO_MIB} MiB) leaves a call no room for a payload chunk"

is312() { [ -n "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; }
find_py312() {
  local c
  for c in "${PY312:-}" "$(uv python find 3.12 2>/dev/null || true)" \
           "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if is312 "$c"; then echo "$c"; return 0; fi
  done
  return 1
}
PY312=$(find_py312) || die "no Python 3.12 here (the node's Python): install one \
(\`uv python install 3.12\` or pyenv) or set PY312=/path/to/python3.12"
VENV_PY=$ROOT/.venv/bin/python
if [ -z "${RAY_VERSION:-}" ] || [ -z "${OPTUNA_VERSION:-}" ]; then
  [ -x "$VENV_PY" ] || die "no .venv: run \`make\` first (or set RAY_VERSION and OPTUNA_VERSION)"
fi
RAY_VERSION=${RAY_VERSION:-$("$VENV_PY" -c 'import ray; print(ray.__version__)')}
OPTUNA_VERSION=${OPTUNA_VERSION:-$("$VENV_PY" -c 'import optuna; print(optuna.__version__)')}
mkdir -p "$WORK/wheels"
step "vLLM $VLLM_VERSION, Ray $RAY_VERSION, Optuna $OPTUNA_VERSION; servesweep for $("$PY312" -V)"

# 1. the vLLM wheel (cp38-abi3, so any CPython >= 3.8 works)
if [ -z "${VLLM_WHEEL:-}" ]; then
  VLLM_WHEEL=$(ls "$WORK"/wheels/vllm-"$VLLM_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$VLLM_WHEEL" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 -d "$WORK/wheels" "vllm==$VLLM_VERSION"
    VLLM_WHEEL=$(ls "$WORK"/wheels/vllm-"$VLLM_VERSION"-*.whl)
  fi
fi
step "vLLM wheel: $VLLM_WHEEL"

# 2. servesweep as a cp312 wheel, from the working tree (what travels) or H200_PAYLOAD_REF
SRC=$WORK/src
rm -rf "$SRC" "$WORK/sw"; mkdir -p "$SRC" "$WORK/sw"
HEAD=$(git -C "$ROOT" rev-parse --short HEAD)
if [ -n "${H200_PAYLOAD_REF:-}" ]; then
  git -C "$ROOT" archive "$H200_PAYLOAD_REF" pyproject.toml setup.py README.md orchestrator actors \
    | tar -x -C "$SRC"
  SOURCE="commit $(git -C "$ROOT" rev-parse --short "$H200_PAYLOAD_REF")"
else
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- \
     pyproject.toml setup.py README.md orchestrator actors \
     | tar --null -T - --ignore-failed-read -cf -) | tar -x -C "$SRC"
  SOURCE="working tree at $HEAD"
  if [ -n "$(git -C "$ROOT" status --porcelain -- orchestrator actors pyproject.toml setup.py)" ]
  then SOURCE="$SOURCE with uncommitted changes"; fi
fi
"$PY312" -m pip wheel -q --no-deps -w "$WORK/sw" "$SRC" >"$WORK/sw.log" 2>&1 \
  || { cat "$WORK/sw.log"; die "servesweep's wheel did not build"; }
SW_WHEEL=$(ls "$WORK"/sw/servesweep-*-cp312-*.whl 2>/dev/null || ls "$WORK"/sw/servesweep-*.whl)
# (grep without -q: with pipefail, -q's early exit makes unzip die of SIGPIPE, a false alarm)
if ! unzip -l "$SW_WHEEL" | grep '_fastread' >/dev/null; then
  echo "WARNING: the load generator's C read pass did not build (gcc?); the node will run" \
       "the pure-Python pass (more CPU per token)" >&2
fi
step "servesweep wheel: $(basename "$SW_WHEEL") ($SOURCE)"

# 3. lm-eval (pure Python) and its `api` extra's requirements (the local-completions model)
LM_ROOTS=(); LM_SEEDS=()
if [ "$LM_EVAL_VERSION" != none ]; then
  LM_WHEEL=$(ls "$WORK"/wheels/lm_eval-"$LM_EVAL_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$LM_WHEEL" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$WORK/wheels" \
      "lm-eval==$LM_EVAL_VERSION"
    LM_WHEEL=$(ls "$WORK"/wheels/lm_eval-"$LM_EVAL_VERSION"-*.whl)
  fi
  LM_ROOTS=("$LM_WHEEL")
  # the api extra, and pytz: typepy (pytablewriter, lm-eval's results table) imports it
  LM_SEEDS=(--seed requests --seed aiohttp --seed tenacity --seed tqdm --seed tiktoken --seed pytz)
  step "lm-eval wheel: $(basename "$LM_WHEEL")"
fi

# 4. wheels of every (transitive) requirement the node lacks
rm -rf "$WORK/deps"
python3 "$HERE/resolve_deps.py" --device "$HERE/device_pkgs.txt" --out "$WORK/deps" \
  --pin "ray==$RAY_VERSION" --pin "optuna==$OPTUNA_VERSION" --skip mlflow "${LM_SEEDS[@]}" \
  "$VLLM_WHEEL" "$SW_WHEEL" "${LM_ROOTS[@]}"
step "dependencies resolved"

# 5. the site folder, minus what a text-only Llama server on sm90 and a sweep driver never load
SITE=$WORK/site; rm -rf "$SITE"; mkdir -p "$SITE"
unzip -q "$VLLM_WHEEL" -d "$SITE"
for w in "$WORK"/deps/*.whl "$SW_WHEEL" "${LM_ROOTS[@]}"; do unzip -q -o "$w" -d "$SITE"; done
REMOVED=(
  vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so  # 305 MB; Hopper uses FA3 (fa_utils.py)
  vllm/vllm-rs                              # optional Rust frontend binary
  vllm/_moe_C_stable_libtorch.abi3.so       # MoE kernels; import is guarded
  vllm/third_party/deep_gemm                # fp8 block-scaled GEMM; has_deep_gemm() -> False
  vllm/third_party/fmha_sm100               # Blackwell only
  ray/jars                                  # Java workers
  ray/dashboard/client                      # the dashboard's web UI (no dashboard is started)
  ray/rllib ray/llm ray/tests               # libraries servesweep never imports
)
for p in "${REMOVED[@]}"; do rm -rf "${SITE:?}/$p"; done
step "site: $(du -sh "$SITE" | cut -f1)"

# 6. pack, split, manifest + checksums (xz: the FA3 fatbin shrinks 153 MB -> 11 MB)
tar -C "$SITE" -cf - . | xz -T0 -6 > "$WORK/site.tar.xz"
step "packed: $(du -h "$WORK/site.tar.xz" | cut -f1)"
git -C "$ROOT" check-ignore -q .payload/c1 || die ".payload/ is not git-ignored: add it to .gitignore"
python3 "$HERE/split_payload.py" --archive "$WORK/site.tar.xz" --site "$SITE" \
  --out "$ROOT/.payload" --chunk-mib "$CHUNK_MIB" --source "$SOURCE" \
  "${REMOVED[@]/#/--removed=}" \
  --not-carried "mlflow=the node runs with --no-mlflow; servesweep import logs the sweep here"
step "done: carry one .payload/cN folder per call to the node (deploy/h200/README.md)"
