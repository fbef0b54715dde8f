"""The KubeRay CRD schemas kept as fixtures (tests/fixtures/kuberay/), for strict checks."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import FIXTURES

__all__ = ["closed", "load_schema"]


def closed(schema: Any) -> Any:
    """Every object schema with properties closed to unknown fields (strict validation:
    a misspelt key fails instead of being kept as an unknown field)."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(x) for x in schema]
    return schema


def load_schema(name: str) -> Any:
    """``tests/fixtures/kuberay/<name>``, closed."""
    return closed(json.loads((FIXTURES / "kuberay" / name).read_text()))
