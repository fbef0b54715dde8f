"""Ray Serve LLM and KubeRay forms of a winning vLLM config (``servesweep export``).

``serve_config``: a Ray Serve config file (``serve deploy ray-serve.yaml``) with one
application, ``import_path: ray.serve.llm:build_openai_app``, whose ``args.llm_configs``
holds one ``LLMConfig``: ``model_loading_config`` (the served name and the weights),
``engine_kwargs`` (the winner's vLLM engine arguments), the accelerator, one replica, and
the serving environment as ``runtime_env.env_vars`` (secrets stay ``${NAME}``, which Ray
expands from the node's environment). ``rayservice``: a KubeRay ``RayService``
(``ray.io/v1``) carrying the same application in ``serveConfigV2``, a CPU head and one GPU
worker group with as many GPUs as the winner's TP; secrets come from a Kubernetes Secret.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import yaml

from actors.contracts.config import ENV_REF
from actors.contracts.hardware import get_hardware
from actors.engines.deploy import Deployment

__all__ = ["serve_config", "rayservice", "accelerator_type", "ray_version", "dump_yaml",
           "SECRET_NAME"]

#: the Kubernetes Secret the RayService reads ``${NAME}`` variables from
SECRET_NAME = "servesweep-engine-env"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (``serveConfigV2: |``)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(obj: Any) -> str:
    """YAML in the order given, multi-line strings as literal blocks."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def ray_version() -> str:
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - ray is a dependency
        return "2.60.0"


def accelerator_type(hardware: str) -> str | None:
    """Ray's accelerator type for a hardware name (``h200`` -> ``H200``), or None when Ray
    names none such (the config then schedules on any GPU)."""
    try:
        from ray.util.accelerators import accelerators
    except ImportError:  # pragma: no cover - ray is a dependency
        return None
    known = {v for k, v in vars(accelerators).items() if k.isupper() and isinstance(v, str)}
    head = hardware.split("-")[0].upper()
    return head if head in known else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50] or "app"


def serve_config(dep: Deployment, app: str, hardware: str) -> dict[str, Any]:
    if dep.engine_kwargs is None:
        raise ValueError(f"engine {dep.engine!r} has no Ray Serve LLM form: {dep.ray_serve_note}")
    llm: dict[str, Any] = {
        "model_loading_config": {"model_id": dep.served_name or dep.model,
                                 "model_source": dep.model},
        "engine_kwargs": dict(dep.engine_kwargs),
        "deployment_config": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 1}},
    }
    acc = accelerator_type(hardware)
    if acc:
        llm["accelerator_type"] = acc
    if dep.env:
        llm["runtime_env"] = {"env_vars": dict(dep.env)}
    return {"applications": [{"name": _slug(app), "route_prefix": "/",
                              "import_path": "ray.serve.llm:build_openai_app",
                              "args": {"llm_configs": [llm]}}]}


def _secret_env(dep: Deployment) -> list[dict[str, Any]]:
    refs = sorted({m.group(1) for v in dep.env.values() if (m := ENV_REF.match(v))})
    return [{"name": ref, "valueFrom": {"secretKeyRef": {"name": SECRET_NAME, "key": ref}}}
            for ref in refs]


def _container(name: str, image: str, limits: dict[str, str], env: list[dict[str, Any]],
               ports: list[dict[str, Any]], shm: bool) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image,
                         "resources": {"limits": dict(limits), "requests": dict(limits)}}
    if env:
        c["env"] = env
    if ports:
        c["ports"] = ports
    if shm:
        c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return c


def rayservice(dep: Deployment, app: str, hardware: str, serve: dict[str, Any]) -> dict[str, Any]:
    """The RayService manifest (a dict; ``yaml.safe_dump`` it)."""
    version = ray_version()
    image = f"rayproject/ray-llm:{version}-py311-cu128"
    gpus = dep.tp if get_hardware(hardware).kind == "gpu" else 0
    worker_limits = {"cpu": str(max(8, 4 * dep.tp)), "memory": f"{max(64, 32 * dep.tp)}Gi"}
    if gpus:
        worker_limits["nvidia.com/gpu"] = str(gpus)
    shm_volume = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    head = _container("ray-head", image, {"cpu": "4", "memory": "16Gi"}, [], [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
        {"containerPort": 8000, "name": "serve"}], shm=False)
    worker = _container("ray-worker", image, worker_limits, _secret_env(dep), [], shm=True)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": _slug(app)},
        "spec": {
            "serveConfigV2": dump_yaml(serve),
            "rayClusterConfig": {
                "rayVersion": version,
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                    "template": {"spec": {"containers": [head]}}},
                "workerGroupSpecs": [{
                    "groupName": "gpu" if gpus else "cpu",
                    "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker], "volumes": shm_volume}}}],
            },
        },
    }
