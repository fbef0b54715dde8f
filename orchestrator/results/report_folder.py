"""The report folder of a sweep (``<sweep>/report/``): what ``run`` writes at the end and
``servesweep report`` rewrites on demand.

Files, all flat in the folder (the parent MLflow run gets each of them):

- ``index.html``: the page (``page.render_html``), self-contained, opens offline;
- ``report.md``: its Markdown twin, with the charts as ``chart-<name>.svg`` beside it;
- ``report.txt``: the terminal report; ``report.json`` and ``winners.json``: for scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from actors.contracts.results import TrialResult
from orchestrator.planning.plan import plan_sweep
from orchestrator.results.diskfull import report_not_written
from orchestrator.results.events import DriverStarted, Interrupted, Scheduled
from orchestrator.results.ledger import Ledger, atomic_write
from orchestrator.results.page import build_sections, render_html, render_markdown
from orchestrator.results.page_blocks import Section
from orchestrator.results.report import render_text, report_json, winners_export
from orchestrator.spec import SweepSpec

__all__ = ["ReportFolder", "write_report", "unfinished_trials", "SEARCH_SUMMARY"]

#: the searcher's summary lines at the end of a run, in the sweep folder (the report's
#: "Search" section: the best per regime and, for guided, the predictions its stop relied on)
SEARCH_SUMMARY = "search.txt"


@dataclass(frozen=True)
class ReportFolder:
    dir: Path
    html: Path
    markdown: Path
    text: str  # the terminal report

    def files(self) -> list[Path]:
        """What the sweep's parent run keeps: ``records.report_files``."""
        from orchestrator.results.records import report_files

        return report_files(self.dir)


def unfinished_trials(spec: SweepSpec, ledger: Ledger,
                      results: dict[str, TrialResult]) -> tuple[list[str], str | None]:
    """Labels of trials scheduled (or, for a grid, planned and feasible) with no final
    result, and why the last driver stopped early (None when it was not interrupted)."""
    labels: dict[str, str] = {}
    last: DriverStarted | Interrupted | None = None
    for ev in ledger.events():
        if isinstance(ev, Scheduled) and ev.key not in results:
            labels[ev.key] = _label(ev.config, ev.key)
        elif isinstance(ev, DriverStarted | Interrupted):
            last = ev
    if spec.search.kind == "grid":
        for p in plan_sweep(spec):
            key = p.config.key()
            if p.feasible and key not in results:
                labels.setdefault(key, p.config.label())
    reason = last.reason if isinstance(last, Interrupted) else None
    return list(labels.values()), reason


def _label(config: dict[str, object], key: str) -> str:
    from actors.contracts.config import TrialConfig

    try:
        return TrialConfig.model_validate(config).label()
    except ValueError:
        return key


def write_report(spec: SweepSpec, ledger: Ledger, tracking_hint: str = "") -> ReportFolder:
    """Write every file of the report folder from the ledger (atomically, file by file). A
    full disk raises ``DiskFull`` (one line: the ledger is intact, `servesweep report`
    writes the folder again)."""
    try:
        return _write_report(spec, ledger, tracking_hint)
    except OSError as err:
        report_not_written(err, ledger.dir / "report", ledger.sweep_id)  # a full disk
        raise


def _write_report(spec: SweepSpec, ledger: Ledger, tracking_hint: str) -> ReportFolder:
    results = ledger.results()
    ordered = list(results.values())
    unfinished, interrupted = unfinished_trials(spec, ledger, results)
    out = ledger.dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("chart-*.svg"):
        old.unlink()
    sections = build_sections(spec, ordered, ledger.sweep_id, unfinished, interrupted)
    summary = ledger.dir / SEARCH_SUMMARY
    if summary.is_file():  # the searcher's last word: what it found, what it relied on
        sections.append(Section("Search", "search").add(
            *(line.strip() for line in summary.read_text().splitlines() if line.strip())))
    title = f"servesweep report: {ledger.sweep_id}"
    for s in sections:
        for c in s.charts:
            atomic_write(out / f"chart-{c.name}.svg", c.svg)
    atomic_write(out / "index.html", render_html(title, sections))
    atomic_write(out / "report.md", render_markdown(title, sections, chart_prefix="chart-"))
    data = report_json(spec, ordered, ledger.sweep_id)
    data["unfinished"] = unfinished
    data["interrupted"] = interrupted
    atomic_write(out / "report.json", json.dumps(data, indent=1, default=str))
    atomic_write(out / "winners.json",
                 json.dumps(winners_export(spec, ordered), indent=1, default=str))
    text = render_text(spec, ordered, ledger.sweep_id, tracking_hint)
    atomic_write(out / "report.txt", text + "\n")
    return ReportFolder(out, out / "index.html", out / "report.md", text)
