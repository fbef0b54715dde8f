#!/usr/bin/env bash
# Build a slim vLLM 0.26.0 + missing-deps site dir for the H200 device (Python 3.12,
# torch 2.11.0 preinstalled, no network), pack it as tar.xz and split it into
# <=60 MiB chunks under <repo>/.payload/cN/ (git-ignored; take one along per command sent to the GPU machine).
# Runs on the dev machine (needs PyPI via pip, python3, unzip, xz, split).
#   usage: bash GPUDIR/build_payload.sh      (env: VLLM_WHEEL=/path/to/vllm.whl to reuse)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel)
WORK=${WORK:-${TMPDIR:-/tmp}/vllm_payload_build}
VLLM_VERSION=${VLLM_VERSION:-0.26.0}
CHUNK=${CHUNK:-60M}
rm -rf "$WORK/deps"; mkdir -p "$WORK/wheels" "$WORK/deps"

# 1. the vLLM wheel (cp38-abi3, so any CPython >= 3.8 works)
if [ -z "${VLLM_WHEEL:-}" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$WORK/wheels" "vllm==$VLLM_VERSION"
  VLLM_WHEEL=$(ls "$WORK"/wheels/vllm-"$VLLM_VERSION"-*.whl)
fi

# 2. wheels of every (transitive) requirement the device image lacks
python3 "$HERE/resolve_deps.py" "$VLLM_WHEEL" "$HERE/device_pkgs.txt" "$WORK/deps"

# 3. site dir = vLLM minus what a text-only Llama server on sm90 never loads
SITE=$WORK/site; rm -rf "$SITE"; mkdir -p "$SITE"
unzip -q "$VLLM_WHEEL" -d "$SITE"
rm -f  "$SITE"/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so  `# 305 MB; Hopper uses FA3 (fa_utils.py)` \
       "$SITE"/vllm/vllm-rs                              `# optional Rust frontend binary` \
       "$SITE"/vllm/_moe_C_stable_libtorch.abi3.so       `# MoE kernels; import is guarded`
rm -rf "$SITE"/vllm/third_party/deep_gemm  `# fp8 block-scaled GEMM (DeepSeek-style); has_deep_gemm()->False` \
       "$SITE"/vllm/third_party/fmha_sm100 `# Blackwell only`
for w in "$WORK"/deps/*.whl; do unzip -q -o "$w" -d "$SITE"; done
# servesweep's own needs beyond vLLM's (ray + jsonschema): EXTRA_WHEELS=<dir of wheels>
if [ -n "${EXTRA_WHEELS:-}" ]; then
  for w in "$EXTRA_WHEELS"/*.whl; do unzip -q -o "$w" -d "$SITE"; done
  rm -rf "$SITE"/ray/dashboard/client "$SITE"/ray/tests  # UI assets and tests: never loaded
fi
du -sh "$SITE"

# 4. pack + split (xz: the FA3 fatbin shrinks 153 MB -> 11 MB; python's lzma unpacks it)
PAY=$ROOT/.payload
EXCL=$(git -C "$ROOT" rev-parse --git-path info/exclude)
case "$EXCL" in /*) ;; *) EXCL=$ROOT/$EXCL;; esac
grep -qx '/.payload/' "$EXCL" 2>/dev/null || echo '/.payload/' >> "$EXCL"
rm -rf "$PAY"; mkdir -p "$PAY"
tar -C "$SITE" -cf - . | xz -T0 -6 > "$WORK/site.tar.xz"
split -b "$CHUNK" -d -a 2 "$WORK/site.tar.xz" "$WORK/site.tar.xz.part"
i=1
for p in "$WORK"/site.tar.xz.part*; do mkdir -p "$PAY/c$i"; mv "$p" "$PAY/c$i/"; i=$((i+1)); done
sha256sum "$WORK/site.tar.xz" | awk '{print $1}' > "$PAY/c1/site.sha256"
ls -la "$PAY"/c*
