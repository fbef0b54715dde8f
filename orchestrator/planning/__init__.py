"""From a spec to the trials to run, and what to expect of them.

- ``plan``: expand each space entry into ``TrialConfig``s, prune the infeasible with a
  reason (``PlannedTrial``).
- ``feasibility``: the pruning rules (heads vs TP, GPUs per node, precision vs compute
  capability, memory, the engine's own).
- ``forecast``: ``plan --predict``: the sim's numbers per trial and the sweep's duration.
- ``capacity``: KV capacity by admission policy (requests that run, wait or are rejected).
- ``search``: which trial next (``make_searcher``), told each result; ``searcher``: the
  ``Searcher`` contract and ``GridSearcher``.
- ``params``: ``search.params`` (ranges, conditional and tied fields) applied to the configs.
- ``space``: the planned trials as a typed, conditional Optuna space.
- ``regimes``: a trial's value per load regime (the objective, the SLO violation).
- ``budget``: trials, wall time and GPU-hours spent against the search's budget.
- ``samplers``: ``StudySearcher``, one Optuna study per regime (grid, random, TPE, NSGA-II).
- ``guided``: ``GuidedSearcher``, ranked by the performance model, recalibrated per trial;
  ``model_view``: the model's predictions as level metrics, and its cross-validated error.
"""
