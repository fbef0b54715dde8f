"""The cross-validation benchmark finds every real measurement, folds it, and scores it."""

from __future__ import annotations

import shutil

import benchmarks.crossval as cv
from benchmarks.crossval_data import DEFAULT_ROOTS, config_group, discover, point_label
from benchmarks.crossval_published import load_rows, sim_config
from tests.conftest import FIXTURES


def test_discovers_the_fixture_sweeps_and_the_real_agreement_runs_not_the_sim_ones():
    data = discover(DEFAULT_ROOTS)
    sources = set(data.sources.values())
    assert any("h200x2-vllm-tp" in s for s in sources)
    assert any("h200-agreement-20261130/loadgen_agreement-c4.json" in s for s in sources)
    assert not any("agreement-sim" in s for s in sources)  # the sim's runs are no ground truth
    assert any("agreement-sim" in s for s in data.skipped)
    assert any("rate20" in s and "open loop" in s for s in data.skipped)
    # the quality sweep's 9.6 M-parameter model is host time alone: not the model's domain
    assert any("h200-quality" in s and "M-parameter" in s for s in data.skipped)
    assert all(p.shape.params() >= 100e6 for p in data.points)
    assert len(data.points) >= 31
    lengths = {p.spec.workload.prompt_tokens for p in data.points if p.spec}
    assert {128, 512, 4096} <= lengths
    groups = {config_group(p) for p in data.points}
    assert len(groups) >= 5  # the same settings measured twice are one configuration
    assert all(p.shape is not None for p in data.points)
    assert any("c=128" in point_label(p) for p in data.points)


def test_a_sweep_dropped_under_a_root_joins_the_next_run(tmp_path):
    src = FIXTURES / "h200-sweeps" / "h200-vllm-b-20261129-180103-ac67"
    shutil.copytree(src, tmp_path / "new-gpu-sweep")
    data = discover((tmp_path,))
    assert len(data.points) == 8 and data.skipped == []


def test_folds_hold_out_each_configuration_prompt_length_and_model():
    from orchestrator.planning.model_error import shape_key

    pts = discover(DEFAULT_ROOTS).points
    jobs = cv._folds(pts, 5, "powell", frozenset())
    kinds = [j[0] for j in jobs]
    lengths = {p.spec.workload.prompt_tokens for p in pts if p.spec}
    shapes = {shape_key(p.shape) for p in pts}
    assert kinds.count("lopo") == len(lengths) and kinds.count("insample") == 1
    assert kinds.count("lomo") == len(shapes) >= 3  # 8B, and the 1B- and 3B-like of issue 30
    keys = {"loco": config_group, "lopo": lambda p: f"prompt={p.spec.workload.prompt_tokens}",
            "lomo": lambda p: shape_key(p.shape), "profiled": lambda p: shape_key(p.shape)}
    for kind, name, train, held, *_, then in jobs:
        if kind == "insample":
            continue
        key = keys[kind]
        assert not set(train) & set(held) and not set(then) & set(held)
        assert {key(pts[i]) for i in held} == {name}
        assert name not in {key(pts[i]) for i in train}
        if kind == "profiled":  # the model's profile levels fitted, its other levels scored
            assert then and {pts[i].concurrency for i in then} <= set(cv.PROFILE_LEVELS)
            assert {key(pts[i]) for i in then} == {name}
            assert not {pts[i].concurrency for i in held} & set(cv.PROFILE_LEVELS)
            assert sorted(train + held + then) == list(range(len(pts)))
        else:
            assert then == [] and sorted(train + held) == list(range(len(pts)))
    assert kinds.count("profiled") >= 2


def test_precision_signs_count_effects_beyond_five_percent_by_the_fold_that_predicts_them():
    def row(config, measured, lomo):
        return {"point": config, "config": config, "shape": "s", "prompt_tokens": 1024,
                "concurrency": 32, "measured": {"output_tok_s": measured},
                "lomo": {"output_tok_s": lomo}}
    rows = [row("vllm tp1 bf16 kv=auto graphs", 100.0, 100.0),
            row("vllm tp1 fp8 kv=auto graphs", 80.0, 120.0),   # slower, predicted faster
            row("vllm tp1 bf16 kv=fp8 graphs", 110.0, 105.0),  # faster, predicted faster
            row("vllm tp1 fp8 kv=fp8 graphs", 102.0, 90.0)]    # within 5%: not counted
    signs = cv.precision_signs(rows)["lomo"]
    assert signs["right"] == 1 and len(signs["wrong"]) == 1
    assert "fp8 kv=auto" in signs["wrong"][0] and "-20%" in signs["wrong"][0]


def test_summary_counts_points_outside_the_goal():
    rows = [{"point": f"p{i}", "measured": {"output_tok_s": 1.0},
             "err_default": {"output_tok_s": e}, "err_loco": {"output_tok_s": e / 2}}
            for i, e in enumerate((0.05, -0.2, 0.12))]
    s = cv.summarise(rows)["output_tok_s"]
    assert s["default"]["outside_goal"] == 2 and s["loco"]["outside_goal"] == 0
    assert s["default"]["worst"] == -0.2 and s["default"]["worst_point"] == "p1"
    assert abs(s["default"]["mean_abs"] - 0.37 / 3) < 1e-12
    assert "throughput (10% / 5%)" in cv.summary_table(cv.summarise(rows))


