"""Capacity at SLO end to end: ``servesweep run`` on a small sweep derived from
search_spaces/traffic-capacity.yaml (two batching limits, objective slo_capacity, a GPU-hour
price), then what each command makes of it: every trial's capacity in the ledger, the
report's table and knee chart, ``report --json``'s ranking and ``export``'s
deployment.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from actors.contracts.results import TrialResult
from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PRICE = 3.5  # USD per GPU-hour, as in the example


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The example's spec made quick and steady on a busy host: shorter probes, a coarser
    bisection, one repeat, at most 8 probes, a 90% share of a few dozen requests, up to
    32/s; the sim at half speed; a TTFT-only SLO with room for a loaded client; a send
    counts as late only past a second (how well a schedule is kept is
    tests/integration/test_traffic_sources_sim.py's to check, not a ranking's). Over
    max_num_seqs 1 and 64 (capacities far apart); yields (state home, sweep id)."""
    tmp = tmp_path_factory.mktemp("capacity")
    spec = yaml.safe_load((ROOT / "search_spaces" / "traffic-capacity.yaml").read_text())
    spec["name"] = "capacity-e2e"
    spec["workload"].update(output_tokens=32, requests_per_round=12, open_loop_s=3,
                            late_send_ms=1000)
    spec["workload"]["capacity"].update(share=0.9, low=2, high=32, tolerance=0.25,
                                        repeats=1, max_probes=8, gpu_hour_usd=PRICE)
    spec["slo"] = {"ttft_p99_ms": 1500}
    spec["sim"] = {"time_scale": 0.5}
    spec["space"][0]["max_num_seqs"] = [1, 64]
    assert spec["search"] == {"objective": "slo_capacity"}
    path = tmp / "capacity.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVESWEEP_HOME", str(tmp / "state"))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
        sid = Ledger.open("latest").sweep_id
        yield tmp / "state", sid


@pytest.fixture
def home(sweep: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SERVESWEEP_HOME", str(sweep[0]))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return sweep[1]


def results(sid: str) -> list[TrialResult]:
    return sorted(Ledger.open(sid).results().values(), key=lambda r: r.config.max_num_seqs)


def best(sid: str) -> TrialResult:
    """The trial with the most requests/s per GPU at SLO, from the ledger."""
    rs = results(sid)
    caps = [r.slo_capacity.rps_per_gpu for r in rs if r.slo_capacity]
    assert len(caps) == 2 and caps[0] != caps[1], caps  # a ranking to check
    return max(rs, key=lambda r: r.slo_capacity.rps_per_gpu)  # type: ignore[union-attr]


def test_every_trial_has_its_capacity_per_gpu_and_its_price(home: str):
    rs = results(home)
    assert [r.config.max_num_seqs for r in rs] == [1, 64]
    assert [r.status.value for r in rs] == ["ok", "ok"]
    for r in rs:
        c = r.slo_capacity
        assert c is not None
        assert c.rps is not None and c.rps > 0, c.note
        assert c.output_tok_s is not None and c.output_tok_s > 0
        tp = r.config.tp
        assert c.rps_per_gpu == pytest.approx(c.rps / tp)
        assert c.output_tok_s_per_gpu == pytest.approx(c.output_tok_s / tp)
        # the price of a million output tokens at that rate: tp GPUs for an hour over the
        # tokens they make in it
        assert c.usd_per_million_tokens == pytest.approx(
            PRICE * tp / (c.output_tok_s * 3600) * 1e6)
        held, missed = c.bracket
        assert held == c.rps and (missed is None or missed > held)
        assert c.probes and any(p.rate == c.rps and p.held for p in c.probes)
        assert c.share == 0.9 and len(c.repeats) == 1
        assert not r.levels  # the capacity search is the only load: no other level ran
    # one batch slot holds far fewer requests/s than 64
    assert rs[0].slo_capacity.rps < rs[1].slo_capacity.rps  # type: ignore[union-attr]


def test_the_report_shows_the_capacity_table_and_the_knee_chart(
        home: str, capsys: pytest.CaptureFixture[str]):
    assert main(["report", home, "--no-mlflow"]) == 0
    text = capsys.readouterr().out
    assert "Capacity at SLO" in text
    # no level ran, so no empty per-level table and no "no winner": the capacity ranks
    assert "Winner per level" not in text and "No winner at any level" not in text
    assert "configs are ranked by requests/s per GPU at the SLO" in text
    folder = Ledger.open(home).dir / "report"
    page = (folder / "index.html").read_text()
    md = (folder / "report.md").read_text()
    winner = best(home)
    for doc in (page, md):
        assert "Capacity at SLO" in doc and "req/s per GPU" in doc
        assert "per M output tokens" in doc
        assert "Goodput against rate" in doc  # the knee chart
        assert f"{winner.config.label()} (most per GPU)" in doc
        assert "configs are ranked by requests/s per GPU at" in doc
        assert "Every level:" not in doc
        for r in results(home):
            c = r.slo_capacity
            assert c is not None and f"${c.usd_per_million_tokens:,.3f}" in doc
            assert format(c.rps, ".2f") in doc
    assert "<svg" in page
    assert "slo_capacity" in md and ".svg" in md  # the chart as an SVG beside report.md
    assert any(p.suffix == ".svg" and "slo_capacity" in p.name for p in folder.rglob("*"))


def test_report_json_ranks_the_configs_by_capacity_per_gpu(
        home: str, capsys: pytest.CaptureFixture[str]):
    assert main(["report", home, "--json", "--no-mlflow"]) == 0
    doc = json.loads(capsys.readouterr().out)
    winner = best(home)
    ranked = [r for r in doc["regimes"] if r["objective"] == "slo_capacity"]
    assert ranked, doc["regimes"]
    for row in ranked:
        assert row["winner"] == winner.config.label()
        assert float(row["value"]) == pytest.approx(
            winner.slo_capacity.rps_per_gpu, rel=0.01)  # type: ignore[union-attr]


def test_export_writes_the_capacity_winner_with_its_capacity(
        home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "export"
    assert main(["export", home, "--out", str(out)]) == 0
    capsys.readouterr()
    deployments = sorted(out.rglob("deployment.json"))
    assert deployments, sorted(p.name for p in out.rglob("*"))
    winner = best(home)
    for path in deployments:
        doc = json.loads(path.read_text())
        assert doc["regime"]["key"] == winner.key
        cap = doc["slo_capacity"]
        assert cap["rps"] == winner.slo_capacity.rps  # type: ignore[union-attr]
        assert cap["rps_per_gpu"] == winner.slo_capacity.rps_per_gpu  # type: ignore[union-attr]
        assert cap["usd_per_million_tokens"] == pytest.approx(
            winner.slo_capacity.usd_per_million_tokens)  # type: ignore[union-attr]
