"""Secrets are refused by name or by value wherever a spec could store one (issue 28:
``DB_PASS`` and ``CREDENTIALS`` literals were stored in spec.yaml and its MLflow
artifact), and ordinary values pass."""

from __future__ import annotations

import secrets as random_source

import pytest
from pydantic import ValidationError

from actors.contracts.config import LaunchOptions, SpaceEntry, TrialConfig
from actors.contracts.secrets import SECRET_ERROR, secret_reason
from orchestrator.errors import SpecError
from orchestrator.spec import parse_spec

pytestmark = pytest.mark.unit

TOKENS = {  # made up here, shaped as each issuer's
    "hugging face": "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9b",
    "openai": "sk-" + "proj1A2b3C4d5E6f7G8h9I0jK1l2M3n4",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
    "random base64": random_source.token_urlsafe(32),
    "random hex": random_source.token_hex(24),
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_token_by_value_is_refused_in_launch_env_whatever_its_name(kind):
    with pytest.raises(ValidationError) as err:
        LaunchOptions(env={"SETTING": TOKENS[kind]})
    (e,) = err.value.errors()
    assert e["type"] == SECRET_ERROR
    assert "looks like a token" in e["msg"] and 'SETTING: "${SETTING}"' in e["msg"]
    spec = {"name": "s", "workload": {"concurrency": [1]},
            "space": [{"engine": "sim", "launch": {"env": {"SETTING": TOKENS[kind]}}}]}
    with pytest.raises(SpecError) as refused:  # as the CLI says it (exit 2)
        parse_spec(spec)
    assert "launch.env" in str(refused.value) and "looks like a token" in str(refused.value)
    assert TOKENS[kind] not in str(refused.value)  # the error never repeats the secret


@pytest.mark.parametrize("name", ["DB_PASS", "CREDENTIALS", "HF_TOKEN", "OPENAI_API_KEY",
                                  "MY_SECRET", "PROXY_AUTH"])
def test_a_secret_by_name_is_refused_whatever_its_value(name):
    with pytest.raises(ValidationError, match=f"{name} looks like a secret: give it as"):
        LaunchOptions(env={name: "hunter2"})
    assert LaunchOptions(env={name: f"${{{name}}}"}).env[name] == f"${{{name}}}"


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_token_in_an_engine_option_is_refused_in_the_space_and_the_trial(kind):
    with pytest.raises(ValidationError, match="an engine option never holds a secret"):
        SpaceEntry.model_validate({"engine": "sim", "extras": {"tokenizer": TOKENS[kind]}})
    with pytest.raises(ValidationError, match="an engine option never holds a secret"):
        TrialConfig(engine="sim", extras={"x": TOKENS[kind]})


@pytest.mark.parametrize("name,value", [
    ("TOKENIZERS_PARALLELISM", "false"), ("CUDA_VISIBLE_DEVICES", "0,1"),
    ("VLLM_ATTENTION_BACKEND", "FLASH_ATTN"), ("HF_HOME", "/opt/cache/huggingface/hub/x1"),
    ("MODEL_DIR", "/models/Llama-3.1-8B-Instruct-FP8-dynamic-2024"),
    ("NCCL_NVLS_ENABLE", "0"), ("VLLM_USE_FLASHINFER_SAMPLER", "0"),
    ("NOTE", "a sentence with spaces that is long enough to count as long text"),
])
def test_ordinary_settings_pass(name, value):
    assert secret_reason(name, value) is None
    assert LaunchOptions(env={name: value}).env[name] == value


def test_an_engine_options_name_alone_says_nothing():
    assert TrialConfig(engine="sim", extras={"tokenizer_mode": "auto"}).extras
    assert secret_reason("max_num_batched_tokens", "8192", by_name=False) is None
