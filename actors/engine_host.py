"""``EngineHost``: the Ray actor that owns one engine server on its node.

Lifecycle, driven by the sweep controller: ``launch`` (returns the process
group at once so the driver can record it) -> ``wait_ready`` (health with a
deadline, log events, applied-config check) -> the load generator measures ->
``observe`` (is the server still alive, events since ready) -> ``stop``
(SIGTERM to the group, bounded wait, SIGKILL, verify nothing is left).

Every call answers a typed message (``actors.contracts.messages``); failures are
data (``failure``: a ``FailureClass``, and ``message``), never raised, so a broken
engine is a failed trial and not a broken sweep. The actor is threaded: ``stop``
may run while ``wait_ready`` is still waiting.
"""

from __future__ import annotations

import random
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import ray

from actors.contracts.config import TrialConfig
from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.states import FailureClass
from actors.engines import LaunchContext, LaunchPlan, LogEvent, get_adapter
from actors.engines.base import redact
from actors.procs import spawn_group, stop_group

__all__ = ["EngineHostCore", "EngineHost", "set_aside_previous_attempt"]

LOG_TAIL_LINES = 60


class EngineHostCore:
    def __init__(self, trial: dict, ctx: dict):
        self.trial = TrialConfig.model_validate(trial)
        self.ctx = LaunchContext.model_validate(ctx)
        self.adapter = get_adapter(self.trial.engine)
        self.dir = Path(self.ctx.trial_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        set_aside_previous_attempt(self.dir)
        self.log_path = self.dir / "server.log"
        self.marker = f"{self.ctx.sweep_id}/{self.ctx.trial_key}"
        self.proc: subprocess.Popen | None = None
        self.events: list[LogEvent] = []
        self._log_pos = 0
        self._partial = b""
        self._lock = threading.Lock()
        self._stopping = False
        self.base_url: str | None = None
        self.api_key: str | None = None
        self.t_launch = 0.0
        self._port_chosen = False
        self._port_retries = 0

    # -- launch -----------------------------------------------------------------------------
    def launch(self) -> LaunchInfo:
        """Start the server (or note the external URL). Returns what the ledger records."""
        port = self.ctx.port
        if self.adapter.launches_process and port == 0 and not self.adapter.picks_own_port:
            port = random.Random(f"{self.marker}{time.time()}").randint(20000, 59999)
        try:
            plan = self.adapter.build_launch(self.trial,
                                             self.ctx.model_copy(update={"port": port}))
        except (ValueError, OSError, KeyError) as err:  # e.g. a key the release lacks
            return LaunchInfo(host=socket.gethostname(), node_id=_node_id(),
                              failure=FailureClass.STARTUP_CRASH,
                              message=f"cannot build the launch: {err}")
        self.api_key = plan.api_key
        argv_safe, env_safe = redact(plan.argv, plan.env)
        info = LaunchInfo(
            host=socket.gethostname(), node_ip=_node_ip(), node_id=_node_id(), argv=argv_safe,
            env=env_safe, marker=self.marker,
            gpu_ids=[str(g) for g in ray.get_gpu_ids()] if ray.is_initialized() else [])
        for name, content in plan.files.items():
            (self.dir / name).write_text(content)
        if not self.adapter.launches_process:
            self.base_url = plan.base_url
            return info
        self._port_chosen = port != self.ctx.port  # ours to change if it turns out taken
        self.t_launch = time.monotonic()
        try:
            self._spawn(plan)
        except OSError as err:  # e.g. the engine's interpreter or binary is missing
            return info.model_copy(update={"failure": FailureClass.STARTUP_CRASH,
                                           "message": f"cannot start {plan.argv[0]}: {err}"})
        if self.proc is not None:
            info = info.model_copy(update={"pid": self.proc.pid, "pgid": self.proc.pid})
        return info

    def _spawn(self, plan: LaunchPlan) -> None:
        self.base_url = f"http://{self.ctx.launch.host}:{plan.port}" if plan.port else None
        with self._lock:
            if self._stopping:
                return
            self.proc = spawn_group(plan.argv, plan.env, self.log_path, self.dir, self.marker)

    def _retry_port(self) -> bool:
        """The server died because its port was taken: keep the log, respawn on another."""
        if not self._port_chosen or self._port_retries >= 3:
            return False
        self._port_retries += 1
        self.log_path.rename(self.dir / f"server.port-in-use.{self._port_retries}.log")
        self._log_pos, self._partial, self.events = 0, b"", []
        port = random.Random(f"{self.marker}{time.time()}").randint(20000, 59999)
        plan = self.adapter.build_launch(self.trial, self.ctx.model_copy(update={"port": port}))
        self._spawn(plan)
        return True

    # -- log --------------------------------------------------------------------------------
    def _read_log(self) -> None:
        if not self.log_path.exists():
            return
        with open(self.log_path, "rb") as f:
            f.seek(self._log_pos)
            data = f.read()
        self._log_pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            for ev in self.adapter.parse_log_line(line):
                self.events.append(ev)
                if ev.kind == "listening" and self.base_url is None:
                    self.base_url = ev.data["url"].replace("0.0.0.0", "127.0.0.1")

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    # -- readiness --------------------------------------------------------------------------
    def _health(self) -> int | None:
        if self.base_url is None:
            return None
        try:
            with urllib.request.urlopen(self.base_url + self.adapter.health_path,
                                        timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_ready(self, timeout_s: float) -> Readiness:
        """Block until healthy or failed (``Readiness.failure``)."""
        deadline = time.monotonic() + timeout_s
        last_status: int | None = None
        while True:
            self._read_log()
            if self._stopping:
                return self._fail(FailureClass.STARTUP_CRASH, "stopped while starting")
            if self.proc is not None and self.proc.poll() is not None:
                self._read_log()
                failure = FailureClass(self.adapter.classify_exit(self.events,
                                                                  self.proc.returncode))
                if failure is FailureClass.PORT_IN_USE:
                    if self._retry_port():
                        continue
                    return self._fail(FailureClass.STARTUP_CRASH, f"port still in use after "
                                      f"{self._port_retries} retries")
                return self._fail(failure, f"server exited with code {self.proc.returncode} "
                                           "during startup")
            if self.base_url:
                last_status = self._health()
                if last_status == 200:
                    break
            if time.monotonic() > deadline:
                if last_status is not None:
                    return self._fail(FailureClass.UNHEALTHY,
                                      f"{self.adapter.health_path} answered "
                                      f"{last_status} until the {timeout_s:.0f} s deadline")
                return self._fail(FailureClass.STARTUP_TIMEOUT,
                                  f"not healthy within {timeout_s:.0f} s")
            time.sleep(0.2)
        startup_s = time.monotonic() - self.t_launch if self.t_launch else 0.0
        self._read_log()
        self._scrape_cache_config()
        applied = self.adapter.applied(self.events)
        mismatches = self.adapter.verify(self.trial, applied)
        info = Readiness(base_url=self.base_url, startup_s=startup_s, applied=applied,
                         mismatches=mismatches, events=_event_summary(self.events))
        if mismatches:
            failed = self._fail(FailureClass.CONFIG_MISMATCH, "; ".join(mismatches))
            info = info.model_copy(update={"failure": failed.failure, "message": failed.message,
                                           "log_tail": failed.log_tail})
        return info

    def _scrape_cache_config(self) -> None:
        """One /metrics read once healthy: the block size and count many logs do not state."""
        if self.base_url is None:
            return
        try:
            with urllib.request.urlopen(self.base_url + self.adapter.metrics_path,
                                        timeout=5) as resp:
                text = resp.read().decode(errors="replace")
        except (urllib.error.URLError, OSError, ValueError):
            return
        sample = self.adapter.parse_metrics(text, time.monotonic())
        if sample.block_size or sample.num_blocks:
            self.events.append(LogEvent("cache_config", {"block_size": sample.block_size,
                                                         "num_blocks": sample.num_blocks}))

    def _fail(self, failure: FailureClass, message: str) -> Readiness:
        return Readiness(failure=failure, message=message, log_tail=self.log_tail(),
                         events=_event_summary(self.events))

    def api_key_for_client(self) -> str | None:
        return self.api_key

    # -- during and after the load ----------------------------------------------------------
    def observe(self) -> Observation:
        """Alive or not, and the log events (e.g. periodic stats) read so far."""
        self._read_log()
        alive = self.proc is None or self.proc.poll() is None
        return Observation(alive=alive,
                           returncode=None if self.proc is None else self.proc.returncode,
                           events=_event_summary(self.events), log_tail=self.log_tail())

    def stop(self, timeout_s: float = 30.0) -> StopResult:
        with self._lock:
            self._stopping = True
        if not self.adapter.launches_process:
            return StopResult()
        result = StopResult.model_validate(stop_group(self.proc, self.marker, timeout_s))
        self._read_log()
        return result

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def set_aside_previous_attempt(trial_dir: Path) -> Path | None:
    """Move an interrupted attempt's files into ``attempt-N/``; returns that folder.

    A resumed trial reruns in its old directory. Its server log is appended to,
    so without this the new attempt would read the old one's lines (its port,
    its applied settings) as its own. Nothing is deleted.
    """
    files = [p for p in trial_dir.iterdir() if p.is_file()]
    if not files:
        return None
    n = 1
    while (trial_dir / f"attempt-{n}").exists():
        n += 1
    dest = trial_dir / f"attempt-{n}"
    dest.mkdir()
    for p in files:
        p.rename(dest / p.name)
    return dest


def _node_ip() -> str:
    try:
        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001  - outside Ray (unit tests)
        return "127.0.0.1"


def _node_id() -> str | None:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def _event_summary(events: list[LogEvent]) -> list[dict[str, Any]]:
    """Events without their raw lines, minus the repetitive periodic stats except the last few."""
    stats = [e for e in events if e.kind == "stats"][-20:]
    keep = [e for e in events if e.kind != "stats"] + stats
    return [{"kind": e.kind, **e.data} for e in keep]


#: threaded (``stop`` may run while ``wait_ready`` waits); Ray's stubs lack the actor
#: options ``max_concurrency`` takes, hence the ignore
EngineHost = ray.remote(num_cpus=0, max_concurrency=4)(EngineHostCore)  # type: ignore[call-overload]

