"""What runs on the nodes, and the types the driver and the nodes exchange.

- ``contracts``: the bottom layer: trial config, workload, model and launch options,
  level and trial results, enums of states, the hardware catalog and model shapes.
  It imports nothing else of the project.
- ``engines``: one adapter per engine (``sim``, ``vllm``, ``trtllm``, ``external``):
  argv, log and ``/metrics`` parsing, applied-config checks. Engine knowledge lives here.
- ``engine_host``: the ``EngineHost`` Ray actor (one server process group per trial);
  ``procs``: process groups, markers, stopping; ``proctree``: processes by pid and start
  time, descendants, the child subreaper; ``cgroups``: a cgroup per engine where the
  node allows one; ``reaper``: a node's reaper (a Ray task pinned to the node);
  ``gpus``: the GPU model a trial ran on.
- ``loadgen``: the ``LoadGenerator`` Ray actor: matched-work requests, the count proof,
  levels and their rules.
- ``sim``: servesweep's performance model behind an OpenAI-compatible server.
"""
