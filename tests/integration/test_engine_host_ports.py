"""EngineHost against something else on the engine's port (issue 14, "Ports and health").

The port chooser is forced to hand out a port a foreign listener already holds, then a
free one. The host must not take that listener for the engine (before: a healthy
foreign server became a spurious ``config_mismatch``; one answering garbage made
``http.client.BadStatusLine`` escape ``wait_ready``, reported as ``node_lost``): the
attempt is ``port_in_use``, its log is kept, and the trial becomes ready on another
port, the foreign listener untouched. The sim starts slowly here (``slow_start``) so
that it is the host's check, not the sim's own failed bind, that finds the port taken.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from actors import engine_host
from actors.contracts.config import ModelSpec, SimOptions, TrialConfig, Workload
from actors.contracts.states import FailureClass
from actors.engine_host import EngineHostCore
from actors.engines import LaunchContext
from actors.procs import choose_port, marked_processes


def _host(trial_dir: Path, sweep: str, **extras: Any) -> EngineHostCore:
    trial = TrialConfig(engine="sim", profile="vllm", extras=extras)
    ctx = LaunchContext(sweep_id=sweep, trial_key="t", trial_dir=str(trial_dir),
                        model=ModelSpec(preset="llama-3.1-8b", served_name="m"),
                        hardware="h100-sxm", sim=SimOptions(time_scale=0.05),
                        workload=Workload(prompt_tokens=16, output_tokens=8, concurrency=[1]))
    return EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))


def _force_first_port(monkeypatch: pytest.MonkeyPatch, port: int) -> list[int]:
    """The host's chooser hands out ``port`` first, then real choices; returns them all."""
    handed: list[int] = []

    def fake(host: str, **kw: Any) -> int:
        handed.append(port if not handed else choose_port(host, **kw))
        return handed[-1]

    monkeypatch.setattr(engine_host, "choose_port", fake)
    return handed


