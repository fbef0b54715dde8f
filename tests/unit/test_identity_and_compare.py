"""Config identity vs trial key (launch labels, repeats), the noise band from repeats, and
`servesweep compare` over the real H200 sweeps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from actors.contracts.config import TrialConfig
from actors.contracts.results import TrialResult
from orchestrator.commands.cli import main
from orchestrator.planning.plan import plan_sweep
from orchestrator.results.analysis import winners
from orchestrator.results.compare import Verdict, compare_sweeps
from orchestrator.results.events import Scheduled
from orchestrator.results.ledger import Ledger
from orchestrator.spec import SLO, load_spec, parse_spec
from tests.conftest import FIXTURES, ROOT

pytestmark = pytest.mark.unit

SWEEP = FIXTURES / "h200-sweeps" / "h200-vllm-20261129-175156-fa2a"


def _results() -> list[TrialResult]:
    return list(Ledger(SWEEP).results().values())


def _scaled(r: TrialResult, factor: float, repeat: int = 0) -> TrialResult:
    """``r`` with every level's output tok/s times ``factor`` (another restart or build)."""
    levels = [lv.model_copy(update={"metrics": lv.metrics.model_copy(update={
        "output_tok_s": lv.metrics.output_tok_s * factor})}) for lv in r.levels]
    cfg = r.config.model_copy(update={"repeat": repeat})
    return r.model_copy(update={"levels": levels, "config": cfg, "key": cfg.key()})


def test_keys_of_existing_sweeps_are_unchanged():
    """A trial without launch label or repeat keeps the key its ledger recorded."""
    keys = [ev.key for ev in Ledger(SWEEP).events() if isinstance(ev, Scheduled)]
    configs = [TrialConfig.model_validate(ev.config) for ev in Ledger(SWEEP).events()
               if isinstance(ev, Scheduled)]
    assert keys and [c.key() for c in configs] == keys
    c = configs[0]
    assert c.identity() == c.model_copy(update={"launch_label": "b", "repeat": 2}).identity()
    assert len({c.key(), c.model_copy(update={"launch_label": "b"}).key(),
                c.model_copy(update={"repeat": 1}).key()}) == 3


SPEC = """
name: ident
model: {{path: /models/tiny}}
hardware: cpu
workload: {{prompt_tokens: 16, output_tokens: 4, concurrency: [1]}}
space:
  - {{engine: vllm, cuda_graphs: false, launch: {{python: /opt/vllm-a/bin/python}}{a}}}
  - {{engine: vllm, cuda_graphs: false, launch: {{python: /opt/vllm-b/bin/python}}{b}}}
  - {{engine: vllm, cuda_graphs: false, launch: {{python: /opt/vllm-b/bin/python}}}}
"""


def _spec(text: str):
    return parse_spec(yaml.safe_load(text))


def test_entries_differing_only_in_launch_are_two_labelled_trials(tmp_path):
    planned = plan_sweep(_spec(SPEC.format(a="", b="")))
    assert len(planned) == 2  # the third entry repeats the second: one trial
    assert [p.config.launch_label for p in planned] == ["/opt/vllm-a/bin/python",
                                                        "/opt/vllm-b/bin/python"]
    assert planned[0].config.identity() == planned[1].config.identity()
    assert planned[0].config.key() != planned[1].config.key()
    named = plan_sweep(_spec(SPEC.format(a=", label: old", b=", label: new")))
    # labelled entries are apart already: the unlabelled third keeps the plain key
    assert [p.config.launch_label for p in named] == ["old", "new", None]


def test_repeat_expands_restarts_of_one_config():
    spec = _spec(SPEC.format(a=", repeat: 3", b="").replace(
        "  - {engine: vllm, cuda_graphs: false, launch: {python: /opt/vllm-b/bin/python}}\n", "",
        2))
    planned = plan_sweep(spec)
    assert [p.config.repeat for p in planned] == [0, 1, 2]
    assert len({p.config.key() for p in planned}) == 3
    assert len({p.config.identity() for p in planned}) == 1
    with pytest.raises(Exception, match="repeat"):
        _spec(SPEC.format(a=", repeat: 0", b=""))


