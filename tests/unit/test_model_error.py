"""The performance model's error band comes from committed cross-validation data, by the
model's shape: a shape with measured points gets their held-out error, one without gets the
default profile's error on shapes it was not fitted on, never silently the fitted shape's."""

from __future__ import annotations

import json
import re

import pytest

from actors.contracts.shapes import load_shape
from orchestrator.planning.model_error import (
    DEFAULT_MODEL_ERROR,
    FITTED_SHAPE,
    model_error,
    shape_key,
)

pytestmark = pytest.mark.unit

EIGHT_B = load_shape(FITTED_SHAPE, None)



def _row(shape, loco: float, default: float) -> dict:
    return {"shape": shape_key(shape), "err_loco": {"output_tok_s": loco},
            "err_default": {"output_tok_s": default}}


def test_no_data_gives_the_default_and_says_so(tmp_path):
    e = model_error(EIGHT_B, tmp_path / "none", tmp_path / "none")
    assert (e.value, e.profiled) == (DEFAULT_MODEL_ERROR, False)
    assert "no cross-validation data" in e.source
    # a file written before shapes were recorded cannot tell models apart: skipped
    (tmp_path / "crossval-old.json").write_text(json.dumps(
        {"rows": [{"err_loco": {"output_tok_s": 0.01}}]}))
    assert model_error(EIGHT_B, tmp_path, tmp_path / "none").value == DEFAULT_MODEL_ERROR


def test_a_profiled_shape_gets_its_own_held_out_error_an_unseen_one_the_unseen_error(tmp_path):
    other = EIGHT_B.model_copy(
        update={"name": "small", "layers": 16, "hidden": 2048})
    (tmp_path / "crossval-x.json").write_text(json.dumps({"rows": [
        _row(EIGHT_B, 0.04, 0.03), _row(EIGHT_B, -0.06, 0.05),
        _row(other, 0.10, -0.20), _row(other, 0.30, 0.40)]}))
    mine = model_error(EIGHT_B, tmp_path, tmp_path / "none")
    assert mine.profiled and mine.value == pytest.approx(0.05) and mine.points == 2
    theirs = model_error(other, tmp_path, tmp_path / "none")
    assert theirs.profiled and theirs.value == pytest.approx(0.20)
    unseen = EIGHT_B.model_copy(update={"name": "new", "layers": 7})
    e = model_error(unseen, tmp_path, tmp_path / "none")
    # the default profile's error where it was not fitted (the 8B is), not the 8B's 4%
    assert not e.profiled and e.value == pytest.approx(0.30)
    assert e.source.startswith("not profiled for this model")


def test_a_clean_clone_reads_the_committed_cross_validation(tmp_path):
    e = model_error(EIGHT_B, results_dir=tmp_path)  # no git-ignored results: committed only
    assert e.profiled and "benchmarks/measured/crossval-" in e.source
    assert 0 < e.value < 0.5
    unseen = EIGHT_B.model_copy(update={"name": "new", "layers": 7})
    u = model_error(unseen, results_dir=tmp_path)
    assert not u.profiled and u.value > e.value  # unseen shapes are off by more


def test_plan_prints_the_band_and_says_when_the_model_is_not_profiled(tmp_path, capsys):
    import yaml

    from orchestrator.commands.cli import main
    from tests.conftest import minimal_spec

    for preset, profiled in (("llama-3.1-8b", True), ("llama-3.1-70b", False)):
        spec = minimal_spec(model={"preset": preset}, cluster={"gpus": 8},
                            space=[{"engine": "sim", "profile": ["vllm"], "tp": [4]}])
        path = tmp_path / f"{preset}.yaml"
        path.write_text(yaml.safe_dump(spec))
        capsys.readouterr()
        assert main(["plan", str(path), "--predict"]) == 0
        out = capsys.readouterr().out
        assert "predicted throughput ±" in out and re.search(r"tok/s +±\d+%", out)
        assert ("NOT PROFILED" in out) is (not profiled), out[:400]
        assert ("servesweep profile-model" in out) is (not profiled)  # and how to profile it


def test_an_unseen_shape_gets_the_leave_one_model_out_error_once_it_is_measured(tmp_path):
    """With the leave-one-model-out fold in the file, a shape nobody profiled gets what the
    model does on a shape it was not fitted on (each measured shape left out in turn)."""
    other = EIGHT_B.model_copy(update={"name": "small", "layers": 16, "hidden": 2048})
    rows = [_row(EIGHT_B, 0.04, 0.03), _row(other, 0.10, -0.20)]
    rows[0]["err_lomo"] = {"output_tok_s": -0.30}
    rows[1]["err_lomo"] = {"output_tok_s": 0.50}
    (tmp_path / "crossval-x.json").write_text(json.dumps({"rows": rows}))
    unseen = EIGHT_B.model_copy(update={"name": "new", "layers": 7})
    e = model_error(unseen, tmp_path, tmp_path / "none")
    assert not e.profiled and e.value == pytest.approx(0.40) and e.points == 2
    assert "left out of the fit" in e.source


def test_a_profiles_band_is_the_error_after_a_profile_on_the_points_own_node(tmp_path):
    from actors.contracts.model_profile import ModelProfile

    profile = ModelProfile(shape=shape_key(EIGHT_B), model="m", engine="vllm", gpu="h200",
                           profile="vllm", factors={"host_scale": 1.3}, points=4,
                           error_before=0.3, error_after=0.02, sweep_id="s",
                           created="2026-12-04T00:00:00Z", gpu_seconds=60.0)
    rows = [{"shape": shape_key(EIGHT_B), "err_profiled": {"output_tok_s": 0.3},
             "err_onnode": {"output_tok_s": 0.1}}]
    (tmp_path / "crossval-x.json").write_text(json.dumps({"rows": rows}))
    e = model_error(EIGHT_B, tmp_path, tmp_path / "none", profile=profile, gpu="h200")
    assert e.value == pytest.approx(0.1) and "10% cross-validated" in e.source
    # a file without the on-node fold: the error after a profile pooled over nodes
    rows[0].pop("err_onnode")
    (tmp_path / "crossval-x.json").write_text(json.dumps({"rows": rows}))
    e = model_error(EIGHT_B, tmp_path, tmp_path / "none", profile=profile, gpu="h200")
    assert e.value == pytest.approx(0.3)
