"""The local Ray a sweep starts keeps Ray's token authentication on (the probe runs in a
process of its own: tests/conftest.py turns auth off for the suite's throwaway clusters)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

_PROBE = """
import sys
sys.path.insert(0, {root!r})
from orchestrator.execution.controller import connect_ray
from orchestrator.spec import parse_spec
connect_ray(parse_spec({{"name": "auth", "model": {{"preset": "llama-3.1-8b"}},
                        "cluster": {{"gpus": 1, "cpus": 1}},
                        "workload": {{"prompt_tokens": 8, "output_tokens": 8,
                                     "concurrency": [1]}},
                        "space": [{{"engine": "sim"}}]}}))
from ray._private.authentication.authentication_utils import is_token_auth_enabled
print("token auth:", is_token_auth_enabled())
import ray
ray.shutdown()
"""


def test_a_sweeps_local_ray_has_token_auth_on(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # Ray writes its token under the home directory
    out = subprocess.run([sys.executable, "-c", _PROBE.format(root=str(ROOT))], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "token auth: True" in out.stdout
    assert any(tmp_path.rglob("*token*")), "Ray wrote no token under the home directory"