def test_winner_takes_the_median_of_repeats_and_their_spread_widens_the_band():
    a, b = _results()
    base = winners([a, b], SLO())
    assert all(not w.within_noise or w.margin < 0.05 for w in base)
    # b measured three times: +6% on its median, but its restarts spread by 12%
    repeats = [_scaled(b, f * (a.levels[0].metrics.output_tok_s /
                               b.levels[0].metrics.output_tok_s), i)
               for i, f in enumerate((1.00, 1.06, 1.12))]
    ws = winners([a, *repeats], SLO(), band=0.05)
    w1 = ws[0]
    assert w1.label == b.config.label() and w1.repeats == 3
    assert w1.margin == pytest.approx(0.06, abs=0.002)
    assert w1.noise_band == pytest.approx(0.12 / 1.06, abs=0.002)
    assert w1.within_noise is True  # +6% is inside the 11% the restarts showed
    assert all(isinstance(w.within_noise, bool) for w in ws)


def test_compare_matches_by_identity_and_judges_against_the_noise_band():
    spec = load_spec(SWEEP / "spec.yaml")
    a, b = _results()
    faster = _scaled(a, 1.20).model_copy(update={"config": a.config.model_copy(
        update={"launch_label": "new-build"})})
    same = _scaled(b, 1.01)
    cmp = compare_sweeps(spec, [a, b], "A", spec, [faster, same], "B")
    by = {(x.label.split(" [")[0], x.level): x for x in cmp.levels}
    assert {x.verdict for x in cmp.levels if x.identity == a.config.identity()} == \
        {Verdict.FASTER}
    assert {x.verdict for x in cmp.levels if x.identity == b.config.identity()} == \
        {Verdict.WITHIN_NOISE}
    x = by[(a.config.label(), "c=1")]
    assert x.change == pytest.approx(0.20) and x.band >= 0.05
    # per regime: the geometric mean over both configs, +10.1%, beyond the 5% band
    assert [r.verdict for r in cmp.regimes] == [Verdict.FASTER] * 4
    assert cmp.regimes[0].change == pytest.approx((1.2 * 1.01) ** 0.5 - 1)
    slower = compare_sweeps(spec, [a, b], "A", spec, [_scaled(a, 0.7), _scaled(b, 0.8)], "B")
    assert {r.verdict for r in slower.regimes} == {Verdict.SLOWER}
    json.dumps(slower.to_json())  # serialisable as it is


def test_compare_command_text_json_and_page(state_home, capsys):
    import shutil

    for d in (FIXTURES / "h200-sweeps").iterdir():
        if d.is_dir():
            shutil.copytree(d, state_home / "sweeps" / d.name)
    # no config in common: nothing to compare, said and refused (it used to print "0 configs")
    assert main(["compare", "h200-vllm-2", "h200-vllm-b", "--json"]) == 2
    assert "no config in common" in capsys.readouterr().err
    assert main(["compare", "h200-vllm-2", "h200-vllm-2"]) == 0
    out = capsys.readouterr().out
    assert "within noise" in out and "faster" not in out.split("Per config")[1]
    page = next((state_home / "sweeps").glob("h200-vllm-2*/report/compare-*.html"))
    assert "<table" in page.read_text()