class _Healthy(http.server.BaseHTTPRequestHandler):
    """A foreign OpenAI-looking server: 200 with JSON on every GET."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.path)
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}
                          if self.path == "/v1/models" else {"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def healthy_foreign_server() -> Iterator[tuple[int, list[str]]]:
    _Healthy.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], _Healthy.hits
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def garbage_listener() -> Iterator[tuple[int, list[int]]]:
    """Accepts every connection and answers bytes that are no HTTP, then closes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    accepted: list[int] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            accepted.append(1)
            with conn:
                try:
                    conn.recv(4096)
                    conn.sendall(b"\x00\xffSSH-2.0-not-http garbage\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], accepted
    finally:
        done.set()
        thread.join(5)
        sock.close()


def _ready_elsewhere(tmp_path: Path, host: EngineHostCore, taken: int, handed: list[int]) -> None:
    try:
        info = host.launch()
        assert info.failure is None, info.message
        ready = host.wait_ready(60)
        assert ready.failure is None, f"{ready.failure}: {ready.message}\n{ready.log_tail}"
        assert ready.mismatches == []
        port = int((ready.base_url or "").rsplit(":", 1)[1])
        assert handed[0] == taken and port == handed[-1] != taken
        listening = [e for e in ready.events if e["kind"] == "listening"]
        assert [e["port"] for e in listening] == [port]  # the sim's own line, new port
        kept = (tmp_path / "server.port-in-use.1.log").read_text()
        assert f"port {taken} is taken: a listening socket on it is held by" in kept
        assert "not by the server servesweep started" in kept
        assert not (tmp_path / "server.port-in-use.2.log").exists()
        with urllib.request.urlopen(f"{ready.base_url}/v1/models", timeout=5) as r:
            ids = [m["id"] for m in json.loads(r.read())["data"]]
        assert ids[0] == "m" and ids[1].startswith("servesweep-launch-")  # the nonce alias
    finally:
        stopped = host.stop(30)
    assert stopped.leftovers == []
    assert marked_processes(host.marker) == []


def test_a_healthy_foreign_server_on_the_port_is_not_taken_for_the_engine(tmp_path, monkeypatch):
    with healthy_foreign_server() as (taken, hits):
        handed = _force_first_port(monkeypatch, taken)
        host = _host(tmp_path, "ports-healthy", fault="slow_start:2")
        _ready_elsewhere(tmp_path, host, taken, handed)
        # untouched: still serving, and never polled (its socket was seen foreign first)
        with urllib.request.urlopen(f"http://127.0.0.1:{taken}/health", timeout=5) as r:
            assert r.status == 200
        assert hits == ["/health"]


def test_a_listener_answering_garbage_is_port_in_use_not_an_exception(tmp_path, monkeypatch):
    with garbage_listener() as (taken, accepted):
        handed = _force_first_port(monkeypatch, taken)
        host = _host(tmp_path, "ports-garbage", fault="slow_start:2")
        _ready_elsewhere(tmp_path, host, taken, handed)
        with socket.create_connection(("127.0.0.1", taken), timeout=5) as c:  # still there
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert b"garbage" in c.recv(100)


def test_health_never_raises_on_garbage(tmp_path):
    """``_health`` on a port answering garbage: NOT_HTTP, no exception."""
    with garbage_listener() as (port, accepted):
        host = _host(tmp_path, "ports-health")
        host.base_url = f"http://127.0.0.1:{port}"
        assert host._health() == engine_host.NOT_HTTP
        assert host._model_ids() is None
        assert accepted


def test_a_server_that_exits_with_its_port_taken_is_retried(tmp_path, monkeypatch):
    """A socket bound but not listening is invisible to the listener check, yet takes the
    port: the sim's own bind fails, and its exit (port_in_use) is retried on another."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # no SO_REUSEADDR: the sim's bind conflicts with it
        taken = holder.getsockname()[1]
        handed = _force_first_port(monkeypatch, taken)
        host = _host(tmp_path, "ports-exit")
        try:
            host.launch()
            ready = host.wait_ready(60)
            assert ready.failure is None, f"{ready.failure}: {ready.message}\n{ready.log_tail}"
            assert int((ready.base_url or "").rsplit(":", 1)[1]) == handed[-1] != taken
            kept = (tmp_path / "server.port-in-use.1.log").read_text()
            assert "address already in use" in kept
            assert f"its port {taken} was in use; starting again on another port" in kept
        finally:
            host.stop(30)
    assert marked_processes(host.marker) == []


def test_retries_end_as_port_in_use(tmp_path, monkeypatch):
    """Every port taken: three retries, each attempt's log kept, then port_in_use."""
    with healthy_foreign_server() as (taken, _):
        monkeypatch.setattr(engine_host, "choose_port", lambda host, **kw: taken)
        host = _host(tmp_path, "ports-spent", fault="slow_start:2")
        try:
            host.launch()
            ready = host.wait_ready(60)
        finally:
            host.stop(30)
        assert ready.failure is FailureClass.PORT_IN_USE, ready
        assert f"port {taken} is taken" in ready.message and "the last of 4 ports" in ready.message
        assert sorted(p.name for p in tmp_path.glob("server.port-in-use.*.log")) == [
            f"server.port-in-use.{i}.log" for i in (1, 2, 3)]
    assert marked_processes(host.marker) == []


def test_no_visible_listener_the_nonce_decides(tmp_path, monkeypatch):
    """Where no listener on the port is visible (a port forwarded from another network
    namespace), the server is the host's own only if /v1/models lists the launch's nonce."""
    monkeypatch.setattr(engine_host, "port_listeners", lambda *a, **kw: (set(), set()))
    host = _host(tmp_path, "ports-nonce")
    try:
        host.launch()
        ready = host.wait_ready(60)
        assert ready.failure is None, f"{ready.failure}: {ready.message}"
    finally:
        host.stop(30)
    with healthy_foreign_server() as (taken, hits):  # lists "m", not the nonce
        _force_first_port(monkeypatch, taken)
        monkeypatch.setattr(engine_host, "PORT_RETRIES", 0)
        host = _host(tmp_path / "b", "ports-nonce-b", fault="slow_start:2")
        try:
            host.launch()
            ready = host.wait_ready(60)
        finally:
            host.stop(30)
        assert ready.failure is FailureClass.PORT_IN_USE, ready
        assert "does not list this launch's 'servesweep-launch-" in ready.message
        assert "/v1/models" in hits
