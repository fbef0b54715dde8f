"""The driver: from a spec to a decision. Subpackages in the order data moves:

- ``spec``: the YAML a user writes (``SweepSpec``), validated, with the engines' rules.
- ``planning``: expand the space into trials and prune the infeasible (``plan``,
  ``feasibility``), the performance model's forecast (``forecast``), KV capacity by
  admission policy (``capacity``), which trial next (``search``: grid, Optuna).
- ``execution``: the sweep on Ray: ``controller`` (the step loop), ``trial`` (one trial's
  state machine), ``failures`` (what Ray raised, by cause), ``progress``, ``runner``.
- ``results``: where results go and what they say: ``ledger`` (the source of truth),
  ``tracking`` (MLflow, a view of it, rebuilt by ``sync``), ``outbox`` (MLflow written off
  the sweep's path), ``analysis`` (winners, crossovers, Pareto),
  ``report``, ``calibrate`` (fit the sim to measurements).
- ``commands``: the ``servesweep`` CLI, one module per command (``cli`` wires them).

``errors`` (exit codes and the errors that carry them) is shared by all. Layers, checked
by ``make lint`` (tests/unit/test_layers.py): commands -> execution -> results ->
planning -> spec -> errors; the orchestrator may import ``actors``, never the reverse.
"""
