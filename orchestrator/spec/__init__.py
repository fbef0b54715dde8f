"""The sweep spec: the YAML a user writes, validated.

- ``model``: ``SweepSpec`` and its sweep-only parts (cluster, SLO, search, failure
  policy), ``load_spec`` / ``parse_spec`` with one line per bad field.
- ``rules``: ``EngineRules``, the engines' checks handed to validation.
- ``model_profiles``: ``sim.model_profile``, a short profile's factors read into
  ``sim.profiles`` when the spec loads.

The parts that cross to the actors live in ``actors.contracts.config``.
"""

from orchestrator.spec.model import (
    SLO,
    ClusterSpec,
    FailurePolicy,
    SearchSpec,
    SweepSpec,
    TrialOrder,
    format_validation_error,
    load_spec,
    parse_spec,
)

__all__ = ["SLO", "ClusterSpec", "FailurePolicy", "SearchSpec", "SweepSpec", "TrialOrder",
           "format_validation_error", "load_spec", "parse_spec"]
