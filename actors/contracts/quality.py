"""Accuracy beside speed: what a quality run measures, and what it found.

A quality run happens after a trial's levels, on the same warm server (``actors.quality``):

- ``QualityTask``: one lm-evaluation-harness task, greedy, local data only (a task YAML in
  ``include_path`` with ``dataset_path: json`` and ``data_files`` relative to that folder,
  or a built-in task whose dataset the user put in the local datasets cache);
- ``AgreementSpec``: agreement with the reference config's greedy continuations of a fixed,
  seeded prompt set (any model, no task needed).

``QualityResult`` keeps every question's score (``TaskScore.per_question``, in ``doc_ids``
order) and every prompt's continuation (``Agreement.continuations``), so deltas against the
reference are paired over the same questions (``orchestrator.planning.quality``).
"""

from __future__ import annotations

import enum

from pydantic import Field, model_validator

from actors.contracts.config import Frozen, PosInt


class QualityStatus(enum.StrEnum):
    """Whether a trial's quality was measured."""

    MEASURED = "measured"
    NOT_MEASURED_SIM = "not_measured_sim"  # the sim has no accuracy
    FAILED = "failed"  # the harness or the agreement probe failed: the message says why


class GateOn(enum.StrEnum):
    """Which measurement ``quality.max_drop`` applies to."""

    TASK = "task"  # points of the task's score (0-100)
    AGREEMENT = "agreement"  # a share of prompts whose greedy continuation differs (0-1)


