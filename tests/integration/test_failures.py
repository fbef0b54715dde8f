"""Broken engines are classified failed trials; the sweep itself completes (exit 0)."""

from __future__ import annotations

import pytest
import yaml

from actors.procs import marked_processes
from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec

FAULTS = {
    "none": ("ok", ""),
    "oom": ("failed", "startup_oom"),
    "crash_after:2": ("failed", "crash_mid_run"),
    "stall_after:20": ("failed", "hang"),
    "unhealthy": ("failed", "unhealthy"),
    "slow_start:60": ("failed", "startup_timeout"),
    "short_by:3": ("invalid", "invalid_level"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    home = tmp_path_factory.mktemp("state")
    spec = minimal_spec(name="faults")
    spec["workload"] = {"prompt_tokens": 32, "output_tokens": 32, "concurrency": [1, 2],
                        "rounds": 1, "warmup_requests": 0, "stall_timeout_s": 3,
                        "level_timeout_s": 60}
    spec["failure"] = {"startup_timeout_s": 8, "stop_timeout_s": 5}
    spec["space"] = [{"engine": "sim", "extras": {"fault": list(FAULTS)}}]
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(home))
    try:
        code = main(["run", str(path), "--quiet", "--no-mlflow"])
        ledger = Ledger.open("latest")
    finally:
        mp.undo()
    return code, ledger


def test_sweep_completes_despite_broken_engines(results):
    code, ledger = results
    assert code == 0
    assert marked_processes(ledger.sweep_id + "/") == []


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_is_classified(results, fault):
    _, ledger = results
    by_fault = {r.config.extras["fault"]: r for r in ledger.results().values()}
    r = by_fault[fault]
    status, reason = FAULTS[fault]
    assert (r.status.value, r.reason) == (status, reason), r.message
    if status == "failed":
        assert r.message  # says what happened
    if fault == "oom":
        assert "CUDA out of memory" in r.log_tail
    if fault == "crash_after:2":
        assert r.levels  # what was measured before the crash is kept
    if fault == "short_by:3":
        lv = r.levels[0]
        assert lv.status == "invalid" and lv.count_mismatches > 0
        assert "count_mismatch: token ids 29, per-chunk usage 29, usage 29 (asked 32)" in lv.reason


def test_a_trial_that_never_gets_a_node_fails_instead_of_hanging(tmp_path, monkeypatch):
    """Something outside the sweep holds every GPU: the trial's placement never becomes
    ready; with no trial of the sweep holding a node it fails after place_timeout_s."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    spec = minimal_spec(name="noroom")
    spec["workload"] = {"prompt_tokens": 32, "output_tokens": 8, "concurrency": [1],
                        "rounds": 1, "warmup_requests": 0}
    spec["failure"] = {"place_timeout_s": 3}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path / "state"))
    ray.init(address="local", num_gpus=2, num_cpus=2, include_dashboard=False,
             log_to_driver=False, logging_level="WARNING")  # the sweep joins this one
    try:
        squatter = placement_group([{"GPU": 2}])
        ray.get(squatter.ready(), timeout=60)
        code = main(["run", str(path), "--quiet", "--no-mlflow"])
    finally:
        if ray.is_initialized():
            remove_placement_group(squatter)
            ray.shutdown()
    assert code == 0
    [r] = Ledger.open("latest").results().values()
    assert (r.status.value, r.reason) == ("failed", "startup_timeout")
    assert "no node had room" in r.message and "place_timeout_s" in r.message


def test_a_load_generator_that_cannot_start_is_a_client_error_with_its_cause(tmp_path,
                                                                            monkeypatch):
    """The LoadGenerator's constructor raises (the tokenizer leaves one usable token id):
    an error of servesweep's client, not a lost node; the message keeps Python's error."""
    from tokenizers import Tokenizer, models

    tok = tmp_path / "tok"
    tok.mkdir()
    two_words = Tokenizer(models.WordLevel({"hello": 0, "<s>": 1}, unk_token="hello"))
    two_words.add_special_tokens(["<s>"])  # special: not sent, so one usable id is left
    two_words.save(str(tok / "tokenizer.json"))
    spec = minimal_spec(name="badtok")
    spec["model"] = {"preset": "llama-3.1-8b", "tokenizer": str(tok)}
    spec["workload"] = {"prompt_tokens": 32, "output_tokens": 8, "concurrency": [1],
                        "rounds": 1, "warmup_requests": 0}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path / "state"))
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    ledger = Ledger.open("latest")
    [r] = ledger.results().values()
    assert (r.status.value, r.reason) == ("failed", "client_error"), r.message
    assert "LoadGenerator constructor raised ValueError: need at least two usable token ids" \
        in r.message
    assert "actors/loadgen/prompts.py" in r.message  # where it was raised
    assert marked_processes(ledger.sweep_id + "/") == []  # the started server was stopped
