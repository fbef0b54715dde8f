"""Text of an export: the serve script (argv quoted with ``shlex.join``) and the regime's
README (what was measured, which file is which form, what was left out and why)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from actors.contracts.config import ENV_REF, SECRET_NAME
from actors.engines.deploy import Deployment

__all__ = ["RegimeWinner", "render_script", "render_readme", "ROUND_TRIP"]

#: what the README says of the hardware round trip (the exported command re-measured)
ROUND_TRIP = ("Round trip on real hardware: NOT done. Starting this command by hand on a GPU "
              "node and measuring it with the same workload through the `external` engine "
              "(it should reproduce the winner's throughput within the noise band) needs the "
              "GPU node; no result is recorded for it yet.")


@dataclass(frozen=True)
class RegimeWinner:
    """The config that wins a regime (a named group of levels) and how it was measured."""

    regime: str
    levels: list[str]  # level keys (``c=8``, ``rate=4/s``)
    key: str | None
    label: str | None
    output_tok_s: float | None  # one level: that level's; several: the geometric mean
    per_level: dict[str, dict[str, float | None]] = field(default_factory=dict)
    runner_up: str | None = None
    margin: float | None = None
    within_noise: bool = False
    noise_band: float = 0.0
    note: str = ""


def _env_lines(env: dict[str, str]) -> list[str]:
    out = []
    for name, value in env.items():
        m = ENV_REF.match(value)
        if m is None:
            out.append(f"export {name}={shlex.quote(value)}")
            continue
        ref = m.group(1)
        what = "a secret, never written here" if SECRET_NAME.search(ref) else "from your env"
        out.append(f'export {name}="${{{ref}:?set {ref} ({what})}}"')
    return out


def render_script(dep: Deployment, title: str) -> str:
    """``#!/bin/sh`` that starts the deployed server: env exported, argv via shlex.join."""
    lines = ["#!/bin/sh", f"# servesweep export: {title}", f"# {dep.note}",
             "# Benchmark-only settings were left out: README.md lists each and why.",
             "set -eu"]
    if dep.files:
        lines.append('cd "$(dirname "$0")"  # the files this command reads lie beside it')
    lines += _env_lines(dep.env)
    lines.append("exec " + shlex.join(dep.argv))
    return "\n".join(lines) + "\n"


def _n(x: float | None, spec: str = ",.1f") -> str:
    return "-" if x is None else format(x, spec)


def render_readme(win: RegimeWinner, dep: Deployment | None, files: dict[str, str],
                  facts: dict[str, str]) -> str:
    """The regime's README: ``files`` maps each written file to how it relates to what was
    measured; ``facts``: sweep, workload, engine version, GPU model, hardware."""
    levels = ", ".join(map(str, win.levels))
    out = [f"# Regime {win.regime} (levels {levels})", ""]
    if win.key is None:
        out += [f"No config won this regime: {win.note or 'no valid level'}. Nothing to "
                "deploy.", ""]
        return "\n".join(out)
    verdict = ("within noise" if win.within_noise else "outside the noise band")
    margin = "-" if win.margin is None else f"+{100 * win.margin:.1f}%"
    out += [f"Winner: **{win.label}** (trial `{win.key}`), "
            f"{_n(win.output_tok_s)} output tok/s"
            + (" (geometric mean over the regime's levels)" if len(win.levels) > 1 else ""),
            f"Margin to the runner-up ({win.runner_up or 'none'}): {margin}, {verdict} "
            f"(noise band {100 * win.noise_band:.1f}%).", "", "## What was measured", ""]
    out += [f"- {k}: {v}" for k, v in facts.items()]
    out += ["", "| level | output tok/s | TTFT p99 ms | ITL p50 ms |", "|---|---|---|---|"]
    for c, m in win.per_level.items():
        out.append(f"| {c} | {_n(m.get('output_tok_s'))} | {_n(m.get('ttft_p99_ms'))} | "
                   f"{_n(m.get('itl_p50_ms'), '.2f')} |")
    out += ["", "## Files", "", "| file | what | measured in this form? |", "|---|---|---|"]
    out += [f"| `{name}` | {what} |" for name, what in files.items()]
    if dep is None or not dep.deployable:
        out += ["", "## Nothing to deploy", "", (dep.note if dep else "no adapter") + ".",
                "", "## Round trip", "", ROUND_TRIP, ""]
        return "\n".join(out)
    out += ["", "## The command", "", dep.note + ".", "", "```sh",
            *_env_lines(dep.env), shlex.join(dep.argv), "```", ""]
    if dep.drift:
        out += ["Differences between what the trial ran and what the adapter renders now:", ""]
        out += [f"- {d}" for d in dep.drift] + [""]
    out += ["## Benchmark-only settings left out", "",
            "Settings that served the benchmark, not the server: the sweep's host binding and "
            "drawn port, a max model length the workload implied but the spec did not set, "
            "the per-launch nonce alias, log and cache paths, the benchmark node's offline "
            "switches and interpreter path.", ""]
    out += [f"- `{r.setting}`: {r.why}" for r in dep.removed] or ["- none"]
    if dep.engine_kwargs is None:
        out += ["", f"No Ray Serve LLM / RayService form: {dep.ray_serve_note}."]
    for form in dep.forms:
        out += ["", f"## {form.title}", "", form.note]
    out += ["", "## Round trip", "", ROUND_TRIP, ""]
    return "\n".join(out)
