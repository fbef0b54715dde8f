"""The applied config: what a server says it runs with, read from the server itself.

``EngineAdapter.applied`` folds a server's log events into one ``AppliedConfig``;
``EngineAdapter.verify`` compares it with the trial that was asked for. The driver reads
only the common fields, in one vocabulary for every engine; whatever else an engine's
log states (raw flag values, timings, backend names) stays in ``facts`` under the
adapter's own names, for the record and for that adapter's ``verify``.

Reading never fails on an old record: a flat dict (how ledgers before this model wrote
it, and how adapters collect facts) is split into the common fields and ``facts``, and a
value of the wrong type for a common field is kept as a fact rather than refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

__all__ = ["AppliedConfig", "Fact"]

Fact = str | int | float | bool | None


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}  # one per common field, built on first use


def _adapter(name: str, annotation: Any) -> TypeAdapter[Any]:
    if name not in _ADAPTERS:
        _ADAPTERS[name] = TypeAdapter(annotation)
    return _ADAPTERS[name]


class AppliedConfig(BaseModel):
    """Settings the server reports it applied (None: its log did not say).

    - ``version``: the engine's version as the server prints it.
    - ``device``: ``GPU`` or ``CPU``, where the server says the model runs.
    - ``tp``, ``weights``, ``kv_dtype`` (servesweep's precision names: bf16, fp16, fp8,
      auto), ``cuda_graphs``, ``graph_max_batch``, ``max_num_seqs``, ``max_num_tokens``,
      ``max_model_len``: the trial's axes as the server applied them.
    - ``block_size``, ``kv_pool_tokens``, ``kv_pool_blocks``: the KV cache pool.
    - ``facts``: everything else, engine-specific, under the adapter's names.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str | None = None
    device: str | None = None
    tp: int | None = None
    weights: str | None = None
    kv_dtype: str | None = None
    cuda_graphs: bool | None = None
    graph_max_batch: int | None = None
    max_num_seqs: int | None = None
    max_num_tokens: int | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    kv_pool_tokens: int | None = None
    kv_pool_blocks: int | None = None
    facts: dict[str, Fact] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split_flat(cls, data: Any) -> Any:
        """A flat dict of facts -> the common fields plus ``facts`` (see the module doc)."""
        if not isinstance(data, dict):
            return data
        common = {k: f for k, f in cls.model_fields.items() if k != "facts"}
        facts: dict[str, Any] = dict(data.get("facts") or {})
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "facts":
                continue
            field = common.get(key)
            if field is None or field.annotation is None:
                facts[key] = value if isinstance(value, str | int | float | bool) or \
                    value is None else str(value)
                continue
            try:
                out[key] = _adapter(key, field.annotation).validate_python(value)
            except ValidationError:
                facts[key] = str(value)  # the server said something we cannot type: keep it
        out["facts"] = facts
        return out

    @classmethod
    def from_facts(cls, facts: dict[str, Any]) -> AppliedConfig:
        """The adapter's folded facts, split into the common fields and ``facts``."""
        return cls.model_validate(facts)

    def get(self, name: str, default: Any = None) -> Any:
        """A common field when the server stated it, else the fact of that name."""
        if name != "facts" and name in type(self).model_fields:
            value = getattr(self, name)
            return default if value is None else value
        return self.facts.get(name, default)

    def flat(self) -> dict[str, Fact]:
        """Every stated setting in one flat mapping (common fields first): for MLflow
        params and the report."""
        out: dict[str, Fact] = {k: v for k, v in self.model_dump(exclude={"facts"}).items()
                                if v is not None}
        out.update(self.facts)
        return out

    def __bool__(self) -> bool:
        return bool(self.flat())
