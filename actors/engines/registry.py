"""Adapters registered by engine name (``engine:`` in a spec)."""

from __future__ import annotations

from actors.engines.base import EngineAdapter

__all__ = ["register", "get_adapter", "adapter_names"]

_REGISTRY: dict[str, EngineAdapter] = {}


def register(cls: type[EngineAdapter]) -> type[EngineAdapter]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def get_adapter(name: str) -> EngineAdapter:
    if name not in _REGISTRY:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(adapter_names())}")
    return _REGISTRY[name]


def adapter_names() -> list[str]:
    return sorted(_REGISTRY)
