"""Running a sweep on Ray.

- ``runner``: ``execute``: Ray, the controller, the report files, MLflow through the
  ``TrackingOutbox`` (drained with a bounded wait);
  ``reap_orphans`` (engines of dead drivers on this machine).
- ``controller``: ``SweepController``, the explicit step loop over trials.
- ``cluster``: ``Cluster``, everything the loop asks of Ray (``RayCluster``), and
  ``NodeInfo``.
- ``packing``: which node a trial goes to (``Packer``: best fit, largest tp first, a
  waiting trial keeps its node; GPU type, labels, trials per node).
- ``reaping``: what a sweep started, stopped by a task on each node (``reap_sweep``,
  ``reap_dead_drivers``).
- ``trial``: ``TrialExecution``, one trial's phases (place, launch, ready, levels,
  observe, stop), each one Ray call in flight.
- ``failures``: what Ray raised, classified by cause (``client_error``, ``node_lost`` ...).
- ``progress``: the human progress lines.
- ``cluster_auth``: a cluster that refuses the driver's Ray token, said in one line
  before the sweep folder exists (``check_cluster_auth``).
"""
