"""What a person reads when a command or a spec is wrong (issue 32 item 5): every option
has help, an unknown spec field names the nearest allowed one and all of them, and a YAML
error names the file it is in."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.commands.cli import build_parser
from orchestrator.errors import SpecError
from orchestrator.spec import load_spec, parse_spec

pytestmark = pytest.mark.unit


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
               for a in p._actions
               if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert missing == []


@pytest.mark.parametrize("where,typo,near", [
    ("workload", "warmpu_requests", "warmup_requests"),
    ("space", "tpp", "tp"),
    ("launch", "pyton", "python"),
    ("slo", "ttft_p99", "ttft_p99_ms"),
])
def test_an_unknown_field_names_the_nearest_and_the_allowed_ones(where, typo, near):
    spec = {"name": "x", "model": {"preset": "llama-3.1-8b"},
            "workload": {"prompt_tokens": 8, "output_tokens": 8, "concurrency": [1]},
            "space": [{"engine": "sim"}]}
    if where == "workload":
        spec["workload"][typo] = 2
    elif where == "space":
        spec["space"][0][typo] = 2
    elif where == "launch":
        spec["space"][0]["launch"] = {typo: "x"}
    else:
        spec["slo"] = {typo: 3}
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    text = str(err.value)
    assert f"{typo}: not a field here; did you mean {near!r}? allowed: " in text
    assert "Extra inputs are not permitted" not in text


def test_a_yaml_error_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nworkload: {prompt_tokens: 8\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert f'in "{path}", line 2' in str(err.value) and "<unicode string>" not in str(err.value)


def test_rays_token_auth_line_is_left_to_the_readme_and_its_other_warnings_kept():
    import logging

    from orchestrator.execution.controller import _RAY_AUTH_LOGGER, _said_in_readme

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord(_RAY_AUTH_LOGGER, logging.WARNING, __file__, 1, msg, None,
                                 None)

    assert not _said_in_readme(record(
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled "
        "to opt out."))
    assert _said_in_readme(record("Token authentication is disabled: anyone on the network "
                                  "can run code"))
    security = (__import__("tests.conftest", fromlist=["ROOT"]).ROOT / "docs" /
                "security.md").read_text()
    assert "Token authentication is enabled for\n  this Ray cluster" in security


def test_the_run_header_under_a_budget_states_the_candidates_and_the_budget():
    from orchestrator.commands.run import _header, _to_run
    from tests.conftest import ROOT

    spec = load_spec(ROOT / "search_spaces" / "search-tpe-regimes.yaml")
    assert _header(spec, 128, 120) == ("a tpe search of 128 candidate configs (120 feasible, "
                                       "8 infeasible) that runs at most 8 trials, 1 GPU-h "
                                       "(search.budget)")
    assert _to_run(spec, 120) == 8  # the progress counts to 8, not to 128
    grid = load_spec(ROOT / "search_spaces" / "quickstart.yaml")
    assert _header(grid, 4, 3) == "4 trials (3 to run, 1 infeasible)"
    assert _to_run(grid, 3) == 3
