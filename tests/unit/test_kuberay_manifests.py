"""deploy/kuberay manifests checked against KubeRay's own CRD schemas (tests/fixtures/kuberay).

Every object schema is closed to unknown fields, as the API server's strict field validation
is, so a typo or a field the fixture does not keep fails here. Beyond the schema: what vLLM
needs on GPU workers (/dev/shm in memory for TP > 1, the GPU taint tolerated, a nodeSelector),
the cluster's token on, and the RayJob running the servesweep driver on that cluster.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES, ROOT
from tests.kuberay_schema import closed

KUBERAY = ROOT / "deploy" / "kuberay"


def _errors(kind: str, manifest: dict[str, Any]) -> list[str]:
    import jsonschema

    schema = json.loads((FIXTURES / "kuberay" / f"{kind}-v1-schema.json").read_text())
    validator = jsonschema.Draft7Validator(closed(schema))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]


def _load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((KUBERAY / name).read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize(("name", "kind"), [("raycluster.yaml", "RayCluster"),
                                            ("rayjob.yaml", "RayJob")])
def test_manifest_validates_against_the_kuberay_crd(name: str, kind: str) -> None:
    manifest = _load(name)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == kind
    assert not _errors(kind.lower(), manifest)


def test_the_schema_check_catches_a_typo() -> None:
    bad = _load("raycluster.yaml")
    bad["spec"]["workerGroupSpecs"][0]["template"]["spec"]["toleration"] = []
    assert _errors("raycluster", bad)
    job = _load("rayjob.yaml")
    job["spec"]["entryPoint"] = job["spec"].pop("entrypoint")
    assert _errors("rayjob", job)


def test_gpu_workers_have_what_vllm_needs() -> None:
    spec = _load("raycluster.yaml")["spec"]
    assert spec["authOptions"]["mode"] == "token"
    for group in spec["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        assert pod["nodeSelector"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} \
            in pod["tolerations"]
        shm = [v["name"] for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        assert shm, "no in-memory emptyDir for /dev/shm"
        for c in pod["containers"]:
            assert {"name": shm[0], "mountPath": "/dev/shm"} in c["volumeMounts"]
            assert "nvidia.com/gpu" in c["resources"]["limits"]


def test_rayjob_runs_the_driver_on_that_cluster() -> None:
    cluster = _load("raycluster.yaml")
    job = _load("rayjob.yaml")["spec"]
    assert job["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    argv = shlex.split(job["entrypoint"])
    assert argv[:2] == ["servesweep", "run"] and len(argv) == 3
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    mounts = [m["mountPath"] for c in head["containers"] for m in c["volumeMounts"]]
    assert any(argv[2].startswith(m.rstrip("/") + "/") for m in mounts), \
        "the spec the driver reads is not mounted on the head"
    assert job.get("backoffLimit", 0) == 0  # a retried driver would start a second sweep
