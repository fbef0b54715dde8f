"""The bottom layer: types that cross the driver/actor boundary. Imports nothing else of
the project (checked by tests/unit/test_layers.py).

- ``config``: ``TrialConfig`` (its hash is the trial key), ``Workload``, ``ModelSpec``,
  ``LaunchOptions``, ``SimOptions``, ``SpaceEntry`` and ``SpecRules`` (the engines'
  checks, handed in through validation's context).
- ``results``: ``LevelResult`` (and its metrics, rounds, server observation, client
  health), ``TrialResult``, ``TrialStatus``, ``Capacity``.
- ``applied``: ``AppliedConfig``, what a server reports it runs with (common fields in
  one vocabulary, engine-specific ``facts``), read by its adapter.
- ``slo``: ``SLO``, the latency limits (a level's p99s; each request's, for goodput).
- ``traffic``: the user's traffic: request sources (synthetic lengths, request files),
  the request list every config gets (``RequestPlan``), a level's identity (``Level``:
  ``c=8``, ``rate=4/s``, ``trace x2``), seeded send schedules, ``CapacitySpec``.
- ``metrics``: ``MetricsSample``, an engine's ``ClientProfile`` (metrics names as data) and
  the one parser of metrics endpoints (``read_sample``).
- ``loadspec``: ``LoadSpec``, everything the driver hands the load generator.
- ``kv``: ``KvPool``, the KV cache pool a server's log states (``EngineAdapter.kv_pool``).
- ``reaping``: ``ReapTarget`` (an engine launch to stop on its node) and ``NodeReap``
  (what a node's reaper stopped).
- ``hardware``: the accelerator catalog (``hardware.yaml``, plus a user file).
- ``shapes``: model shapes (presets, or a model's ``config.json``).
- ``model_profile``: ``ModelProfile``, a short profile's fit of one model shape on one
  engine version and GPU (``profile-model`` writes it, ``sim.model_profile`` reads it).
- ``settings``: every ``SERVESWEEP_*`` environment variable (``settings()``), and the
  engine marker's name.
- ``secrets``: secrets told by name or by value (``secret_reason``), so a spec that would
  store one is refused with the ``${NAME}`` form as the fix.
- ``diskspace``: a full disk (``ENOSPC``, ``EDQUOT``, ``EROFS``) told from a trial's own
  failure, through Ray's wrappers, and the room left on a path.
"""
