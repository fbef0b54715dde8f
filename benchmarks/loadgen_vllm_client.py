"""Drive ``vllm bench serve``'s own client loop (``vllm.benchmarks.serve.benchmark``) in-process.

Run with the vLLM environment's Python (``.venv-vllm/bin/python``). The CLI would
re-import vLLM (10-30 s) for every configuration; this imports it once and then
calls the same ``benchmark()`` coroutine ``vllm bench serve`` calls, with the same
request function, connector and concurrency semaphore, once per configuration.

    .venv-vllm/bin/python benchmarks/loadgen_vllm_client.py URL '[{"streams": 64,
        "requests": 128, "prompt_tokens": 32, "output_tokens": 256}, ...]'

A config may name its own ``url``; with ``--stdin`` instead of the JSON list, configs
are read one per line after it prints ``ready`` (so runs can interleave with others).
Prints one JSON line per configuration: the benchmark's result (throughput, TTFT and
ITL medians) plus ``cpu_s``, the CPU time of this process during the main run (warm-ups excluded).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import resource
import sys
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


class _Quiet(io.StringIO):
    """Swallows benchmark()'s prints; notes the CPU time and clock when its main run starts
    (after the ready check and warm-up), so that ``cpu_s`` covers the measured run only."""

    def __init__(self) -> None:
        super().__init__()
        self.main_cpu: float | None = None

    def write(self, s: str) -> int:
        if self.main_cpu is None and "Starting main benchmark run" in s:
            self.main_cpu = _cpu()
        return super().write(s)


def main() -> None:
    default_url = sys.argv[1]
    # imported before "ready": the import takes seconds of the core this process shares
    # with the other clients, which must not run meanwhile
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.serve import TaskType, benchmark

    if sys.argv[2:] == ["--stdin"]:  # one config per input line, answered as it comes
        print("ready", flush=True)
        configs = (json.loads(line) for line in sys.stdin if line.strip())
    else:
        configs = iter(json.loads(sys.argv[2]))

    for cfg in configs:
        url = cfg.get("url", default_url)
        rng = random.Random(cfg.get("seed", 0))
        p, n = cfg["prompt_tokens"], cfg["output_tokens"]
        reqs = [SampleRequest(prompt=[rng.randrange(100, 30000) for _ in range(p)],
                              prompt_len=p, expected_output_len=n)
                for _ in range(cfg["requests"])]
        api = cfg.get("api", "completions")
        kw = dict(
            task_type=TaskType.GENERATION,
            endpoint_type="openai-chat" if api == "chat" else "openai",
            api_url=url + ("/v1/chat/completions" if api == "chat" else "/v1/completions"),
            base_url=url, model_id=cfg.get("model", "m"), model_name=cfg.get("model", "m"),
            tokenizer=None, input_requests=reqs, logprobs=None,
            request_rate=float("inf"), burstiness=1.0, disable_tqdm=True,
            num_warmups=cfg.get("warmups", 0), profile=False,
            selected_percentile_metrics=["ttft", "tpot", "itl", "e2el"],
            selected_percentiles=[50.0, 90.0, 99.0], ignore_eos=True,
            goodput_config_dict={}, max_concurrency=cfg["streams"], lora_modules=None,
            extra_headers=None, extra_body={"temperature": 0, "min_tokens": n},
            ready_check_timeout_sec=0)
        quiet = _Quiet()
        cpu0, t0 = _cpu(), time.perf_counter()
        with contextlib.redirect_stdout(quiet):
            res = asyncio.run(benchmark(**kw))
        cpu = _cpu() - (quiet.main_cpu if quiet.main_cpu is not None else cpu0)
        wall = time.perf_counter() - t0
        keep = {k: v for k, v in res.items() if isinstance(v, (int, float)) and v is not None}
        # without a tokenizer benchmark() leaves out the latency summary: take it from the
        # per-request lists it returns (ITL there is per chunk, as vLLM measures it)
        ttfts = [t for t in res.get("ttfts", []) if t]
        itls = [g for one in res.get("itls", []) for g in one]
        keep["median_ttft_ms"] = 1e3 * _median(ttfts) if ttfts else None
        keep["median_itl_ms"] = 1e3 * _median(itls) if itls else None
        if cfg.get("raw"):
            keep["ttfts"], keep["itls"] = res.get("ttfts"), res.get("itls")
            keep["start_times"] = res.get("start_times")
        keep.update(cfg=cfg, cpu_s=cpu, wall_s=wall,
                    errors=[e for e in res.get("errors", []) if e][:3])
        print(json.dumps(keep), flush=True)


if __name__ == "__main__":
    main()
