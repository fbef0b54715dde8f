"""Spec validation: bad fields produce one error line naming the field path."""

from __future__ import annotations

import pytest
import yaml

from actors.contracts.config import TrialConfig
from orchestrator.errors import SpecError
from orchestrator.spec import load_spec, parse_spec
from tests.conftest import ROOT, minimal_spec


def _err(data: dict) -> str:
    with pytest.raises(SpecError) as exc:
        parse_spec(data, "spec.yaml")
    return str(exc.value)


def test_quickstart_is_valid():
    spec = load_spec(ROOT / "search_spaces" / "quickstart.yaml")
    assert spec.name == "quickstart"
    assert spec.workload.concurrency == [1, 4, 16, 64]


def test_bad_kv_dtype_names_the_field_and_allowed_values():
    data = minimal_spec()
    data["space"][0]["kv_dtype"] = ["auto", "fp9"]
    msg = _err(data)
    assert "space[0].kv_dtype[1]" in msg
    assert "'auto'" in msg and "'fp8'" in msg and "fp9" in msg


def test_unknown_field_is_rejected_with_its_path():
    data = minimal_spec()
    data["workload"]["prompt_tokenz"] = 5
    msg = _err(data)
    assert "workload.prompt_tokenz" in msg
    assert "not a field here; did you mean 'prompt_tokens'?" in msg


def test_missing_required_field():
    data = minimal_spec()
    del data["workload"]["output_tokens"]
    assert "workload.output_tokens: Field required" in _err(data)


def test_unknown_engine_lists_known_engines():
    data = minimal_spec()
    data["space"][0]["engine"] = "tgi"
    msg = _err(data)
    assert "space[0].engine" in msg and "unknown engine 'tgi'" in msg and "sim" in msg


def test_unknown_hardware_and_preset():
    assert "unknown hardware 'h800'" in _err(minimal_spec(hardware="h800"))
    assert "model.preset 'gpt-9'" in _err(minimal_spec(model={"preset": "gpt-9"}))


def test_model_needs_exactly_one_source():
    assert "exactly one of model.preset or model.path" in _err(minimal_spec(model={}))


def test_extras_are_allow_listed_per_engine():
    data = minimal_spec()
    data["space"][0]["extras"] = {"enable_magic": True}
    msg = _err(data)
    assert "extras.enable_magic is not an option of engine 'sim'" in msg
    assert "fault" in msg  # the allowed ones are listed


def test_extras_are_typed():
    data = minimal_spec()
    data["space"][0]["extras"] = {"jitter": "lots"}
    assert "extras.jitter must be float" in _err(data)


def test_duplicate_concurrency_and_bad_values():
    data = minimal_spec()
    data["workload"]["concurrency"] = [4, 4]
    assert "distinct" in _err(data)
    data["workload"]["concurrency"] = [0]
    assert "workload.concurrency[0]" in _err(data)


def test_profile_only_for_sim():
    data = minimal_spec()
    data["space"].append({"engine": "external", "profile": "vllm",
                          "launch": {"base_url": "http://127.0.0.1:1"}})
    assert "profile applies to engine 'sim' only" in _err(data)


def test_yaml_syntax_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(p)


def test_scalar_axes_become_lists(tmp_path):
    data = minimal_spec()
    data["space"][0]["tp"] = 2
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    assert load_spec(p).space[0].tp == [2]


def test_trial_key_is_stable_and_config_sensitive():
    a = TrialConfig(engine="sim", profile="vllm")
    b = TrialConfig(engine="sim", profile="vllm")
    c = TrialConfig(engine="sim", profile="vllm", kv_dtype="fp8")
    assert a.key() == b.key() != c.key()
    assert len(a.key()) == 12


def test_cluster_placement_options_and_their_errors():
    data = minimal_spec()
    data["cluster"] = {"gpu_type": "H100", "node_labels": {"pool": "bench"},
                       "trials_per_node": 1, "order": "declared"}
    c = parse_spec(data).cluster
    assert (c.gpu_type, c.node_labels, c.trials_per_node, c.order) == \
        ("H100", {"pool": "bench"}, 1, "declared")
    assert parse_spec(minimal_spec()).cluster.order == "packed"
    data["cluster"] = {"gpu_type": "H 100", "node_labels": {"pool": ""},
                       "trials_per_node": 0, "order": "biggest"}
    err = _err(data)
    assert "cluster.gpu_type: gpu_type is a Ray accelerator type such as H100" in err
    assert "cluster.node_labels: node label 'pool': '' is not a Ray node label" in err
    assert "cluster.trials_per_node: Input should be greater than 0" in err
    assert "cluster.order: Input should be 'packed' or 'declared'" in err
