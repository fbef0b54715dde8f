"""Which GPU model a trial ran on, as its node sees it.

``gpu_model(ids)``: the names ``nvidia-smi`` gives for the GPUs Ray assigned (``ids``:
indices or UUIDs, as in ``CUDA_VISIBLE_DEVICES``), e.g. ``NVIDIA H200``; where there is
no ``nvidia-smi`` (logical GPUs, another vendor), the node's accelerator type as Ray
knows it (its ``ray.io/accelerator-type`` label or ``accelerator_type:<T>`` resource),
e.g. ``H100``; None when neither says.
"""

from __future__ import annotations

import shutil
import subprocess

__all__ = ["gpu_model", "parse_smi", "ACCELERATOR_LABEL", "ACCELERATOR_RESOURCE"]

#: the node label and resource prefix Ray gives a GPU node for its accelerator type
ACCELERATOR_LABEL = "ray.io/accelerator-type"
ACCELERATOR_RESOURCE = "accelerator_type:"


def parse_smi(text: str, ids: list[str]) -> str | None:
    """The model(s) of ``ids`` from ``nvidia-smi --query-gpu=index,uuid,name`` CSV lines
    (several models: joined with " + "); all GPUs' when ``ids`` match none."""
    rows = [[c.strip() for c in line.split(",", 2)] for line in text.splitlines()
            if line.count(",") >= 2]
    names = [r[2] for r in rows if r[0] in ids or r[1] in ids] or [r[2] for r in rows]
    unique = sorted(set(names))
    return " + ".join(unique) if unique else None


def _smi(ids: list[str]) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(out.stdout, ids) if out.returncode == 0 else None


def _ray_accelerator() -> str | None:
    try:
        import ray

        if not ray.is_initialized():
            return None
        ctx = ray.get_runtime_context()
        label = ctx.get_node_labels().get(ACCELERATOR_LABEL)
        if label:
            return str(label)
        node_id = ctx.get_node_id()
        for node in ray.nodes():
            if node.get("NodeID") == node_id:
                types = [r[len(ACCELERATOR_RESOURCE):] for r in node.get("Resources", {})
                         if r.startswith(ACCELERATOR_RESOURCE)]
                return types[0] if types else None
    except Exception:  # noqa: BLE001  - a node that cannot say is a model not known
        return None
    return None


def gpu_model(ids: list[str]) -> str | None:
    """The model of the GPUs ``ids`` (None: no GPUs assigned, or nothing says)."""
    if not ids:
        return None
    return _smi(ids) or _ray_accelerator()
