"""Running a sweep on Ray.

- ``runner``: ``execute``: Ray, the controller, the report files, MLflow through the
  ``TrackingOutbox`` (drained with a bounded wait);
  ``reap_orphans`` (engines of dead drivers).
- ``controller``: ``SweepController``, the explicit step loop over trials.
- ``trial``: ``TrialExecution``, one trial's phases (place, launch, ready, levels,
  observe, stop), each one Ray call in flight.
- ``failures``: what Ray raised, classified by cause (``client_error``, ``node_lost`` ...).
- ``progress``: the human progress lines.
"""
