"""The accelerator catalog, and a user's own entries from SERVESWEEP_HARDWARE_FILE."""

from __future__ import annotations

import yaml

from actors.contracts.hardware import get_hardware, hardware_names
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec


def test_catalog_has_the_documented_chips():
    for name in ("h100-sxm", "h200", "b200", "a100-80gb", "l40s", "rtx-5090"):
        hw = get_hardware(name)
        assert hw.hbm_gib > 0 and hw.hbm_tb_s > 0 and hw.tflops["bf16"] > 0
    assert get_hardware("b200").supports("nvfp4")
    assert get_hardware("h100-sxm").supports("fp8") and not get_hardware("h100-sxm").supports(
        "nvfp4")
    assert not get_hardware("a100-80gb").supports("fp8")


def test_user_hardware_file_adds_an_entry_usable_in_a_spec(tmp_path, monkeypatch):
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump({"mi300x": {
        "description": "AMD MI300X", "hbm_gib": 191.5, "hbm_tb_s": 5.3,
        "tflops": {"bf16": 1307, "fp8": 2615}, "link_gb_s": 448, "allreduce_floor_us": 10,
        "compute_capability": "9.4"}}))
    monkeypatch.setenv("SERVESWEEP_HARDWARE_FILE", str(f))
    assert "mi300x" in hardware_names() and "h200" in hardware_names()
    assert parse_spec(minimal_spec(hardware="mi300x")).hardware == "mi300x"
    assert get_hardware("mi300x").hbm_gib == 191.5