class QualityTask(Frozen):
    """An lm-evaluation-harness task, run greedy against the trial's endpoint."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    #: a folder of task YAMLs (relative: to the spec's folder); lm-eval runs with it as its
    #: working directory, so a YAML's ``data_files`` may be relative to it
    include_path: str | None = None
    limit: PosInt | None = None  # the first N questions; None: all
    metric: str = "exact_match"
    filter: str = "strict-match"  # the filter whose score is compared and gated
    num_fewshot: int | None = Field(default=None, ge=0)
    #: ``local-completions`` (False) or ``local-chat-completions`` with the chat template
    chat: bool = False
    max_gen_toks: PosInt | None = None
    concurrency: PosInt = 4  # requests lm-eval keeps in flight


class AgreementSpec(Frozen):
    """A fixed prompt set of seeded token ids; each config's greedy continuations are
    compared with the reference's, and the reference's continuation is scored by each
    config (prompt logprobs) where the server returns them."""

    prompts: PosInt = Field(default=32, le=4096)
    prompt_tokens: PosInt = Field(default=32, le=8192)
    output_tokens: PosInt = Field(default=32, le=4096)
    seed: int = 0


class QualitySpec(Frozen):
    """The spec's ``quality:`` section. ``reference`` picks the config every delta is paired
    against (TrialConfig fields, e.g. ``{weights: bf16, kv_dtype: auto}``; empty: 16-bit
    weights, auto KV cache, the engine's defaults; see ``planning.quality``). ``max_drop``
    gates: points of the task score (``gate_on: task``) or a share of prompts
    (``agreement``). A drop whose 95% interval lies wholly above it is rejected; one whose
    interval straddles it is "quality unproven" and may win only with ``allow_unproven``."""

    task: QualityTask | None = None
    agreement: AgreementSpec | None = None
    reference: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    max_drop: float | None = Field(default=None, gt=0)
    gate_on: GateOn | None = None  # default: task when there is one, else agreement
    allow_unproven: bool = False
    timeout_s: float = Field(default=1800, gt=0)
    #: the context (prompt + answer, tokens) every server keeps room for, so the quality
    #: run is not cut short by a context sized for the workload alone
    context_tokens: PosInt = 1024
    #: the lm-eval executable (default: ``lm_eval`` beside the engine's ``launch.python``,
    #: else on PATH)
    lm_eval: str | None = None

    @model_validator(mode="after")
    def _something_to_measure(self) -> QualitySpec:
        if self.task is None and self.agreement is None:
            raise ValueError("quality needs a task (lm-evaluation-harness) or agreement "
                             "(e.g. agreement: {prompts: 32}), or both")
        gate = self.gate
        if gate is GateOn.TASK and self.task is None:
            raise ValueError("quality.gate_on: task, but there is no quality.task")
        if gate is GateOn.AGREEMENT and self.agreement is None:
            raise ValueError("quality.gate_on: agreement, but there is no quality.agreement")
        if (self.max_drop is not None and gate is GateOn.AGREEMENT
                and self.max_drop >= 1):
            raise ValueError("quality.max_drop on agreement is a share of prompts (0-1), "
                             f"got {self.max_drop:g}")
        a = self.agreement
        if a is not None and a.prompt_tokens + a.output_tokens > self.context_tokens:
            raise ValueError(f"quality.agreement: {a.prompt_tokens} + {a.output_tokens} "
                             f"tokens exceed quality.context_tokens ({self.context_tokens})")
        if self.max_drop is not None and gate is GateOn.TASK and self.max_drop >= 100:
            raise ValueError("quality.max_drop on a task is in points (0-100), "
                             f"got {self.max_drop:g}")
        return self

    @property
    def gate(self) -> GateOn:
        if self.gate_on is not None:
            return self.gate_on
        return GateOn.TASK if self.task is not None else GateOn.AGREEMENT


class QualityRequest(Frozen):
    """What the driver hands the node for one quality run (typed across the Ray seam)."""

    base_url: str  # the server's root, e.g. http://127.0.0.1:8000
    model: str  # the served model name
    tokenizer_dir: str | None = None
    model_dir: str | None = None  # the served weights' folder, for ``model_fingerprint``
    task: QualityTask | None = None
    include_path: str | None = None  # absolute, on the node
    agreement: AgreementSpec | None = None
    vocab_size: int = 32000
    #: the reference's continuations, one per prompt (None: this trial is the reference)
    reference_continuations: list[list[int]] | None = None
    reference_logprobs: list[list[float]] | None = None  # the reference's, of its own
    lm_eval: str = "lm_eval"
    out_dir: str  # where lm-eval writes its results and samples (the trial's folder)
    timeout_s: float = 1800
    api_key: str | None = None


class TaskScore(Frozen):
    """One task's score: the share of questions right, with each question's score."""

    task: str
    metric: str
    filter: str
    n: int
    score: float  # 0-1
    stderr: float  # of the score (binomial), 0-1
    doc_ids: list[int]
    per_question: list[float]  # each question's score, 0-1, in doc_ids order
    wall_s: float
    argv: list[str] = Field(default_factory=list)


class Agreement(Frozen):
    """Greedy continuations of the prompt set, and (not for the reference) how they agree
    with the reference's."""

    n: int
    continuations: list[list[int]]
    identical: list[bool] | None = None  # per prompt; None: this is the reference
    first_divergence: list[int] | None = None  # per prompt: the first differing position
    identical_share: float | None = None
    mean_first_divergence: float | None = None
    #: mean |logprob(config) - logprob(reference)| over the reference's continuation tokens
    #: (None: the server returns no prompt logprobs)
    logprob_mad: float | None = None
    reference_logprobs: list[list[float]] | None = None  # this server's, of the reference's
    wall_s: float = 0.0


class QualityResult(Frozen):
    """A trial's quality run (``None`` on a trial result: the spec asked for none)."""

    status: QualityStatus
    message: str = ""
    task: TaskScore | None = None
    agreement: Agreement | None = None
    wall_s: float = 0.0
    #: the weights measured (``actors.quality.fingerprint``); None: not a local folder, or
    #: a result from before fingerprints
    model_fingerprint: str | None = None


class Gate(enum.StrEnum):
    """A config's standing against ``quality.max_drop`` (``orchestrator.planning.quality``)."""

    REFERENCE = "reference"  # the config every delta is paired against
    PASSED = "passed"  # the drop's 95% interval lies wholly at or below max_drop
    UNPROVEN = "unproven"  # the interval straddles max_drop
    REJECTED = "rejected"  # the interval lies wholly above max_drop
    NOT_MEASURED = "not_measured"  # the sim, a failed quality run, no reference to pair with
    UNGATED = "ungated"  # measured, and the spec sets no max_drop


class QualityVerdict(Frozen):
    """A trial's quality against the reference, decided once when the trial finishes.

    ``unit`` is ``points`` (a task's score, 0-100) or ``share`` (agreement: the share of
    prompts whose greedy continuation differs from the reference's). ``drop`` is the
    reference's score minus this config's, paired over the same questions, with its 95%
    interval ``drop_lo``..``drop_hi`` (paired bootstrap) and McNemar's exact p-value where
    every score is 0 or 1."""

    gate: Gate
    measure: GateOn
    unit: str
    reference_key: str = ""
    score: float | None = None
    stderr: float | None = None
    reference_score: float | None = None
    drop: float | None = None
    drop_lo: float | None = None
    drop_hi: float | None = None
    p_value: float | None = None
    n: int = 0
    max_drop: float | None = None
    allow_unproven: bool = False
    note: str = ""

    @property
    def significant(self) -> bool | None:
        """Whether the drop differs from zero at 95% (None: nothing to pair)."""
        if self.drop_lo is None or self.drop_hi is None:
            return None
        return self.drop_lo > 0 or self.drop_hi < 0

    @property
    def blocks(self) -> bool:
        """Whether it keeps the config from winning."""
        if self.gate is Gate.REJECTED:
            return True
        return (self.gate in (Gate.UNPROVEN, Gate.NOT_MEASURED) and self.max_drop is not None
                and not self.allow_unproven)
