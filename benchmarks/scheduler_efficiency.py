"""Scheduler efficiency: how busy a mixed-TP sweep keeps a cluster's GPUs.

    .venv/bin/python benchmarks/scheduler_efficiency.py            # ~4 min here
    .venv/bin/python benchmarks/scheduler_efficiency.py --quick    # shorter trials

A ``ray.cluster_utils.Cluster`` on this machine: a head without GPUs and worker nodes of
8, 8 and 4 logical GPUs (``--nodes``). The same sim sweep (tp 1, 2, 4 and 8 x the vllm
and trtllm profiles x CUDA graphs on and off: 16 trials, 60 GPUs' worth) runs once per
order: ``packed`` (largest tp first, servesweep's default) and ``declared`` (the space's
own order: tp ascending within each profile). Each trial holds its tp GPUs from its
``scheduled`` ledger event to its final ``trial`` event. From each ledger:

- GPU-busy fraction = sum(tp x held) / (GPUs x makespan)
- lower bound = max(sum(tp x held) / GPUs, the longest trial): no schedule of these
  trials with these durations finishes sooner (it ignores that a trial needs all its
  GPUs on one node, so it can be out of reach)
- efficiency = lower bound / makespan
- GPU-working fraction: the same with each trial's own work (server start + levels)
  in place of the time it held its GPUs
- overhead per trial = held - its own work: the actors' start, the health wait's
  polling, the stop, the artifacts

The sim streams in real time (``time_scale: 1``) 32 tokens per chunk, so a trial costs
little CPU; on this 2-core machine the actors' and servers' start still contend for the
cores, which shows up as overhead, and as noise between the two orders.

So the measured trials are then replayed (``replay``): the real ``SweepController`` and
``Packer`` over a virtual-time cluster of the same nodes, each trial holding its GPUs for
exactly the time it held them in the measured ``packed`` run, with no overhead between
trials. That compares the policies alone, on identical durations: ``packed``,
``declared``, and ``ray`` (the behaviour before packing: up to one trial per GPU asked for
at once in the declared order, each placement group held on the first node with room as
GPUs free up, first come first served with backfill; an approximation of Ray's own
placement). The replay runs twice: with the measured durations, and with every trial
lasting the measured mean (the fragmentation effect alone: the sim's trials get much
shorter with tp, real engines' much less, their start growing with tp). Writes
``benchmarks/results/scheduler_efficiency.json``.

Hold mode (issue 15's setup), which takes the engines' CPU out of the measurement:

    .venv/bin/python benchmarks/scheduler_efficiency.py --hold 20   # ~4 min here

Three worker nodes of 4 logical GPUs (``--nodes``, default ``4,4,4`` with ``--hold``) run
18 sim trials in hold mode (``sim.hold_s``: each trial's server starts, its one level
waits ``--hold`` seconds without a request or CPU, the server stops; every level is
``invalid`` and flagged ``held``, nothing is measured): 4 x tp 4, 6 x tp 2, 8 x tp 1, 36
GPU-trials, so a perfect schedule keeps all 12 GPUs busy for exactly 3 holds. Then the
same sweep with one worker node removed mid-sweep (``--remove-after`` seconds after the
first trial was scheduled, the node of a trial in flight); its trials are retried on the
nodes left. Figures:

- ideal makespan = max(total GPU-seconds / GPUs, longest trial), the GPU-seconds being each
  trial's own duration (its levels' time, ``tp x hold``), counted once; with a node
  removed at t_r, over the GPUs that remained: max(longest trial, t_r + (W - G t_r) / G')
  where W is the total, G the GPUs before and G' after (W / G when the work fits before t_r)
- efficiency = ideal / measured makespan (first ``scheduled`` event to last ``trial``)
- overhead per trial = the time it held its GPUs (``scheduled`` to its result) minus its
  own duration: placement, the actors' and server's start and health check, the stop, the
  artifacts (retried trials are left out: theirs includes the lost attempt). Goal: >= 90%
  and < 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway cluster of this process
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

RESULTS = ROOT / "benchmarks" / "results"


def spec_for(address: str, order: str, output_tokens: int) -> dict[str, Any]:
    return {
        "name": f"sched-{order}",
        "cluster": {"address": address, "order": order},
        "model": {"preset": "llama-3.1-8b"},
        "hardware": "h100-sxm",
        "workload": {"prompt_tokens": 64, "output_tokens": output_tokens, "concurrency": [2],
                     "rounds": 1, "requests_per_round": 2, "warmup_requests": 0},
        "sim": {"time_scale": 1.0, "stream_interval": 32},
        "space": [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4, 8],
                   "cuda_graphs": [True, False]}],
    }


def hold_spec(address: str, name: str, hold_s: float) -> dict[str, Any]:
    """18 hold-mode trials: 4 x tp 4, 6 x tp 2, 8 x tp 1 (36 GPU-trials)."""
    sim = {"engine": "sim", "profile": ["vllm", "trtllm"]}
    return {
        "name": name,
        "cluster": {"address": address},
        "model": {"preset": "llama-3.1-8b"},
        "hardware": "h100-sxm",
        "workload": {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [1],
                     "rounds": 1, "warmup_requests": 0},
        "sim": {"hold_s": hold_s},
        "space": [{**sim, "tp": 4, "cuda_graphs": [True, False]},
                  {**sim, "tp": 2, "max_num_seqs": [64, 128, 256]},
                  {**sim, "tp": 1, "cuda_graphs": [True, False], "kv_dtype": ["auto", "fp8"]}],
    }


def measure_hold(ledger_dir: Path, gpus: int, gpus_after: int | None = None,
                 removed_at: float | None = None) -> dict[str, Any]:
    """Efficiency and per-trial overhead of a hold-mode sweep, from its ledger."""
    from orchestrator.results.ledger import Ledger

    ledger = Ledger(ledger_dir)
    events = ledger.events()
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    started: dict[str, float] = {}
    retried = {ev.key for ev in events if ev.type == "attempt"}
    for ev in events:
        if ev.type == "scheduled":
            start.setdefault(ev.key, ev.ts)
        elif ev.type == "started":
            started[ev.key] = ev.ts
        elif ev.type == "trial":
            end[ev.key] = ev.ts
    results = ledger.results()
    ran = [k for k in end if k in start]
    own = {k: sum(lv.wall_s for lv in results[k].levels) for k in ran}
    work = sum(results[k].config.tp * own[k] for k in ran)
    t0 = min(start[k] for k in ran)
    makespan = max(end[k] for k in ran) - t0
    longest = max(own.values())
    ideal = max(work / gpus, longest)
    t_r = None if removed_at is None else removed_at - t0
    if t_r is not None and gpus_after is not None and work > gpus * t_r:
        ideal = max(longest, t_r + (work - gpus * t_r) / gpus_after)
    overhead = [end[k] - start[k] - own[k] for k in ran if k not in retried]
    startup = [results[k].startup_s or 0.0 for k in ran if k not in retried]
    # where the overhead goes: scheduled -> started (placement, the host actor's start, the
    # spawn), the server's start (health check), then after the levels (stop, artifacts)
    first = [started[k] - start[k] for k in ran if k not in retried]
    last = [end[k] - started[k] - (results[k].startup_s or 0.0) - own[k]
            for k in ran if k not in retried]
    held = all(lv.flags == ["held"] for k in ran for lv in results[k].levels)
    return {
        "trials": len(ran), "retried": len(retried), "all_levels_held": held,
        "gpu_seconds": round(work, 1), "makespan_s": round(makespan, 1),
        "ideal_s": round(ideal, 1), "efficiency": round(ideal / makespan, 3),
        "removed_at_s": None if t_r is None else round(t_r, 1),
        "overhead_s_mean": round(statistics.mean(overhead), 2),
        "overhead_s_p50": round(statistics.median(overhead), 2),
        "overhead_s_max": round(max(overhead), 2),
        "startup_s_mean": round(statistics.mean(startup), 2),
        "to_started_s_mean": round(statistics.mean(first), 2),
        "after_levels_s_mean": round(statistics.mean(last), 2),
    }


def run_hold(address: str, name: str, hold_s: float, home: Path,
             remove: Any = None) -> tuple[Path, float | None]:
    """One hold-mode sweep; ``remove(node_id)`` is called once, ``remove_after`` seconds
    in, for the node of a trial in flight. Returns the ledger folder and when (epoch)."""
    import threading

    from orchestrator.commands.cli import main
    from orchestrator.results.ledger import Ledger

    os.environ["SERVESWEEP_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(hold_spec(address, name, hold_s)))
    removed: list[float] = []
    done = threading.Event()

    def remover(after_s: float, kill: Any) -> None:
        t_first: float | None = None
        while not done.is_set():
            latest = home / "sweeps" / "LATEST"
            try:
                events = Ledger.open(latest.read_text().strip(), home).events() \
                    if latest.exists() else []
            except (OSError, ValueError):
                events = []
            sched = [e.ts for e in events if e.type == "scheduled"]
            t_first = t_first or (min(sched) if sched else None)
            if t_first is not None and time.time() >= t_first + after_s:
                finished = {e.key for e in events if e.type == "trial"}
                running = [e for e in events if e.type == "started" and e.key not in finished]
                if running and kill(running[-1].node_id):
                    removed.append(time.time())
                    return
            time.sleep(0.2)

    thread = None
    if remove is not None:
        thread = threading.Thread(target=remover, args=remove, daemon=True)
        thread.start()
    try:
        code = main(["run", str(path), "--quiet", "--no-mlflow"])
    finally:
        done.set()
        if thread is not None:
            thread.join(timeout=5)
    if code != 0:
        raise SystemExit(f"the {name} sweep exited with {code}")
    return Ledger.open("latest", home).dir, (removed[0] if removed else None)


def hold_main(args: argparse.Namespace) -> int:
    import ray
    from ray.cluster_utils import Cluster

    sizes = [int(x) for x in (args.nodes or "4,4,4").split(",")]
    rows: dict[str, dict[str, Any]] = {}
    load0 = os.getloadavg()
    for label in ("all nodes", "one node removed"):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
        nodes = {n.node_id: (n, g) for n, g in
                 ((cluster.add_node(num_cpus=1, num_gpus=g), g) for g in sizes)}
        cluster.wait_for_nodes()
        lost: list[int] = []

        def kill(node_id: str, cluster: Any = cluster, nodes: Any = nodes,
                 lost: list[int] = lost) -> bool:
            if node_id not in nodes:
                return False
            node, g = nodes[node_id]
            cluster.remove_node(node)
            lost.append(g)
            return True

        remove = (args.remove_after, kill) if label != "all nodes" else None
        t0 = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix="sched-hold-") as tmp:
                name = "hold-all" if remove is None else "hold-lost"
                sweep, when = run_hold(cluster.address, name, args.hold, Path(tmp), remove)
                rows[label] = {**measure_hold(sweep, sum(sizes),
                                              sum(sizes) - sum(lost) if lost else None, when),
                               "wall_s": round(time.monotonic() - t0, 1)}
        finally:
            ray.shutdown()
            cluster.shutdown()
        print(f"{label}: {json.dumps(rows[label])}", flush=True)
    print(f"\nnodes {','.join(map(str, sizes))} logical GPUs, 18 hold-mode sim trials "
          f"(4 x tp4, 6 x tp2, 8 x tp1), hold {args.hold:g} s, {os.cpu_count()} CPUs")
    print(hold_table(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.json.with_name("scheduler_efficiency_hold.json")
    out.write_text(json.dumps({
        "nodes": sizes, "hold_s": args.hold, "remove_after_s": args.remove_after,
        "runs": rows, "machine": {"cpus": os.cpu_count(), "loadavg_start": load0},
        "when": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    print(f"\nwrote {out}")
    return 0


def hold_table(rows: dict[str, dict[str, Any]]) -> str:
    cols = ["run", "trials (retried)", "GPU-s", "makespan s", "ideal s", "efficiency",
            "overhead/trial s (mean, p50, max)",
            "of which: to started, server start, after the level (means)"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for label, m in rows.items():
        run = label if m["removed_at_s"] is None else f"{label} at {m['removed_at_s']} s"
        lines.append("| " + " | ".join([
            run, f"{m['trials']} ({m['retried']})", f"{m['gpu_seconds']}",
            f"{m['makespan_s']}", f"{m['ideal_s']}", f"{m['efficiency']:.0%}",
            f"{m['overhead_s_mean']}, {m['overhead_s_p50']}, {m['overhead_s_max']}",
            f"{m['to_started_s_mean']}, {m['startup_s_mean']}, "
            f"{m['after_levels_s_mean']}"]) + " |")
    return "\n".join(lines)


def measure(ledger_dir: Path, gpus: int) -> dict[str, Any]:
    """The figures of one sweep, from its ledger."""
    from orchestrator.results.ledger import Ledger

    ledger = Ledger(ledger_dir)
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    order: list[int] = []
    for ev in ledger.events():
        if ev.type == "scheduled":
            start[ev.key] = ev.ts
            order.append(int(ev.config["tp"]))
        elif ev.type == "trial":
            end[ev.key] = ev.ts
    results = ledger.results()
    ran = [k for k in end if k in start]
    held = {k: end[k] - start[k] for k in ran}
    gpu_s = sum(results[k].config.tp * held[k] for k in ran)
    own = {k: (results[k].startup_s or 0.0) + sum(lv.wall_s for lv in results[k].levels)
           for k in ran}
    makespan = max(end[k] for k in ran) - min(start[k] for k in ran)
    bound = max(gpu_s / gpus, max(held.values()))
    overhead = [held[k] - own[k] for k in ran]
    working = sum(results[k].config.tp * own[k] for k in ran)
    return {
        "trials": len(ran), "ok": sum(results[k].status.value == "ok" for k in ran),
        "makespan_s": round(makespan, 1), "lower_bound_s": round(bound, 1),
        "efficiency": round(bound / makespan, 3),
        "gpu_busy": round(gpu_s / (gpus * makespan), 3),
        "gpu_working": round(working / (gpus * makespan), 3),
        "gpu_seconds": round(gpu_s, 1),
        "longest_trial_s": round(max(held.values()), 1),
        "overhead_s_mean": round(statistics.mean(overhead), 2),
        "overhead_s_p50": round(statistics.median(overhead), 2),
        "overhead_s_max": round(max(overhead), 2),
        "start_order_tp": order,
        "held_s_by_tp": {tp: round(statistics.mean(held[k] for k in ran
                                                   if results[k].config.tp == tp), 1)
                         for tp in sorted({results[k].config.tp for k in ran})},
        "held_s": {k: round(v, 3) for k, v in held.items()},
    }


def run_order(address: str, order: str, output_tokens: int, home: Path) -> Path:
    from orchestrator.commands.cli import main
    from orchestrator.results.ledger import Ledger

    os.environ["SERVESWEEP_HOME"] = str(home)
    path = home / f"{order}.yaml"
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec_for(address, order, output_tokens)))
    code = main(["run", str(path), "--quiet", "--no-mlflow"])
    if code != 0:
        raise SystemExit(f"the {order} sweep exited with {code}")
    return Ledger.open("latest", home).dir


def table(rows: dict[str, dict[str, Any]]) -> str:
    cols = ["order", "trials ok", "makespan s", "lower bound s", "efficiency", "GPU-busy",
            "GPU-working", "overhead/trial s (mean, p50, max)", "start order (tp)"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for order, m in rows.items():
        lines.append("| " + " | ".join([
            order, f"{m['ok']}/{m['trials']}", f"{m['makespan_s']}", f"{m['lower_bound_s']}",
            f"{m['efficiency']:.0%}", f"{m['gpu_busy']:.0%}", f"{m['gpu_working']:.0%}",
            f"{m['overhead_s_mean']}, {m['overhead_s_p50']}, {m['overhead_s_max']}",
            " ".join(map(str, m["start_order_tp"]))]) + " |")
    return "\n".join(lines)


def replay_table(rows: dict[str, dict[str, Any]]) -> str:
    cols = ["policy", "makespan s", "lower bound s", "efficiency", "GPU-busy",
            "start order (tp)"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for policy, m in rows.items():
        lines.append("| " + " | ".join([
            policy, f"{m['makespan_s']}", f"{m['lower_bound_s']}", f"{m['efficiency']:.0%}",
            f"{m['gpu_busy']:.0%}", " ".join(map(str, m["start_order_tp"]))]) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default=None,
                    help="GPUs of each worker node (default 8,8,4; with --hold 4,4,4)")
    ap.add_argument("--hold", type=float, default=None, metavar="S",
                    help="hold mode: 18 trials of S seconds each, then one node removed")
    ap.add_argument("--remove-after", type=float, default=30.0, metavar="S",
                    help="with --hold: remove a node this long after the first trial")
    ap.add_argument("--orders", default="packed,declared")
    ap.add_argument("--output-tokens", type=int, default=1536,
                    help="tokens each request decodes (sets the trials' length)")
    ap.add_argument("--quick", action="store_true", help="--output-tokens 384")
    ap.add_argument("--json", type=Path, default=RESULTS / "scheduler_efficiency.json")
    args = ap.parse_args()
    if args.hold is not None:
        return hold_main(args)
    args.nodes = args.nodes or "8,8,4"
    tokens = 384 if args.quick else args.output_tokens
    import ray
    from ray.cluster_utils import Cluster

    sizes = [int(x) for x in args.nodes.split(",")]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for g in sizes:
        cluster.add_node(num_cpus=1, num_gpus=g)
    cluster.wait_for_nodes()
    rows: dict[str, dict[str, Any]] = {}
    replays: dict[str, dict[str, Any]] = {}
    load0 = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="sched-eff-") as tmp:
            for order in args.orders.split(","):
                t0 = time.monotonic()
                sweep = run_order(cluster.address, order, tokens, Path(tmp) / order)
                rows[order] = {**measure(sweep, sum(sizes)), "wall_s":
                               round(time.monotonic() - t0, 1)}
                print(f"{order}: {json.dumps(rows[order])}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    if "packed" in rows:
        from scheduler_replay import replay

        held = rows["packed"]["held_s"]
        mean = statistics.mean(held.values())
        for kind, durations in (("measured", held), ("equal", {k: mean for k in held})):
            with tempfile.TemporaryDirectory(prefix="sched-replay-") as tmp:
                for policy in ("packed", "declared", "ray"):
                    replays[f"{policy}, {kind} durations"] = replay(policy, sizes, durations,
                                                                     Path(tmp))
    print()
    print(f"nodes {args.nodes} logical GPUs ({sum(sizes)}), 16 sim trials, "
          f"{tokens} output tokens per request, time_scale 1")
    print(table(rows))
    if replays:
        print("\nreplayed in virtual time, no overhead: the packed run's trial durations, "
              "then each trial lasting their mean")
        print(replay_table(replays))
    RESULTS.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "nodes": sizes, "output_tokens": tokens, "orders": rows, "replay": replays,
        "machine": {"cpus": os.cpu_count(), "loadavg_start": load0},
        "when": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
