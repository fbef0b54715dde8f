"""``EngineRules``: what spec validation needs to know of the engines and the sim.

The configuration types (``actors.contracts.config``) import nothing of the project;
``parse_spec`` hands them this object in pydantic's validation context, so an
unknown engine, an engine's own rules for its space and the sim's profiles are
still checked where the field is, with the field's location in the message.
"""

from __future__ import annotations

from actors.contracts.config import SpaceEntry
from actors.engines import adapter_names, get_adapter
from actors.sim.perf import FITTABLE, PROFILES

__all__ = ["EngineRules"]


class EngineRules:
    """``actors.contracts.config.SpecRules`` from the engine registry and the sim."""

    def engine_names(self) -> list[str]:
        return list(adapter_names())

    def check_space(self, entry: SpaceEntry) -> None:
        get_adapter(entry.engine).check_space(entry)

    def sim_profiles(self) -> list[str]:
        return sorted(PROFILES)

    def fittable(self) -> list[str]:
        return list(FITTABLE)