def test_published_fixtures_are_complete_and_pinned():
    rows = load_rows()
    assert len(rows) == 76
    for r in rows:
        assert len(r["commit"]) == 40 and r["measured"]["output_tok_s"] > 0
        cfg, defaulted = sim_config(r)
        assert cfg.tp == r["tp"] and "kv_dtype = auto" in defaulted
    seed = [r for r in rows if r["mode"] == "closed_loop"]
    assert {r["requests"] for r in seed if r["concurrency"] == 128} == {1024}
    assert all(r["file"].startswith("results/") for r in seed)


def test_folds_profiled_on_a_node_take_profile_and_scored_points_from_that_node_alone():
    from benchmarks.crossval_data import node_of
    from orchestrator.planning.model_error import shape_key

    data = discover(DEFAULT_ROOTS)
    pts = data.points
    nodes = [node_of(p, data.sources[id(p)]) for p in pts]
    jobs = [j for j in cv._folds(pts, 5, "powell", frozenset(), nodes=nodes)
            if j[0] == "onnode"]
    names = set()
    for _, name, train, held, *_, then in jobs:
        machine = {nodes[i] for i in held + then}
        assert len(machine) == 1 and name.endswith(f" on {machine.pop()}")
        shape = {shape_key(pts[i].shape) for i in held + then}
        assert len(shape) == 1 and shape.pop() not in {shape_key(pts[i].shape) for i in train}
        assert {pts[i].concurrency for i in then} <= set(cv.PROFILE_LEVELS)
        assert not {pts[i].concurrency for i in held} & set(cv.PROFILE_LEVELS)
        names.add(name)
    # the 1B-like shape on the 12-03 node and on the 12-04 05:05 node are two folds, not one
    assert {n for n in names if "2026-12-03 07:54" in n} and \
        {n for n in names if "2026-12-04 05:05" in n}
    assert cv._folds(pts, 5, "powell", frozenset()) == \
        [j for j in cv._folds(pts, 5, "powell", frozenset(), nodes=nodes) if j[0] != "onnode"]


def test_worst_levels_are_set_beside_their_own_rounds():
    from benchmarks.crossval_worst import beyond_range, round_range

    data = discover(DEFAULT_ROOTS)
    # sweep r's BF16 level at c=160 ran two rounds, 12929 and 14381 tok/s (its ledger)
    pt = next(p for p in data.points if "h100-vllm-r-" in data.sources[id(p)]
              and p.concurrency == 160 and p.trial.config.weights == "bf16")
    lo, hi = round_range(pt)
    assert round(lo) == 12929 and round(hi) == 14381 and lo <= pt.measured["output_tok_s"] <= hi
    assert beyond_range(13000.0, lo, hi) == 0.0
    assert round(beyond_range(hi * 1.2, lo, hi), 6) == 0.2
    assert round(beyond_range(lo * 0.9, lo, hi), 6) == -0.1


def test_a_sweep_that_set_vllms_output_chunk_in_its_launch_env_is_read_as_the_extra():
    """Sweeps u and v set VLLM_V1_OUTPUT_PROC_CHUNK_SIZE in ``launch.env`` before the
    ``output_proc_chunk`` extra existed: their points carry the extra, so the model reads the
    chunk they ran with; the other sweeps' points carry none."""
    from actors.engines.sim import sim_settings

    data = discover(DEFAULT_ROOTS)
    chunked = [p for p in data.points if any(f"h100-vllm-{x}-" in data.sources[id(p)]
                                             for x in "uv")]
    assert len(chunked) == 8
    assert all(sim_settings(p.trial.config).output_chunk == 512 for p in chunked)
    assert all("chunk=512" in point_label(p) for p in chunked)
    rest = [p for p in data.points if p not in chunked]
    assert all("output_proc_chunk" not in p.trial.config.extras for p in rest)


def test_a_precision_effect_counts_as_resolved_only_where_its_levels_rounds_do_not_overlap():
    from benchmarks.crossval_precision import base_key, resolved
    from benchmarks.crossval_worst import round_range

    data = discover(DEFAULT_ROOTS)

    def level(weights, c):
        return next(p for p in data.points if "h100-vllm-s-" in data.sources[id(p)]
                    and p.concurrency == c and p.trial.config.weights == weights)

    # sweep s: FP8 weights +15% at c=192 inside BF16's spread of rounds, -8% at c=256 outside
    assert resolved(round_range(level("fp8", 192)), round_range(level("bf16", 192))) is False
    assert resolved(round_range(level("fp8", 256)), round_range(level("bf16", 256))) is True
    assert resolved((1.0, 2.0), None) is None  # a level of one round says nothing
    row = {"config": "vllm tp1 fp8 kv=fp8 graphs", "source": "s", "shape": "x",
           "prompt_tokens": 1024, "concurrency": 256}
    assert base_key(row) == "vllm tp1 bf16 kv=auto graphs|s|x|1024|256"
