"""Servers that lie about their token counts, measured through the ``external`` engine.

Each server is a real sim process whose stream leaves count sources out or lies on
purpose (``StreamOptions``). The liars run faster than the honest servers (a smaller
time scale), so any of them counted at its word would win. None may end as a valid,
verified level with wrong figures, and none may win; the honest multi-token servers
are valid with ITL per token (below 1.5x TPOT; within 25% of it unless ``client_bound``).
"""

from __future__ import annotations

import contextlib

import pytest
import yaml

from actors.contracts.states import LevelFlag
from actors.sim.config import StreamOptions
from orchestrator.commands.cli import main
from orchestrator.results.analysis import winners
from orchestrator.results.ledger import Ledger
from orchestrator.spec import SLO
from tests.conftest import minimal_spec
from tests.simserver import sim_config, sim_server

HONEST, LIAR = 0.5, 0.3  # sim time scales: a liar runs faster than real by more

#: label -> (time scale, stream interval, fault, StreamOptions, expected outcome)
SERVERS = {
    "exact": (HONEST, 1, None, {}, "verified"),
    "two-per-chunk": (HONEST, 2, None, {}, "verified"),
    "two-per-chunk-ids-only": (HONEST, 2, None, {"chunk_usage": False}, "verified"),
    "two-per-chunk-text-only": (HONEST, 2, None, {"chunk_usage": False, "token_ids": False},
                                "verified"),
    "no-final-usage": (HONEST, 1, None, {"final_usage": False}, "verified"),
    "stops-early": (LIAR, 1, "short_by:12", {}, "invalid"),
    "streams-fewer-text-only": (LIAR, 1, None, {"withhold": 12, "chunk_usage": False,
                                                "token_ids": False}, "unverified"),
    "streams-fewer": (LIAR, 1, None, {"withhold": 12}, "invalid"),
    "duplicated-chunks": (LIAR, 1, None, {"duplicate_every": 5}, "invalid"),
    "inflated-chunk-usage": (LIAR, 1, None, {"withhold": 12, "inflate_chunk_usage": True},
                             "invalid"),
    "inflated-chunk-usage-text-only": (LIAR, 1, None, {"withhold": 12,
                                                       "inflate_chunk_usage": True,
                                                       "token_ids": False}, "unverified"),
}


@pytest.fixture(scope="module")
def lying_sweep(tmp_path_factory, tokenizer_dir):
    tmp = tmp_path_factory.mktemp("liars")
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(tmp / "state"))
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    with contextlib.ExitStack() as stack:
        space = []
        for label, (scale, interval, fault, opts, _) in SERVERS.items():
            cfg = sim_config(time_scale=scale, stream_interval=interval, fault=fault)
            cfg = cfg.model_copy(update={"stream": StreamOptions(**opts),
                                         "tokenizer": str(tokenizer_dir)})
            url, _, _ = stack.enter_context(sim_server(cfg, tmp))
            space.append({"engine": "external", "extras": {"label": label},
                          "launch": {"base_url": url}})
        spec = minimal_spec(name="liars", space=space,
                            cluster={"gpus": 2, "max_concurrent_trials": 1})
        spec["model"] = {"path": str(tokenizer_dir), "served_name": "sim-model"}
        spec["workload"] = {"prompt_tokens": 32, "output_tokens": 64, "concurrency": [4],
                            "rounds": 2, "requests_per_round": 8, "warmup_requests": 1}
        path = tmp / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    mp.undo()
    results = Ledger.open("latest", root=tmp / "state").results().values()
    return {r.config.extras["label"]: r for r in results}


@pytest.mark.parametrize("label", list(SERVERS))
def test_each_server_ends_as_its_stream_proves(lying_sweep, label):
    r = lying_sweep[label]
    (lv,) = r.levels
    want = SERVERS[label][-1]
    if want == "invalid":
        assert r.status.value == "invalid" and lv.status == "invalid", lv.reason
        assert "mismatch" in lv.reason
    elif want == "unverified":
        assert lv.status == "valid" and "unverified" in lv.flags, lv.reason
        assert "tokenizer" in lv.reason
    else:
        assert r.status.value == "ok" and lv.status == "valid", lv.reason
        assert "unverified" not in lv.flags and lv.count_mismatches == 0
        m = lv.metrics
        # ITL is per token, not per chunk: nearer a token's time than a chunk's (per chunk
        # it would be 2x TPOT at two tokens a chunk)
        assert m.itl_p50_ms < 1.5 * m.tpot_p50_ms, (m, lv.flags)
        # and a token's time itself, unless the level says its client could not keep up:
        # a loaded host bunches the reads, and a text-only stream's ITL, spread over the
        # reads, then falls (0.66-0.75x TPOT under load, flagged client_bound each time)
        if LevelFlag.CLIENT_BOUND not in lv.flags:
            assert abs(m.itl_p50_ms - m.tpot_p50_ms) <= 0.25 * m.tpot_p50_ms, (m, lv.client)


def test_only_an_honest_verified_server_can_win(lying_sweep):
    results = list(lying_sweep.values())
    (w,) = winners(results, SLO(), 0.05)
    assert w.key is not None
    by_key = {r.key: r for r in results}
    assert SERVERS[by_key[w.key].config.extras["label"]][-1] == "verified"
    # an unverified liar is faster: it wins only where the spec opts in to trust usage
    (trusting,) = winners(results, SLO(), 0.05, trust_usage=True)
    assert SERVERS[by_key[trusting.key].config.extras["label"]][-1] == "unverified"


def test_the_report_labels_unverified_levels(lying_sweep, tmp_path, monkeypatch, capsys):
    from orchestrator.results.report import render_text
    from orchestrator.spec import parse_spec

    spec = parse_spec(minimal_spec(name="liars"))
    text = render_text(spec, list(lying_sweep.values()), "liars")
    section = text.split("Unverified levels")[1].split("\n\n")[0]
    assert "cannot win unless workload.trust_usage" in section
    unverified = {label for label, v in SERVERS.items() if v[-1] == "unverified"}
    listed = {label for label in SERVERS if f"label={label}:" in section}
    assert listed == unverified, section
