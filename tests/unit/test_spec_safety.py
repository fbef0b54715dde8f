"""Specs that cannot hurt the driver: refused with exit 2 before Ray or any folder exists,
in bounded time and memory, with a bounded message (issue 28, item 6)."""

from __future__ import annotations

import string
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.commands.cli import main
from orchestrator.spec.yaml_load import MAX_MESSAGE
from tests.conftest import minimal_spec

pytestmark = pytest.mark.unit

#: a bound on a hang, not a speed target: each refusal takes milliseconds when idle
HANG_S = 30


def _refused(tmp_path: Path, text: str | bytes, capsys) -> str:
    home = tmp_path / "state"
    path = tmp_path / "spec.yaml"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)  # type: ignore[operator]
    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVESWEEP_HOME", str(home))
        rc = main(["run", str(path), "--no-mlflow", "--quiet"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert took < HANG_S
    assert not home.exists()  # no sweep folder, no MLflow store, nothing
    assert len(err) < MAX_MESSAGE + 500
    return err


def _spec(**over) -> dict:
    return minimal_spec(**over)


def test_duplicate_keys_are_refused(tmp_path, capsys):
    text = yaml.safe_dump(_spec()) + "workload: {prompt_tokens: 8, output_tokens: 8, " \
                                     "concurrency: [1]}\n"
    err = _refused(tmp_path, text, capsys)
    assert "duplicate key 'workload'" in err and "first at line" in err


def test_an_alias_bomb_is_refused_in_bounded_time(tmp_path, capsys):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    assert len(bomb) < 800
    err = _refused(tmp_path, bomb, capsys)
    assert "alias bomb" in err


def test_a_huge_spec_and_a_huge_axis_are_refused(tmp_path, capsys):
    big = _spec(description="x" * (5 * 1024 * 1024))
    assert "a spec may have at most" in _refused(tmp_path, yaml.safe_dump(big), capsys)
    many = _spec(space=[{"engine": "sim", "max_num_seqs": list(range(1, 2002))}])
    assert "an axis may have at most 1000" in _refused(tmp_path, yaml.safe_dump(many), capsys)
    product = _spec(space=[{"engine": "sim", "max_num_seqs": list(range(1, 201)),
                            "max_num_tokens": list(range(1000, 1200))}])
    assert "expands to 40,000 trials" in _refused(tmp_path, yaml.safe_dump(product), capsys)


def test_a_level_beyond_the_open_file_limit_is_refused(tmp_path, capsys):
    spec = _spec()
    spec["workload"]["concurrency"] = [1, 100_000]
    err = _refused(tmp_path, yaml.safe_dump(spec), capsys)
    assert "open files" in err and "ulimit -n" in err


def test_a_real_engine_with_a_missing_model_path_is_refused(tmp_path, capsys):
    spec = _spec(model={"path": "/nonexistent/model"},
                 space=[{"engine": "vllm", "cuda_graphs": [False]}])
    err = _refused(tmp_path, yaml.safe_dump(spec), capsys)
    assert "/nonexistent/model" in err and "does not exist" in err


_IDENT = st.text(string.ascii_lowercase + "_", min_size=3, max_size=12)
_JUNK = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) |
                     st.text(max_size=20) | st.integers(-10**6, -1),
                     lambda kids: st.lists(kids, max_size=4) |
                     st.dictionaries(_IDENT, kids, max_size=3), max_leaves=8)


@st.composite
def malformed(draw) -> str:
    """A valid spec broken in one way that can never be valid."""
    spec = _spec()
    how = draw(st.sampled_from(["unknown_field", "bad_value", "broken_yaml", "duplicate",
                                "bad_name", "not_a_mapping"]))
    if how == "unknown_field":
        key = draw(_IDENT.filter(lambda k: k not in spec and k not in {
            "description", "cluster", "model", "hardware", "workload", "slo", "search",
            "sim", "failure", "space", "name"}))
        spec[key] = draw(_JUNK)
    elif how == "bad_value":  # a negative or non-numeric token count
        spec["workload"]["prompt_tokens"] = draw(st.integers(-10**9, 0) | st.text(
            string.ascii_letters, min_size=1, max_size=10) | st.lists(st.integers(), min_size=1))
    elif how == "broken_yaml":
        return yaml.safe_dump(spec) + "\n" + draw(st.sampled_from(["  - : [", "]]", ": :",
                                                                   "{a: [}", "\t- x"]))
    elif how == "duplicate":
        key = draw(st.sampled_from(sorted(spec)))
        return yaml.safe_dump(spec) + yaml.safe_dump({key: spec[key]})
    elif how == "bad_name":
        spec["name"] = draw(st.text(min_size=1, max_size=30).filter(
            lambda n: any(c not in string.ascii_letters + string.digits + "_.-" for c in n)))
    else:
        return yaml.safe_dump(draw(st.lists(_JUNK, max_size=3) | st.text(max_size=40).filter(
            lambda t: not t.strip().startswith(("{", "-", "[")) and ":" not in t)))
    return yaml.safe_dump(spec)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=malformed())
def test_malformed_specs_exit_2_fast_and_create_nothing(tmp_path_factory, capsys, text):
    _refused(tmp_path_factory.mktemp("spec"), text, capsys)
