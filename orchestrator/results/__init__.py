"""Where results go and what they say.

- ``ledger``: the append-only JSONL per sweep, the only source of truth.
- ``tracking``: ``Tracker``, MLflow as a view of the ledger (parent run per sweep,
  nested run per trial).
- ``analysis``: winners per level, margins, crossovers, the Pareto front (pandas).
- ``report``: text, JSON and plots of a sweep; the winners' export.
- ``calibrate``: fit the sim's profile factors to measured trials.
"""
