"""The applied config is a typed model: common fields in one vocabulary, engine facts apart,
and old ledgers (a flat dict per trial) still read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.contracts.applied import AppliedConfig
from actors.contracts.messages import Readiness
from actors.contracts.results import TrialResult

pytestmark = pytest.mark.unit

H200 = Path(__file__).parents[1] / "fixtures" / "h200-sweeps"


def test_a_flat_dict_splits_into_common_fields_and_facts():
    a = AppliedConfig.from_facts({"tp": 2, "cuda_graphs": True, "kv_pool_tokens": 1024,
                                  "compile_s": 20.75, "attention_backend": "FLASH_ATTN"})
    assert (a.tp, a.cuda_graphs, a.kv_pool_tokens) == (2, True, 1024)
    assert a.facts == {"compile_s": 20.75, "attention_backend": "FLASH_ATTN"}
    assert a.get("tp") == 2 and a.get("compile_s") == 20.75 and a.get("nope", 7) == 7


def test_round_trip_through_json_is_identity():
    a = AppliedConfig.from_facts({"version": "v0.26.0", "max_model_len": 768, "dtype": "bf16"})
    back = AppliedConfig.model_validate_json(a.model_dump_json())
    assert back == a and back.facts == {"dtype": "bf16"}


def test_a_value_that_cannot_be_typed_is_kept_as_a_fact_not_refused():
    a = AppliedConfig.from_facts({"tp": "auto", "max_num_seqs": "128"})
    assert a.tp is None and a.facts["tp"] == "auto"
    assert a.max_num_seqs == 128  # a number the log printed as text is still a number


def test_it_is_frozen_and_flat_lists_every_stated_setting():
    a = AppliedConfig(tp=1, facts={"graphs_captured": 11})
    with pytest.raises(ValueError):
        a.tp = 2  # type: ignore[misc]
    assert a.flat() == {"tp": 1, "graphs_captured": 11}
    assert not AppliedConfig() and a


def test_messages_and_results_carry_the_model():
    r = Readiness.model_validate({"applied": {"tp": 1, "dtype": "bfloat16"}})
    assert isinstance(r.applied, AppliedConfig) and r.applied.get("dtype") == "bfloat16"


def test_ledgers_written_before_the_model_read_back_typed():
    """The committed H200 ledgers hold the applied config as one flat dict per trial."""
    seen = 0
    for ledger in sorted(H200.glob("*/ledger.jsonl")):
        for line in ledger.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("type") != "trial" or not ev["result"].get("applied"):
                continue
            raw = ev["result"]["applied"]
            if "facts" in raw:
                continue  # written by this model (a later sweep): not the old, flat shape
            r = TrialResult.model_validate(ev["result"])
            assert r.applied.version == raw["version"] and r.applied.tp == raw["tp"]
            assert r.applied.flat() == {k: v for k, v in raw.items() if v is not None}
            seen += 1
    assert seen >= 6
