"""From a spec to the trials to run, and what to expect of them.

- ``plan``: expand each space entry into ``TrialConfig``s, prune the infeasible with a
  reason (``PlannedTrial``).
- ``feasibility``: the pruning rules (heads vs TP, GPUs per node, precision vs compute
  capability, memory, the engine's own).
- ``forecast``: ``plan --predict``: the sim's numbers per trial and the sweep's duration.
- ``capacity``: KV capacity by admission policy (requests that run, wait or are rejected).
- ``search``: which trial next (``make_searcher``), told each result: a package, one module
  per strategy (``base`` the contract, ``grid``, ``study`` for Optuna's samplers, ``guided``,
  ``reference_first``).
- ``params``: ``search.params`` (ranges, conditional and tied fields) applied to the configs.
- ``space``: the planned trials as a typed, conditional Optuna space.
- ``regimes``: a trial's value per load regime (the objective, the SLO violation).
- ``budget``: trials, wall time and GPU-hours spent against the search's budget.
- ``model_view``: the model's predictions as level metrics, and its cross-validated error.
- ``model_error``: the model's error band for a model shape, from committed cross-validation
  or the spec's short profile of the model.
- ``model_profiling``: what ``profile-model`` measures of the user's model (configs, levels).
- ``quality``: the quality reference, paired statistics against it, the gate's verdict.
- ``slo_capacity``: capacity at SLO, probed rate by rate.
"""
