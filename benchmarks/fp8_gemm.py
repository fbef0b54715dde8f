"""BF16 against FP8 (W8A8, dynamic per-token activation scales) linear layers on the GPU, per
model shape and batch size: where FP8 weights stop being slower (issue 30, "FP8 GEMMs slower
than BF16 below a matrix size, and the size where that turns over").

Runs with the node's own PyTorch (no payload): ``python3 benchmarks/fp8_gemm.py --out
$OUT/gemm.json``. For each shape of ``make_random_model.py`` (1b, 3b, 8b) it times one
transformer layer's four projections (qkv, o, gate_up, down) at M tokens, each precision
captured in one CUDA graph (as vLLM replays decode steps, so no launch cost is counted) and
replayed ``--iters`` times between CUDA events:

- bf16: ``x @ w.T`` with BF16 weights;
- fp8: per projection a fused dynamic per-token quantisation of ``x`` to float8_e4m3fn
  (one compiled kernel: row amax, scale, cast) then ``torch._scaled_mm`` with a per-tensor
  weight scale, BF16 out. vLLM's own path on Hopper is its CUTLASS scaled-mm with the same
  scales; this is PyTorch's, so the figures are a proxy for the mechanism (an extra kernel
  per projection and a different GEMM), not vLLM's exact times.

Prints one row per (shape, M) and writes every time and the FP8/BF16 ratio as JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

#: hidden, intermediate, query heads, KV heads, head dim (deploy/h200/make_random_model.py)
SHAPES = {"1b": (2048, 8192, 32, 8, 64), "3b": (3072, 8192, 24, 8, 128),
          "8b": (4096, 14336, 32, 8, 128)}
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max


def projections(shape: str) -> list[tuple[str, int, int]]:
    """(name, N out, K in) of one layer's four linear projections."""
    h, inter, heads, kv, d = SHAPES[shape]
    return [("qkv", (heads + 2 * kv) * d, h), ("o", h, heads * d),
            ("gate_up", 2 * inter, h), ("down", h, inter)]


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8 quantisation: one scale per row."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def graph_ms(fn, iters: int) -> float:
    """Milliseconds per replay of ``fn`` captured in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def layer_times(shape: str, m: int, iters: int, quant) -> dict[str, float]:
    """One layer's projections at ``m`` tokens: ms per replay for bf16 and fp8."""
    torch.manual_seed(0)
    dev = "cuda"
    mats = []
    for _, n, k in projections(shape):
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        scale = w.abs().amax().float() / FP8_MAX  # per tensor, as vLLM's FP8 checkpoints
        wq = (w.float() / scale).to(FP8)
        w_scale = scale.reshape(1, 1).expand(1, n).contiguous()  # rowwise form _scaled_mm takes
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        mats.append((w, wq.t(), w_scale, x))  # wq.t(): column-major, as _scaled_mm wants

    def bf16() -> None:
        for w, _, _, x in mats:
            torch.matmul(x, w.t())

    pre = [quant(x) for *_, x in mats]  # the activations quantised once, for the GEMMs alone

    def fp8() -> None:
        for _, wq_t, w_scale, x in mats:
            xq, x_scale = quant(x)
            torch._scaled_mm(xq, wq_t, scale_a=x_scale, scale_b=w_scale,
                             out_dtype=torch.bfloat16)

    def fp8_gemm() -> None:
        for (_, wq_t, w_scale, _), (xq, x_scale) in zip(mats, pre):
            torch._scaled_mm(xq, wq_t, scale_a=x_scale, scale_b=w_scale,
                             out_dtype=torch.bfloat16)

    def fp8_quant() -> None:
        for *_, x in mats:
            quant(x)

    return {"bf16_ms": graph_ms(bf16, iters), "fp8_ms": graph_ms(fp8, iters),
            "fp8_gemm_ms": graph_ms(fp8_gemm, iters), "quant_ms": graph_ms(fp8_quant, iters)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1b,3b,8b")
    ap.add_argument("--tokens", default="1,4,8,16,32,64,128,256,512,1024,2048,8192")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.time()
    torch._dynamo.config.recompile_limit = 1024  # one compiled kernel per activation shape
    quant = torch.compile(quantize, dynamic=False)
    props = torch.cuda.get_device_properties(0)
    rows = []
    print(f"{'shape':>5} {'M':>5} {'bf16 us':>9} {'fp8 us':>9} {'fp8/bf16':>8} "
          f"{'gemm us':>9} {'quant us':>9}", flush=True)
    for shape in args.shapes.split(","):
        for m in (int(x) for x in args.tokens.split(",")):
            t = layer_times(shape, m, args.iters, quant)
            ratio = t["fp8_ms"] / t["bf16_ms"]
            rows.append({"shape": shape, "tokens": m, **t, "fp8_over_bf16": ratio,
                         "projections": projections(shape)})
            print(f"{shape:>5} {m:>5} {1e3 * t['bf16_ms']:>9.1f} {1e3 * t['fp8_ms']:>9.1f} "
                  f"{ratio:>8.2f} {1e3 * t['fp8_gemm_ms']:>9.1f} {1e3 * t['quant_ms']:>9.1f}",
                  flush=True)
    doc = {"device": props.name, "sms": props.multi_processor_count,
           "torch": torch.__version__, "iters": args.iters,
           "wall_s": round(time.time() - t0, 1), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out} ({doc['device']}, {doc['wall_s']} s)")


if __name__ == "__main__":
    main()
