"""Which numbers of the performance model are fitted and which are physical: written down as
data (``actors.sim.profiles``), and ``calibrate`` moves only the fitted ones."""

from __future__ import annotations

from actors.contracts.hardware import BYTES, Hardware, get_hardware
from actors.contracts.shapes import ModelShape, get_preset
from actors.sim.profiles import ENGINE_FIXED, FITTABLE, FITTED, PHYSICAL, PROFILES, EngineProfile
from orchestrator.results.calibrate import BOUNDS, calibrate, collect_points
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec
from tests.unit.test_calibrate import _measured


def test_every_profile_field_is_either_fitted_or_an_engine_fact():
    fields = set(EngineProfile.model_fields)
    assert FITTED | ENGINE_FIXED == fields
    assert not FITTED & ENGINE_FIXED
    assert set(FITTABLE) == FITTED and len(FITTABLE) == len(FITTED)
    assert set(BOUNDS) == FITTED  # calibrate knows a range for each, and nothing else


def test_physical_constants_are_the_catalogs_and_the_shapes_and_none_is_fitted():
    hw_fields = {f"hardware.{k}" for k in Hardware.model_fields} - {
        "hardware.name", "hardware.description", "hardware.kind", "hardware.compute_capability"}
    shape_fields = {f"shape.{k}" for k in ModelShape.model_fields} - {"shape.name"}
    assert hw_fields | shape_fields | {"BYTES"} == PHYSICAL
    bare = {name.split(".")[-1] for name in PHYSICAL}
    assert not bare & FITTED and not bare & set(EngineProfile.model_fields)


def test_calibrate_moves_fitted_factors_only():
    data = minimal_spec()
    data["workload"] = {"prompt_tokens": 256, "output_tokens": 64, "concurrency": [1, 8]}
    spec = parse_spec(data)
    hw_before = get_hardware(spec.hardware).model_dump()
    shape = get_preset("llama-3.1-8b")
    shape_before = shape.model_dump()
    bytes_before = dict(BYTES)
    profiles_before = {n: p.model_dump() for n, p in PROFILES.items()}
    points = collect_points([_measured(True, spec), _measured(False, spec)])["vllm"]
    fit = calibrate(points, spec, shape, "vllm", max_evals=12)
    assert set(fit.fitted) <= FITTED
    assert get_hardware(spec.hardware).model_dump() == hw_before
    assert shape.model_dump() == shape_before and dict(BYTES) == bytes_before
    assert {n: p.model_dump() for n, p in PROFILES.items()} == profiles_before


def test_a_host_fit_moves_host_scale_and_of_the_host_costs_only_eager_launches_seen_apart():
    from actors.sim.profiles import HOST_TERMS
    data = minimal_spec()
    data["workload"] = {"prompt_tokens": 256, "output_tokens": 64, "concurrency": [1, 8]}
    spec = parse_spec(data)
    shape = get_preset("llama-3.1-8b")
    graphs = collect_points([_measured(True, spec)])["vllm"]
    host = calibrate(graphs, spec, shape, "vllm", max_evals=12, host=True)
    assert "host_scale" in host.varied and not set(HOST_TERMS) & set(host.varied)
    assert all(host.fitted[k] == host.start[k] for k in HOST_TERMS)
    both = collect_points([_measured(True, spec), _measured(False, spec)])["vllm"]
    plain = calibrate(both, spec, shape, "vllm", max_evals=12)
    assert "host_scale" not in plain.varied  # a general fit keeps the host where it is
    host = calibrate(both, spec, shape, "vllm", max_evals=12, host=True)
    # eager and graphs levels of one machine tell its eager launch cost from its host speed
    assert set(HOST_TERMS) & set(host.varied) == {"eager_us_per_layer"}
    assert {"host_scale", "eager_us_per_layer"} <= set(host.varied)
    assert all(host.fitted[k] == host.start[k] for k in HOST_TERMS if k != "eager_us_per_layer")
    held = calibrate(both, spec, shape, "vllm", max_evals=12, host=True,
                     freeze=frozenset({"eager_us_per_layer"}))  # the caller's freeze holds
    assert not set(HOST_TERMS) & set(held.varied)
