"""Quality runs on a trial's warm server (after its levels): accuracy beside speed.

- ``lmeval``: one lm-evaluation-harness task through its ``local-completions`` (or
  ``local-chat-completions``) model pointed at the trial's endpoint, greedy, local data
  only; every question's score read back from its samples file.
- ``agreement``: greedy continuations of a fixed, seeded prompt set, compared with the
  reference config's, and the reference's continuation scored by this server's prompt
  logprobs.
- ``fingerprint``: ``model_fingerprint``, which weights a run measured (a delta pairs
  the same weights, not only the same path).
- ``runner``: ``run_quality``, both for one ``QualityRequest``; a failure of either is the
  result's status and message, never an exception out of the node.

Statistics against the reference (paired deltas, intervals, the gate) are the driver's
(``orchestrator.planning.quality``).
"""

from actors.quality.runner import run_quality

__all__ = ["run_quality"]
