"""Where results go and what they say.

- ``ledger``: the append-only JSONL per sweep, the only source of truth.
- ``tracking``: ``Tracker``, MLflow as a view of the ledger (parent run per sweep,
  nested run per trial), found by tags and created only if absent; ``trial_record``.
- ``records``: what MLflow should hold for a trial and a sweep (``trial_record``), built
  from the ledger and the trial folder; no MLflow call.
- ``outbox``: ``TrackingOutbox``, the driver's MLflow writes off the sweep's path (a
  background thread that never raises into the sweep; ``sync`` catches up what it missed).
- ``analysis``: winners per level, margins, crossovers, the Pareto front (pandas).
- ``report``: the terminal report and the JSON ones (report, winners).
- ``charts``: the report's charts, matplotlib drawn as inline SVG.
- ``page``: the report page's sections; the self-contained HTML and its Markdown twin.
- ``report_folder``: ``write_report``, every file of ``<sweep>/report/`` from the ledger.
- ``calibrate``: fit the sim's profile factors to measured trials.
"""
