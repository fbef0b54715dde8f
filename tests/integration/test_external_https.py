"""An ``external`` endpoint behind HTTPS is measured (the aiohttp transport: the lean one
speaks plain HTTP), and its certificate is checked against the trust store."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec
from tests.simserver import sim_config, sim_server


def _self_signed(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_sweep_against_an_https_endpoint(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test certificate, only it
    cfg = sim_config(time_scale=0.1).model_copy(update={"tls_cert": str(cert),
                                                        "tls_key": str(key)})
    with sim_server(cfg, tmp_path) as (url, _, _):
        assert url.startswith("https://")
        spec = minimal_spec(name="tls")
        spec["model"] = {"path": "/nowhere/model", "served_name": "sim-model"}
        spec["workload"]["concurrency"] = [2]
        spec["space"] = [{"engine": "external", "launch": {"base_url": url}}]
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    (r,) = Ledger.open("latest").results().values()
    assert r.status.value == "ok", (r.reason, r.message)
    (lv,) = r.levels
    assert lv.status == "valid" and lv.client.reader == "aiohttp"
    assert lv.count_sources == {"token ids": lv.requests}
