"""Shared fixtures. Markers by folder: unit/, integration/, e2e/ (see pyproject.toml)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

#: the clusters tests start themselves (``ray.cluster_utils.Cluster``): workers at nice 0,
#: as docs/troubleshooting.md tells a cluster's operator (Ray's default, 15, starves the
#: engines and clients on a busy host); a local Ray is the product's (``connect_ray``)
TEST_RAY = {"_system_config": {"worker_niceness": 0}}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in ("unit", "integration", "e2e"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated state root (ledger + MLflow) for one test."""
    home = tmp_path / "mlruns"
    home.mkdir()
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return home


def terminal_sigint() -> None:
    """``preexec_fn`` for a driver a test stops with SIGINT: Ctrl-C's default action, as a
    terminal's foreground process has it. A suite started as a background job of a
    non-interactive shell (``bash .ci/run &``) inherits SIGINT ignored, and Python keeps an
    ignored SIGINT ignored: the driver would then never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def minimal_spec(**overrides) -> dict:
    """A small valid sim spec as a dict; tests override what they exercise."""
    spec = {
        "name": "t",
        "cluster": {"gpus": 2, "max_concurrent_trials": 1},
        "model": {"preset": "llama-3.1-8b"},
        "hardware": "h100-sxm",
        "workload": {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [1, 4],
                     "rounds": 2, "warmup_requests": 1},
        "sim": {"time_scale": 0.1},
        "space": [{"engine": "sim", "profile": ["vllm"], "cuda_graphs": [True]}],
    }
    for k, v in overrides.items():
        spec[k] = v
    return spec


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a locally trained ``tokenizer.json`` (see tests/tinytok.py)."""
    from tests.tinytok import make_tokenizer

    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))
