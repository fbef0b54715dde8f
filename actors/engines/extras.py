"""Engine-specific options (``extras``): one pydantic model per engine, one union of them.

Each adapter's ``extras_model`` subclasses ``Extras`` and names its engine in a literal
``engine`` field; every subclass joins ``AnyExtras``, a union discriminated on ``engine``.
A trial's ``extras`` travel as a plain mapping (its hash is the trial key); they are typed
by ``parse_extras`` when the spec is loaded (every combination of a space entry's extras:
``check_extras``) and again where an adapter reads them (``EngineAdapter.extras``), so an
adapter never reads an unchecked string key.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = ["Extras", "parse_extras", "check_extras", "extras_union"]

_MODELS: dict[str, type[Extras]] = {}  # engine -> its extras model, filled by subclassing
_UNION: list[TypeAdapter[Any]] = []  # the union's adapter, rebuilt when a model joins


class Extras(BaseModel):
    """Base of an adapter's ``extras_model``: frozen, unknown keys refused, types strict
    (an int option takes no bool or string, a float option takes an int). A subclass
    declares ``engine: Literal["<name>"] = "<name>"`` (the union's tag) and its options,
    each optional (``None``: not set); a field validator may refuse a value with a
    ``ValueError`` whose text completes the sentence ``extras.<key> ...``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    #: the engine whose options these are (set by each subclass's ``engine`` default)
    engine_name: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields.get("engine")
        if field is None or not isinstance(field.default, str):
            raise TypeError(f"{cls.__name__} must declare engine: Literal[...] = '<name>'")
        cls.engine_name = field.default
        _MODELS[field.default] = cls
        _UNION.clear()

    @classmethod
    def of(cls, extras: Mapping[str, Any]) -> Self:
        """A trial's ``extras`` typed as this model (``parse_extras``)."""
        value = parse_extras(cls.engine_name, extras)
        assert isinstance(value, cls)
        return value

    def options(self) -> dict[str, Any]:
        """The options that are set, by name (the tag left out)."""
        return self.model_dump(exclude={"engine"}, exclude_none=True)


def extras_union() -> TypeAdapter[Any]:
    """``AnyExtras``: the union of every engine's model, discriminated on ``engine``."""
    if not _UNION:
        models = tuple(_MODELS.values())
        union: Any = models[0] if len(models) == 1 else typing.Union[models]  # noqa: UP007
        _UNION.append(TypeAdapter(Annotated[union, Field(discriminator="engine")]))
    return _UNION[0]


def parse_extras(engine: str, extras: Mapping[str, Any]) -> Extras:
    """``extras`` typed as ``engine``'s model; ``ValueError`` naming ``extras.<key>``."""
    if "engine" in extras:
        raise ValueError("extras.engine is not an option: the entry's engine names it")
    if engine not in _MODELS:
        raise ValueError(f"engine {engine!r} has no extras model")
    try:
        value = extras_union().validate_python({"engine": engine, **extras})
    except ValidationError as err:
        raise _sentence(engine, err) from None
    assert isinstance(value, Extras)
    return value


def check_extras(engine: str, extras: Mapping[str, list[Any]]) -> None:
    """Type every combination of a space entry's extras (``parse_extras``)."""
    keys = sorted(extras)
    for combo in itertools.product(*(extras[k] for k in keys)):
        parse_extras(engine, dict(zip(keys, combo)))


def _sentence(engine: str, err: ValidationError) -> ValueError:
    """pydantic's first error as one sentence naming ``extras.<key>``."""
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    e = errors[0]
    loc = [str(part) for part in e["loc"]]
    key = ".".join(loc[1:] if loc and loc[0] == engine else loc) or "?"
    fields = {k: f for k, f in _MODELS[engine].model_fields.items() if k != "engine"}
    if e["type"] == "extra_forbidden":
        allowed = ", ".join(sorted(fields)) or "none"
        return ValueError(f"extras.{key} is not an option of engine {engine!r} "
                          f"(allowed: {allowed})")
    if e["type"] == "value_error":  # a field validator's own sentence
        return ValueError(f"extras.{key} {e['msg'].removeprefix('Value error, ')}")
    if e["type"].endswith("_type") and key in fields:
        return ValueError(f"extras.{key} must be {_type_name(fields[key].annotation)}, "
                          f"got {e['input']!r}")
    return ValueError(f"extras.{key}: {e['msg'][:1].lower()}{e['msg'][1:]}, "
                      f"got {e['input']!r}")


def _type_name(annotation: Any) -> str:
    """``int | None`` -> "int"; ``int | str | None`` -> "int or str"."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        names = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(names)
    return getattr(annotation, "__name__", str(annotation))
