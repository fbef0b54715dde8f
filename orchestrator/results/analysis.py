"""Winners per level, crossovers and the Pareto front (pandas).

Winner at a level: among the levels that may win there (``planning.eligibility``: valid,
verified unless ``workload.trust_usage``, not ``sim_behind``, meeting the spec's SLOs), the
config (identity: its engine settings) with the best value of the objective; a config the
space repeats (``repeat: N``, the server restarted each time) counts with the median of its
repeats. Where none may win, the note counts each reason with its fix. The margin to the
runner-up is reported and called "within noise" when it is under the noise band: the
spec's ``noise_band``, or the noise measured where it is larger (the spread between
restarts of a repeated config, the spread of rounds on one warm server). A crossover is
a pair of adjacent levels whose winners differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from actors.contracts.results import TrialResult
from actors.contracts.traffic import Level
from orchestrator.planning.eligibility import Ineligible, why_not
from orchestrator.planning.regimes import level_objective
from orchestrator.spec import SLO
from orchestrator.spec.search import Objective

__all__ = ["levels_frame", "Winner", "Crossover", "winners", "crossovers", "pareto_front",
           "level_keys"]

_METRICS = ("output_tok_s", "total_tok_s", "requests_s", "ttft_p50_ms", "ttft_p90_ms",
            "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "e2e_p50_ms",
            "e2e_p99_ms", "round_spread", "goodput_tok_s", "slo_met")


def levels_frame(results: list[TrialResult], objective: Objective = Objective.OUTPUT_TOK_S,
                 slo: SLO | None = None, trust_usage: bool = False) -> pd.DataFrame:
    """One row per (trial, level) with status, flags and metrics; ``level`` is the level's
    key (``c=8``, ``rate=4/s``), ``level_order`` sorts them, ``workload`` is the trial's
    workload fingerprint (empty: recorded before fingerprints); ``score`` is the
    level's value of the spec's ``objective`` (``planning.regimes.level_objective``);
    ``why_not`` the reasons it may not win (``planning.eligibility``, comma-joined; empty:
    it may), judged against ``slo`` when one is given."""
    rows = []
    for r in results:
        for lv in r.levels:
            why = ",".join(why_not(lv, trust_usage=trust_usage, slo=slo,
                                   quality=r.quality_verdict))
            first = r.config.model_copy(update={"repeat": 0})  # the config, not the restart
            row = {"key": r.key, "identity": r.config.identity(), "config": first.key(),
                   "label": first.label(),
                   "engine": r.config.engine,
                   "profile": r.config.profile, "tp": r.config.tp, "trial_status": r.status.value,
                   "concurrency": lv.concurrency, "level": lv.key,
                   "level_order": lv.identity.order, "level_kind": lv.identity.kind.value,
                   "level_value": lv.identity.value, "workload": r.workload_fingerprint,
                   "level_status": lv.status,
                   "flags": ",".join(lv.flags), "running_max": lv.server.running_max,
                   "waiting_max": lv.server.waiting_max, "preemptions": lv.server.preemptions,
                   "why_not": why}
            for m in _METRICS:
                row[m] = getattr(lv.metrics, m) if lv.metrics else None
            toks = [rr.output_tok_s for rr in lv.rounds]
            row["round_min_tok_s"] = min(toks) if toks else None
            row["round_max_tok_s"] = max(toks) if toks else None
            row["score"] = (level_objective(lv.metrics, objective, r.config.tp, slo or SLO())
                            if lv.metrics else None)
            rows.append(row)
    cols = ["key", "identity", "config", "label", "engine", "profile", "tp", "trial_status",
            "concurrency", "level", "level_order", "level_kind", "level_value", "workload",
            "level_status", "flags",
            "running_max", "waiting_max", "preemptions", "why_not", *_METRICS,
            "round_min_tok_s", "round_max_tok_s", "score"]
    return pd.DataFrame(rows, columns=cols)


@dataclass(frozen=True)
class Winner:
    concurrency: int
    key: str | None
    label: str | None
    output_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    runner_up: str | None
    margin: float | None  # (winner - runner-up) / runner-up
    within_noise: bool
    candidates: int
    note: str = ""
    noise_band: float = 0.0  # the band the margin was judged against
    repeats: int = 1  # measurements of the winner at this level (restarts)
    objective: str = Objective.OUTPUT_TOK_S.value  # what ranked the configs
    score: float | None = None  # the winner's value of it (its median over repeats)
    level: str = ""  # the level's key (``c=8``, ``rate=4/s``); empty: ``c=<concurrency>``

    @property
    def name(self) -> str:
        return self.level or f"c={self.concurrency}"


@dataclass(frozen=True)
class Crossover:
    between: tuple[str, str]  # the two levels' keys
    from_label: str
    to_label: str
    within_noise: bool = False  # a winner on either side leads by less than the band


def winners(results: list[TrialResult], slo: SLO, band: float = 0.05,
            trust_usage: bool = False,
            objective: Objective = Objective.OUTPUT_TOK_S) -> list[Winner]:
    """The winner at each level by ``objective`` (the spec's ``search.objective``), among
    valid levels meeting ``slo``; see the module doc."""
    df = levels_frame(results, objective, slo, trust_usage)
    out: list[Winner] = []
    if df.empty:
        return out
    for key in level_keys(df):
        at = df[df["level"] == key]
        c = int(at["concurrency"].iloc[0])
        ok = at[at["why_not"] == ""]
        eligible = _by_identity(ok).sort_values("score", ascending=False)
        works = {w for w in ok["workload"] if w}
        if len(works) > 1:  # never ranked across different request lists or schedules
            out.append(Winner(c, None, None, None, None, None, None, None, None, False, 0,
                              f"workloads differ: {len(works)} fingerprints at {key} "
                              f"({', '.join(sorted(works))}); nothing ranked", level=key))
            continue
        if eligible.empty:
            out.append(Winner(c, None, None, None, None, None, None, None, None, False,
                              0, _no_winner_note(at), level=key))
            continue
        best = eligible.iloc[0]
        runner = eligible.iloc[1] if len(eligible) > 1 else None
        margin = None
        if runner is not None and runner["score"] > 0:
            margin = float(best["score"] / runner["score"] - 1)
        noise = max([band, float(best["noise"])]
                    + ([float(runner["noise"])] if runner is not None else []))
        out.append(Winner(
            concurrency=int(c), key=str(best["key"]), label=str(best["label"]),
            output_tok_s=float(best["output_tok_s"]), ttft_p50_ms=_f(best["ttft_p50_ms"]),
            ttft_p99_ms=_f(best["ttft_p99_ms"]), itl_p50_ms=_f(best["itl_p50_ms"]),
            runner_up=None if runner is None else str(runner["label"]), margin=margin,
            within_noise=bool(margin is not None and margin < noise), candidates=len(eligible),
            note=_join(str(best["flags"]), _excluded_note(at)), noise_band=noise,
            repeats=int(best["repeats"]),
            objective=objective.value, score=_f(best["score"]), level=key))
    return out


def level_keys(df: pd.DataFrame) -> list[str]:
    """The frame's level keys in run order (concurrencies, rates, traces; by value)."""
    if df.empty:
        return []
    firsts = df.drop_duplicates("level")
    return [str(k) for k in firsts.sort_values("level_order")["level"]]


#: reasons that say the measurement, not the config, fell short: a winner beside such
#: levels is named with how many were left out (an SLO miss or an invalid level is a result)
_UNMEASURED = (Ineligible.SIM_BEHIND, Ineligible.UNVERIFIED, Ineligible.LATE_SENDS)


def _excluded_note(at: pd.DataFrame) -> str:
    """"N level(s) left out: sim_behind (fix)" for the levels at one concurrency that
    could not be ranked because their measurement fell short."""
    parts = []
    for reason in _UNMEASURED:
        n = int(at["why_not"].map(lambda w, r=reason: r.value in str(w).split(",")).sum())
        if n:
            parts.append(f"{n} level(s) left out: {reason.value} ({reason.hint()})")
    return "; ".join(parts)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _no_winner_note(at: pd.DataFrame) -> str:
    """Why no level at one concurrency may win: each reason with its count and its fix."""
    counts: dict[Ineligible, int] = {}
    for why in at["why_not"]:
        for reason in filter(None, str(why).split(",")):
            counts[Ineligible(reason)] = counts.get(Ineligible(reason), 0) + 1
    if not counts:
        return "no level measured"
    parts = [f"{n} {reason.value} ({reason.hint()})" for reason, n in counts.items()]
    return "no level may win: " + "; ".join(parts)


def _by_identity(df: pd.DataFrame) -> pd.DataFrame:
    """One row per config (its repeats together; another launch is another config): the
    median repeat's row (by output tok/s), with
    ``repeats`` and ``noise`` (the larger of the spread between restarts and the spread of
    rounds within one, as a fraction of the median)."""
    rows = []
    for _, g in df.groupby("config", sort=False):
        g = g.sort_values("score")
        row = g.iloc[(len(g) - 1) // 2].copy()
        med = float(g["output_tok_s"].median())
        row["output_tok_s"] = med
        row["score"] = float(g["score"].median())
        restart = (float(g["output_tok_s"].max() - g["output_tok_s"].min()) / med
                   if len(g) > 1 and med > 0 else 0.0)
        row["noise"] = max(restart, float(g["round_spread"].fillna(0).max()))
        row["repeats"] = len(g)
        rows.append(row)
    cols = [*df.columns, "noise", "repeats"]
    return pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame(columns=cols)


def _f(x: object) -> float | None:
    return None if x is None or pd.isna(x) else float(x)  # type: ignore[arg-type]


def crossovers(ws: list[Winner]) -> list[Crossover]:
    out = []
    for a, b in zip(ws, ws[1:]):
        if a.key and b.key and a.key != b.key:
            out.append(Crossover((a.name, b.name), a.label or "", b.label or "",
                                 bool(a.within_noise or b.within_noise)))
    return out


def pareto_front(results: list[TrialResult], level: int | str) -> pd.DataFrame:
    """Levels at ``level`` (a key; an integer is a concurrency) that may win
    (``planning.eligibility``, SLOs aside: the front shows the trade-off) not beaten on
    both throughput and TTFT p99."""
    df = levels_frame(results)
    at = df[(df["level"] == Level.parse(level).key)
            & df["why_not"].map(lambda w: set(str(w).split(",")) <= {"", "unverified"})]
    at = at.dropna(subset=["output_tok_s", "ttft_p99_ms"])
    keep = []
    for i, row in at.iterrows():
        dominated = ((at["output_tok_s"] >= row["output_tok_s"])
                     & (at["ttft_p99_ms"] <= row["ttft_p99_ms"])
                     & ((at["output_tok_s"] > row["output_tok_s"])
                        | (at["ttft_p99_ms"] < row["ttft_p99_ms"]))).any()
        if not dominated:
            keep.append(i)
    return at.loc[keep].sort_values("output_tok_s", ascending=False)
