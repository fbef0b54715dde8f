"""What an adapter says about deploying a trial's server (``EngineAdapter.deployment``).

A ``Deployment`` is the measured server in the form an operator runs it: the engine's own
CLI (``vllm serve MODEL ...``, ``trtllm-serve MODEL ...``), never the benchmark node's
interpreter path; its serving environment; and, set apart with the reason for each, the
settings that only served the benchmark (a loopback host and a drawn port, a max model
length the workload implied, the per-launch nonce alias, log and cache paths, the bench
node's offline switches). Beside it: the engine keyword arguments Ray Serve LLM takes
(None where Ray Serve LLM cannot run the engine), extra files the command reads, and other
forms of the same config (a Triton model repository) with whether each was measured.

``option_groups`` and ``argv_drift`` compare the argv an adapter renders now with the
argv a trial recorded, flag by flag, so an export says when the two differ.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["host_or_port", "Removed", "DeployForm", "Deployment", "option_groups", "argv_drift",
           "NOT_MEASURED"]

#: the words every export that differs from what was measured carries
NOT_MEASURED = "not measured in this form"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Removed(_Frozen):
    """A benchmark-only setting left out of the deployment, and why."""

    setting: str  # as it appeared: "--port 52836", "HF_HUB_OFFLINE=1"
    why: str


class DeployForm(_Frozen):
    """Another way to deploy the same config (a Triton model repository): its files by path
    relative to the form's folder, whether it is the form that was measured, and a note."""

    name: str  # the folder it is written to, e.g. "triton"
    title: str
    files: dict[str, str] = Field(default_factory=dict)
    measured_form: bool = False
    note: str = ""


class Deployment(_Frozen):
    """A trial's winning server as deployed (see the module doc).

    ``deployable`` False: nothing to deploy (``note`` says why; e.g. an external endpoint).
    ``measured_form`` False: the command differs from what the sweep measured (the sim's
    export as the engine it imitates; a command the adapter renders differently now than
    the trial ran, ``drift``), and ``note`` starts with :data:`NOT_MEASURED`.
    """

    engine: str  # the engine deployed (the sim: the one it imitates)
    measured_engine: str  # the engine the sweep measured
    deployable: bool = True
    measured_form: bool = True
    note: str = ""
    script: str = ""  # the shell script's file name, e.g. "vllm-serve.sh"
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)  # secrets only as ``${NAME}``
    files: dict[str, str] = Field(default_factory=dict)  # read by argv, beside the script
    removed: list[Removed] = Field(default_factory=list)
    drift: list[str] = Field(default_factory=list)
    model: str = ""  # the weights: a path or hub id, as the spec gave it
    served_name: str | None = None
    tp: int = 1
    port: int = 8000  # the engine's default port the deployed command listens on
    #: Ray Serve LLM ``engine_kwargs`` (vLLM's engine arguments); None: Ray Serve LLM does
    #: not run this engine (``ray_serve_note`` says why)
    engine_kwargs: dict[str, Any] | None = None
    ray_serve_note: str = ""
    forms: list[DeployForm] = Field(default_factory=list)
    #: what the engine version measured was, where known (filled by the exporter)
    facts: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def nothing(cls, engine: str, why: str) -> Deployment:
        return cls(engine=engine, measured_engine=engine, deployable=False,
                   measured_form=False, note=why)


def host_or_port(flag: str, setting: str, cli: str) -> Removed | None:
    """The benchmark-only ``--host`` / ``--port`` of a serve command (``cli``: the engine's
    command, e.g. ``vllm serve``), or None for any other flag."""
    if flag == "--host":
        return Removed(setting=setting, why=(
            "the benchmark bound the server to launch.host for the load generator on the "
            f"same node; choose the bind address of your deployment (`{cli}` has its own "
            "default)"))
    if flag == "--port":
        return Removed(setting=setting, why=(
            f"a free port the benchmark host drew for the trial; `{cli}` defaults to 8000"))
    return None


def option_groups(tokens: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``--flag v1 v2 --switch`` -> [("--flag", ("v1", "v2")), ("--switch", ())]; tokens
    before the first flag are grouped under ""."""
    out: list[tuple[str, tuple[str, ...]]] = []
    flag, values = "", list[str]()
    for tok in tokens:
        if tok.startswith("--"):
            if flag or values:
                out.append((flag, tuple(values)))
            flag, values = tok, []
        else:
            values.append(tok)
    if flag or values:
        out.append((flag, tuple(values)))
    return out


def argv_drift(rendered: list[str], measured: list[str], ignore: set[str]) -> list[str]:
    """Flags whose values differ between two argv tails (options only), ``ignore``d flags
    left out: each as "FLAG: measured X, renders Y"."""
    a = {f: v for f, v in option_groups(measured) if f and f not in ignore}
    b = {f: v for f, v in option_groups(rendered) if f and f not in ignore}
    out = []
    for flag in sorted(set(a) | set(b)):
        if a.get(flag) != b.get(flag):
            said = "absent" if flag not in a else " ".join(a[flag]) or "set"
            now = "absent" if flag not in b else " ".join(b[flag]) or "set"
            out.append(f"{flag}: the trial ran with {said}, the adapter renders {now}")
    return out
