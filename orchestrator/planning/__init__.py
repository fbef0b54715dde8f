"""From a spec to the trials to run, and what to expect of them.

- ``plan``: expand each space entry into ``TrialConfig``s, prune the infeasible with a
  reason (``PlannedTrial``).
- ``feasibility``: the pruning rules (heads vs TP, GPUs per node, precision vs compute
  capability, memory, the engine's own).
- ``forecast``: ``plan --predict``: the sim's numbers per trial and the sweep's duration.
- ``capacity``: KV capacity by admission policy (requests that run, wait or are rejected).
- ``search``: which trial next (grid, Optuna ask/tell), told each result.
"""