def test_compare_refuses_different_work_unless_forced_and_then_marks_every_figure(
        state_home, capsys):
    import shutil

    a = state_home / "sweeps" / SWEEP.name
    shutil.copytree(SWEEP, a)
    b = state_home / "sweeps" / "h200-vllm-longer-20261203-000000-0000"
    shutil.copytree(SWEEP, b)
    spec = yaml.safe_load((b / "spec.yaml").read_text())
    spec["workload"]["output_tokens"] = 64
    (b / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["compare", a.name, b.name]) == 2
    err = capsys.readouterr().err
    assert "workload.output_tokens: 256 in A, 64 in B" in err and "--force" in err
    assert main(["compare", a.name, b.name, "--force", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workloads_differ"] == ["workload.output_tokens: 256 in A, 64 in B"]
    assert main(["compare", a.name, b.name, "--force"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WORKLOADS DIFFER")
    rows = [ln for ln in out.splitlines() if "%" in ln and "noise band" not in ln]
    assert rows and all("workloads differ" in ln for ln in rows)  # every figure says so


def test_compare_says_when_a_regimes_winner_changed_and_uses_each_configs_own_band():
    spec = load_spec(SWEEP / "spec.yaml")
    a, b = _results()
    wa = winners([a, b], SLO())[0]  # at c=1
    loser = b if wa.key == a.key else a
    winner = a if loser is b else b
    # B: the loser at c=1 is now 30% faster than it was, the winner unchanged
    cmp = compare_sweeps(spec, [a, b], "A", spec, [winner, _scaled(loser, 1.3)], "B")
    c1 = cmp.regimes[0]
    assert c1.levels == ["c=1"] and c1.winner_changed is True
    assert (c1.winner_a, c1.winner_b) == (winner.config.label(), loser.config.label())
    same = compare_sweeps(spec, [a, b], "A", spec, [a, b], "B")
    assert {r.winner_changed for r in same.regimes} == {False}

    # one config noisy (rounds 30% apart), the other quiet: the regime's band is the mean
    # of their own bands, not the noisy one's for both
    noisy = _scaled(a, 1.12).model_copy(update={"levels": [
        lv.model_copy(update={"metrics": lv.metrics.model_copy(update={"round_spread": 0.30})})
        for lv in _scaled(a, 1.12).levels]})
    cmp = compare_sweeps(spec, [a, b], "A", spec, [noisy, _scaled(b, 1.12)], "B")
    for r in cmp.regimes:  # the noisy config's band is 0.30, the quiet one's about 0.05
        assert r.band < 0.20 and r.band > 0.15, r
        assert r.verdict is Verdict.WITHIN_NOISE  # +12% inside the mean band (about 17.5%)


def test_version_and_a_closed_pipe_exit_quietly():
    exe = [sys.executable, "-m", "orchestrator.commands.cli"]
    v = subprocess.run([*exe, "--version"], capture_output=True, text=True, cwd=ROOT)
    assert v.returncode == 0 and v.stdout.startswith("servesweep ")
    # a reader that closes at once: `servesweep plan ... | head -0`
    p = subprocess.Popen([*exe, "plan", str(ROOT / "search_spaces" / "quickstart.yaml")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None
    p.stdout.close()
    err = p.stderr.read().decode() if p.stderr else ""
    assert p.wait(60) == 0 and "Traceback" not in err and "BrokenPipe" not in err


def test_the_spec_objective_ranks_the_winners():
    """On two H200s TP 2 wins raw throughput at every level; per GPU TP 1 does (issue 19:
    12,836 vs 8,346 tok/s at c=128 is 6,418 vs 8,346 per GPU)."""
    from orchestrator.spec.search import Objective

    tp = list(Ledger(FIXTURES / "h200-sweeps" / "h200x2-vllm-tp-20261129-210729-2782")
              .results().values())
    raw = winners(tp, SLO())
    per_gpu = winners(tp, SLO(), objective=Objective.OUTPUT_TOK_S_PER_GPU)
    assert {w.label.split()[1] for w in raw} == {"tp2"}
    assert {w.label.split()[1] for w in per_gpu} == {"tp1"}
    w = per_gpu[-1]
    assert w.objective == "output_tok_s_per_gpu" and w.score == pytest.approx(w.output_tok_s)
    runner = next(r for r in tp if r.config.tp == 2).level(w.concurrency)
    assert w.margin == pytest.approx(w.score / (runner.metrics.output_tok_s / 2) - 1)
