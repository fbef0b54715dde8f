"""``EngineHost``: the Ray actor that owns one engine server on its node.

Lifecycle, driven by the sweep controller: ``launch`` (returns the process
group at once so the driver can record it) -> ``wait_ready`` (health with a
deadline, log events, applied-config check) -> the load generator measures ->
``observe`` (is the server still alive, events since ready) -> ``stop``
(SIGTERM to the group, bounded wait, SIGKILL, verify nothing is left).

What ``stop`` stops: the engine's process group, every process carrying its marker, and
what left both. The actor's process is a child subreaper, so an engine grandchild that
double-forks, calls ``setsid`` and clears its environment is re-parented to the host and
tracked as its descendant (``actors.proctree.DescendantWatch``, listed with start times in
``engine-procs.json`` for the node's reaper should the host die); where the node lets the
host create one, the engine also runs in a cgroup of its own (``actors.cgroups``).
``launch`` answers the leader's start time and the cgroup, which the ledger records.

Ports: the host draws a launched engine's port from outside the kernel's ephemeral
range, free by a bind test (``actors.procs.choose_port``), and counts the server healthy
only once it is proven to be the one it started (the adapter contract, "Ports and the
proof"): every listening socket on the port held by the engine's processes, else, where
no listener is visible, the launch's nonce at ``/v1/models``. Anything else there, or a
server that exited with its port taken, is ``port_in_use``: the attempt is stopped, its
log kept as ``server.port-in-use.N.log``, and the server started again on another port
(3 retries).

Every call answers a typed message (``actors.contracts.messages``); failures are
data (``failure``: a ``FailureClass``, and ``message``), never raised, so a broken
engine is a failed trial and not a broken sweep. A full disk (``ENOSPC``, ``EDQUOT``,
``EROFS``: ``actors.contracts.diskspace``) is the one exception: it is the node's, not the
trial's, so it is raised, and the driver stops the sweep without a result for the trial.
The actor is threaded: ``stop`` may run while ``wait_ready`` is still waiting.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import ray

from actors.cgroups import EngineCgroup
from actors.contracts.config import TrialConfig, resolve_env
from actors.contracts.diskspace import disk_error
from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.results import LevelResult
from actors.contracts.states import FailureClass
from actors.engines import LaunchContext, LaunchPlan, LogEvent, get_adapter
from actors.engines.base import redact
from actors.gpus import gpu_model
from actors.procs import choose_port, port_listeners, socket_holders, spawn_group, stop_group
from actors.proctree import PROCS_FILE, DescendantWatch, set_child_subreaper, start_time

__all__ = ["EngineHostCore", "EngineHost", "set_aside_previous_attempt"]

LOG_TAIL_LINES = 60
#: ``_health``'s answer when something answered on the port, but not HTTP
NOT_HTTP = -1
#: retries on another port after the first one turned out taken
PORT_RETRIES = 3
#: consecutive checks that must find the port not the engine's before it counts as taken
#: (a socket handed between processes may be held by none for an instant)
FOREIGN_CHECKS = 2


class EngineHostCore:
    """``subreaper``: make this process a child subreaper (the Ray actor does: its worker
    process is the host's alone), so that what leaves the engine's process group and
    drops its marker is still among the host's descendants and stopped with the rest."""

    def __init__(self, trial: dict, ctx: dict, subreaper: bool = False):
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
        self._ports_tried: list[int] = []
        self._launch_ctx = self.ctx
        self._foreign_checks = 0
        self._own_listeners: set[int] = set()
        self.subreaper = set_child_subreaper() if subreaper else False
        self.watch = DescendantWatch(self.dir / PROCS_FILE, whole_host=self.subreaper)
        self.cgroup: EngineCgroup | None = None

    # -- launch -----------------------------------------------------------------------------
    def launch(self) -> LaunchInfo:
        """Start the server (or note the external URL). Returns what the ledger records."""
        port = self.ctx.port
        if self.adapter.launches_process and port == 0 and not self.adapter.picks_own_port:
            port = self._choose_port()
        try:
            plan = self._build(port)
        except (ValueError, OSError, KeyError) as err:  # e.g. a key the release lacks
            if disk_error(err) is not None:
                raise  # the node's disk, not the trial: the driver stops the sweep
            return LaunchInfo(host=socket.gethostname(), node_id=_node_id(),
                              failure=FailureClass.STARTUP_CRASH,
                              message=f"cannot build the launch: {err}")
        self.api_key = plan.api_key
        argv_safe, env_safe = redact(plan.argv, plan.env)
        gpu_ids = [str(g) for g in ray.get_gpu_ids()] if ray.is_initialized() else []
        info = LaunchInfo(
            host=socket.gethostname(), node_ip=_node_ip(), node_id=_node_id(),
            boot_id=boot_id(), nice=os.nice(0), argv=argv_safe,
            env=env_safe, marker=self.marker, gpu_ids=gpu_ids, gpu_model=gpu_model(gpu_ids))
        for name, content in plan.files.items():
            (self.dir / name).write_text(content)
        if not self.adapter.launches_process:
            self.base_url = plan.base_url
            return info
        self._port_chosen = port != self.ctx.port  # ours to change if it turns out taken
        self.cgroup = EngineCgroup.create(f"{self.marker.replace('/', '-')}-"
                                          f"{secrets.token_hex(3)}")
        self.t_launch = time.monotonic()
        try:
            self._spawn(plan)
        except (OSError, KeyError) as err:
            if disk_error(err) is not None and self.proc is not None:
                with contextlib.suppress(OSError):  # e.g. the watch's list was not written
                    stop_group(self.proc, self.marker, 10.0, cgroup=self.cgroup)
            if self.cgroup is not None:
                self.cgroup.remove()
            if disk_error(err) is not None:
                raise  # the node's disk, not the trial: the driver stops the sweep
            if isinstance(err, KeyError):  # a ${NAME} the spec refers to is not set here
                return info.model_copy(update={
                    "failure": FailureClass.STARTUP_CRASH,
                    "message": f"{err.args[0]} ({socket.gethostname()})"})
            # e.g. the engine's interpreter or binary is missing
            return info.model_copy(update={"failure": FailureClass.STARTUP_CRASH,
                                           "message": f"cannot start {plan.argv[0]}: {err}"})
        if self.proc is not None:
            info = info.model_copy(update={
                "pid": self.proc.pid, "pgid": self.proc.pid, "start_time": start_time(
                    self.proc.pid), "cgroup": str(self.cgroup.path) if self.cgroup else None})
        return info

    def _choose_port(self) -> int:
        port = choose_port(self.ctx.launch.host, exclude=self._ports_tried)
        self._ports_tried.append(port)
        return port

    def _build(self, port: int) -> LaunchPlan:
        """The adapter's plan for ``port``, with a fresh nonce for this attempt."""
        self._launch_ctx = self.ctx.model_copy(update={"port": port,
                                                       "nonce": secrets.token_hex(8)})
        return self.adapter.build_launch(self.trial, self._launch_ctx)

    def _spawn(self, plan: LaunchPlan) -> None:
        self.base_url = f"http://{self.ctx.launch.host}:{plan.port}" if plan.port else None
        self._foreign_checks, self._own_listeners = 0, set()
        with self._lock:
            if self._stopping:
                return
            # ${NAME} references become values only here, in the engine's own environment
            env = resolve_env(plan.env, dict(os.environ))
            self.proc = spawn_group(plan.argv, env, self.log_path, self.dir, self.marker,
                                    self.cgroup)
            self.watch.engine_started(self.proc.pid)
            self.watch.start()

    def _retry_port(self, why: str) -> bool:
        """The port turned out taken (``why``): stop this attempt, keep its log, start the
        server again on another port. False when the port was not ours to change or the
        retries are spent."""
        if not self._port_chosen or self._port_retries >= PORT_RETRIES:
            return False
        self._port_retries += 1
        self._stop_engine(10.0)  # e.g. still starting, its bind to come
        self._read_log()
        with open(self.log_path, "a") as f:
            f.write(f"\n[servesweep] {why}; starting again on another port "
                    f"(retry {self._port_retries} of {PORT_RETRIES})\n")
        self.log_path.rename(self.dir / f"server.port-in-use.{self._port_retries}.log")
        self._log_pos, self._partial, self.events = 0, b"", []
        plan = self._build(self._choose_port())
        for name, content in plan.files.items():
            (self.dir / name).write_text(content)
        self._spawn(plan)
        return True

    def _port_taken(self, why: str) -> Readiness | None:
        """Retry on another port, or the ``port_in_use`` failure when that cannot be."""
        if self._retry_port(why):
            return None
        if self._port_chosen:
            why += f" (the last of {len(self._ports_tried)} ports tried)"
        else:
            why += " (the port was given, not chosen by servesweep: not retried)"
        self._stop_engine(10.0)
        with open(self.log_path, "a") as f:
            f.write(f"\n[servesweep] {why}\n")
        return self._fail(FailureClass.PORT_IN_USE, why)

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
        """The health path's status; ``NOT_HTTP`` when something answered that is not HTTP
        (garbage, a connection closed without a reply); None when nothing answered.
        Never raises on what the port answers."""
        if self.base_url is None:
            return None
        try:
            with urllib.request.urlopen(self.base_url + self.adapter.health_path,
                                        timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code
        except (http.client.HTTPException, ConnectionResetError):
            return NOT_HTTP  # BadStatusLine, RemoteDisconnected, LineTooLong, ...
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _model_ids(self) -> list[str] | None:
        """The ids ``/v1/models`` lists; None when it answers no such list."""
        if self.base_url is None:
            return None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            req = urllib.request.Request(self.base_url + "/v1/models", headers=headers)
            with urllib.request.urlopen(req, timeout=2) as resp:
                data = json.loads(resp.read(1 << 20))
            return [str(m["id"]) for m in data["data"]]
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError,
                KeyError, TypeError):
            return None

    def _port(self) -> int | None:
        if self.base_url is None:
            return None
        try:
            return int(self.base_url.rsplit(":", 1)[1].split("/", 1)[0])
        except (IndexError, ValueError):
            return None

    def _probe(self) -> tuple[int | None, str | None]:
        """(what the health path answered, why the server on the port is not the one this
        host started; None: it is, or nothing answers yet). The adapter contract's "Ports
        and the proof" says how. A foreign listener seen on the port is not polled."""
        port = self._port()
        if port is None or self.proc is None:
            return self._health(), None
        found = port_listeners(port, self.proc.pid, self.marker, known=self._own_listeners)
        if found is not None and found[0]:  # listeners visible here: they decide
            listeners, foreign = found
            if not foreign:
                self._own_listeners = listeners
                return self._health(), None
            holders = socket_holders(foreign)
            who = ", ".join(h for inode in sorted(foreign) for h in holders.get(inode, [])) \
                or "a process this user cannot see"
            return None, (f"port {port} is taken: a listening socket on it is held by {who}, "
                          "not by the server servesweep started")
        status = self._health()
        if status is None:
            return None, None  # nothing listens or answers yet
        name = self.adapter.identity_name(self._launch_ctx)
        answer = "answers garbage" if status == NOT_HTTP else f"answers {status}"
        if name is not None:
            ids = self._model_ids()
            if ids is not None and name in ids:
                return status, None
            return status, (f"port {port} {answer}, but no listening socket on it is visible "
                            f"here and its /v1/models does not list this launch's {name!r}: "
                            "not the server servesweep started")
        if found is None:
            return status, None  # no /proc/net/tcp here, no nonce: nothing to prove it by
        return status, (f"port {port} {answer}, but no listening socket on it is visible here "
                        "(nor a nonce to prove it by): not the server servesweep started")

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
                    port = self._port()
                    failed = self._port_taken(f"the server exited with code "
                                              f"{self.proc.returncode}: its port "
                                              f"{'' if port is None else f'{port} '}was in use")
                    if failed is None:
                        continue
                    return failed
                return self._fail(failure, f"server exited with code {self.proc.returncode} "
                                           "during startup")
            if self.base_url:
                status, why = self._probe()
                if why is not None:
                    self._foreign_checks += 1
                    if self._foreign_checks >= FOREIGN_CHECKS:
                        failed = self._port_taken(why)
                        if failed is None:
                            continue
                        return failed
                else:
                    self._foreign_checks = 0
                    last_status = status
                    if status == 200:
                        break
            if time.monotonic() > deadline:
                if last_status is not None:
                    answer = "garbage" if last_status == NOT_HTTP else last_status
                    return self._fail(FailureClass.UNHEALTHY,
                                      f"{self.adapter.health_path} answered "
                                      f"{answer} until the {timeout_s:.0f} s deadline")
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
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
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

    def hold_level(self, concurrency: int, seconds: float) -> LevelResult:
        """Sim hold mode (``sim.hold_s``): the level waits, measures nothing and says so."""
        from actors.sim.hold import held_level

        return held_level(concurrency, seconds)

    def stop(self, timeout_s: float = 30.0) -> StopResult:
        with self._lock:
            self._stopping = True
        if not self.adapter.launches_process:
            return StopResult()
        result = StopResult.model_validate(self._stop_engine(timeout_s))
        self.watch.close()
        if self.cgroup is not None and not result.leftovers:
            self.cgroup.remove()
        self._read_log()
        return result

    def _stop_engine(self, timeout_s: float) -> dict:
        """Stop the engine's group, its marked processes, its tracked descendants and its
        cgroup's members (``procs.stop_group``)."""
        return stop_group(self.proc, self.marker, timeout_s, tracked=self.watch.pids,
                          cgroup=self.cgroup)

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


def boot_id() -> str | None:
    """This machine's boot id, or None where the kernel does not say (not Linux)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _node_id() -> str | None:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def _event_summary(events: list[LogEvent]) -> list[dict[str, Any]]:
    """Events without their raw lines, minus the repetitive periodic stats except the last few."""
    stats = [e for e in events if e.kind == "stats"][-20:]
    keep = [e for e in events if e.kind != "stats"] + stats
    return [{"kind": e.kind, **e.data} for e in keep]


class _ActorHost(EngineHostCore):
    """The host in its own Ray worker process: a child subreaper."""

    def __init__(self, trial: dict, ctx: dict):
        super().__init__(trial, ctx, subreaper=True)


#: threaded (``stop`` may run while ``wait_ready`` waits); Ray's stubs lack the actor
#: options ``max_concurrency`` takes, hence the ignore
EngineHost = ray.remote(num_cpus=0, max_concurrency=4)(_ActorHost)  # type: ignore[call-overload]

