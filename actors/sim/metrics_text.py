"""The sim's ``/metrics`` in Prometheus text, with vLLM's metric names."""

from __future__ import annotations

from actors.sim.pace import Pace
from actors.sim.perf import MemoryPlan
from actors.sim.scheduler import SimEngine

__all__ = ["render_metrics"]


def render_metrics(cfg, engine: SimEngine, mem: MemoryPlan, behind_s: float = 0.0,
                   pace: Pace | None = None) -> str:
    pace = pace or Pace()
    lab = f'engine="0",model_name="{cfg.served_name}"'
    rows = [
        ("gauge", "vllm:num_requests_running", lab, len(engine.running)),
        ("gauge", "vllm:num_requests_waiting", lab, engine.waiting_admitted),
        ("gauge", "vllm:kv_cache_usage_perc", lab, round(engine.kv_usage, 6)),
        ("counter", "vllm:num_preemptions_total", lab, engine.preemptions_total),
        ("counter", "vllm:prompt_tokens_total", lab, engine.prompt_tokens_total),
        ("counter", "vllm:generation_tokens_total", lab, engine.generation_tokens_total),
        # vLLM's prefix cache counters: prompt tokens looked up, and found cached
        ("counter", "vllm:prefix_cache_queries_total", lab,
         engine.cache.queries if engine.cache else 0),
        ("counter", "vllm:prefix_cache_hits_total", lab, engine.cache.hits if engine.cache else 0),
        ("gauge", "vllm:cache_config_info",
         f'block_size="{mem.block_size}",cache_dtype="{cfg.settings.kv_dtype}",'
         f'engine="0",num_gpu_blocks="{mem.blocks}"', 1.0),
        ("gauge", "servesweep_sim_time_scale", "", cfg.time_scale),
        ("counter", "servesweep_sim_iterations_total", "", engine.iterations),
        ("counter", "servesweep_sim_behind_seconds_total", "", round(behind_s, 6)),
        # the engine loop's punctuality (actors.sim.pace): tokens written by paced steps,
        # those written late, and their summed lateness
        ("counter", "servesweep_sim_paced_tokens_total", "", pace.tokens),
        ("counter", "servesweep_sim_late_tokens_total", "", pace.late_tokens),
        ("counter", "servesweep_sim_token_lag_seconds_total", "", round(pace.lag_token_s, 6)),
        ("counter", "servesweep_sim_first_tokens_total", "", pace.first_tokens),
        ("counter", "servesweep_sim_late_first_tokens_total", "", pace.late_first_tokens),
        ("gauge", "servesweep_sim_seconds", "", round(engine.now, 6)),
    ]
    out = []
    for kind, name, labels, value in rows:
        out.append(f"# TYPE {name} {kind}")
        out.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
    return "\n".join(out) + "\n"
