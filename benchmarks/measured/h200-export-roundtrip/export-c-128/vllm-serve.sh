#!/bin/sh
# servesweep export: regime c=128 of sweep h200-runbook-20261201: vllm tp1 bf16 kv=fp8 graphs max_num_seqs=256
# the command the trial ran, without the benchmark-only settings listed
# Benchmark-only settings were left out: README.md lists each and why.
set -eu
export VLLM_USE_FLASHINFER_SAMPLER=0
exec vllm serve /tmp/model --served-model-name llama-8b-random --tensor-parallel-size 1 --dtype bfloat16 --kv-cache-dtype fp8 --max-num-seqs 256 --gpu-memory-utilization 0.9
