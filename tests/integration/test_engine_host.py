"""EngineHost on a real sim server: a rerun in an interrupted attempt's directory."""

from __future__ import annotations

from pathlib import Path

from actors.contracts.config import ModelSpec, SimOptions, TrialConfig, Workload
from actors.engine_host import EngineHostCore, set_aside_previous_attempt
from actors.engines import LaunchContext
from actors.procs import marked_processes


def _host(trial_dir: Path) -> EngineHostCore:
    trial = TrialConfig(engine="sim", profile="trtllm")
    ctx = LaunchContext(sweep_id="attempts", trial_key="t", trial_dir=str(trial_dir),
                        model=ModelSpec(preset="llama-3.1-8b", served_name="m"),
                        hardware="h100-sxm", sim=SimOptions(time_scale=0.05),
                        workload=Workload(prompt_tokens=16, output_tokens=8, concurrency=[1]))
    return EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))


def test_a_rerun_reads_only_its_own_server_log(tmp_path: Path) -> None:
    """The regression behind a hung `resume`: the old log's port was taken as the new one's."""
    first = _host(tmp_path)
    try:
        first.launch()
        old = first.wait_ready(60)
        assert old.failure is None
    finally:
        first.stop(30)
    (tmp_path / "requests.csv").write_text("partial\n")
    second = _host(tmp_path)
    try:
        second.launch()
        new = second.wait_ready(60)
        assert new.failure is None, new
        listening = [e for e in new.events if e["kind"] == "listening"]
        assert len(listening) == 1, listening
        port = (new.base_url or "").rsplit(":", 1)[1]
        assert f":{port}" in (tmp_path / "server.log").read_text()
    finally:
        second.stop(30)
    kept = tmp_path / "attempt-1"
    assert (kept / "requests.csv").read_text() == "partial\n"
    assert (old.base_url or "").rsplit(":", 1)[1] in (kept / "server.log").read_text()
    assert not (tmp_path / "requests.csv").exists()
    assert marked_processes("attempts/") == []


def test_set_aside_numbers_attempts_and_ignores_an_empty_dir(tmp_path: Path) -> None:
    assert set_aside_previous_attempt(tmp_path) is None
    (tmp_path / "server.log").write_text("one")
    assert set_aside_previous_attempt(tmp_path) == tmp_path / "attempt-1"
    (tmp_path / "server.log").write_text("two")
    assert set_aside_previous_attempt(tmp_path) == tmp_path / "attempt-2"
    assert (tmp_path / "attempt-1" / "server.log").read_text() == "one"
    assert (tmp_path / "attempt-2" / "server.log").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == []
