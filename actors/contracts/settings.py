"""Every ``SERVESWEEP_*`` environment variable, in one model (README "Settings").

``settings()`` reads them from ``os.environ`` on every call, with no cache, because tests
and benchmarks change the environment while running. An empty value counts as unset.
A bad value raises ``SettingsError``, which names the variable and the form it expects.

Each field is read from the variable that is its alias (``env_name``). Its ``reader``
says who reads it: servesweep itself, the test suite, the benchmarks or the
deploy scripts. The variables that only tests, benchmarks or scripts read are here too,
so that this model is the one full list (tests/unit/test_settings.py checks it against
the repository and the README). Shell scripts read their variables directly.

``MARKER_ENV`` is not a setting. It is the variable that servesweep writes into each
engine's environment (``actors/procs.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["Settings", "SettingsError", "settings", "env_name", "MARKER_ENV", "PREFIX",
           "DEPRECATED_ALIASES", "READERS", "field_info", "markdown_table"]

PREFIX = "SERVESWEEP_"

#: Not a user setting. servesweep sets ``SERVESWEEP_MARKER=<sweep-id>/<trial-key>`` in
#: every engine process it starts, and children inherit it. A scan of /proc then finds
#: all processes of a trial, even after its leader or the driver that started it has died
#: (actors/procs.py). It is never read from servesweep's own environment.
MARKER_ENV = PREFIX + "MARKER"

#: Old names still accepted, mapped to the current name. The current name wins when both
#: are set. ``SERVESWEEP_VLLM_PY`` was the benchmarks' own name for the Python that has
#: vLLM; the vLLM adapter has always read that interpreter from SERVESWEEP_VLLM_PYTHON.
DEPRECATED_ALIASES = {PREFIX + "VLLM_PY": PREFIX + "VLLM_PYTHON"}

#: Who reads a variable (the ``reader`` of each field, and the README table's last column).
READERS = ("servesweep", "the test suite", "benchmarks", "deploy scripts")


class SettingsError(ValueError):
    """A ``SERVESWEEP_*`` variable has a value that cannot be parsed. The message names
    the variable, the value, and the form it expects."""


def _setting(var: str, default: Any, *, default_text: str, form: str,
             reader: tuple[str, ...], doc: str) -> Any:
    """A field read from ``var``. Its description names the variable, says what it does
    and gives its default."""
    assert var.startswith(PREFIX) and all(r in READERS for r in reader), (var, reader)
    return Field(default, alias=var, description=f"{var}: {doc} Default: {default_text}.",
                 json_schema_extra={"doc": doc, "default_text": default_text, "form": form,
                                    "reader": list(reader)})


class Settings(BaseModel):
    """Every ``SERVESWEEP_*`` setting. Build it with ``settings()``, which reads the
    environment. Each field's alias is the variable it is read from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path | None = _setting(
        "SERVESWEEP_HOME", None, default_text="`mlruns` in the current directory",
        form="a directory path", reader=("servesweep",),
        doc="Where servesweep keeps its state: the ledger (`sweeps/<id>/`), the MLflow "
            "store (`mlflow.db`, unless `MLFLOW_TRACKING_URI` is set) and the engines' "
            "caches.")
    hardware_file: Path | None = _setting(
        "SERVESWEEP_HARDWARE_FILE", None, default_text="none",
        form="a path to a YAML file", reader=("servesweep",),
        doc="A YAML file of accelerator entries, in the same shape as "
            "`actors/contracts/hardware.yaml`. Its entries add to the shipped catalog, or "
            "replace the entries of the same name.")
    native_read: bool = _setting(
        "SERVESWEEP_NATIVE_READ", True, default_text="`1`",
        form="a boolean: 1/0, true/false, yes/no or on/off", reader=("servesweep",),
        doc="`0` turns off the load generator's native (C) read pass, and the pure-Python "
            "read pass runs instead. The benchmarks set it to 0 for their `lean-python` "
            "transport.")
    vllm_python: str | None = _setting(
        "SERVESWEEP_VLLM_PYTHON", None, default_text="`.venv-vllm/bin/python`",
        form="a Python interpreter: a path, or a bare name looked up on PATH",
        reader=("servesweep", "benchmarks"),
        doc="The Python interpreter that has vLLM installed. The vLLM adapter starts the "
            "server with it when a spec entry has no `launch.python`, and the benchmarks "
            "run vLLM's client with it. `deploy/h200/device_setup.sh bench` sets it. "
            "`SERVESWEEP_VLLM_PY` is its deprecated old name.")
    bench_py: Path | None = _setting(
        "SERVESWEEP_BENCH_PY", None,
        default_text="`.venv/bin/python`, or the running interpreter if there is no `.venv`",
        form="a path to a Python interpreter", reader=("benchmarks",),
        doc="The Python that runs servesweep's own client in the load-generator "
            "benchmarks (`benchmarks/loadgen_common.py`).")
    trtllm_model: Path | None = _setting(
        "SERVESWEEP_TRTLLM_MODEL", None, default_text="none (the tests are skipped)",
        form="a path to a model directory", reader=("the test suite",),
        doc="A local Hugging Face checkpoint directory for the TensorRT-LLM GPU tests "
            "(`tests/integration/test_trtllm_gpu.py`, `test_conformance.py`). Nothing is "
            "downloaded.")
    trtllm_release: str | None = _setting(
        "SERVESWEEP_TRTLLM_RELEASE", None,
        default_text="the installed release, else the newest 1.x known",
        form="a TensorRT-LLM release, e.g. 0.20", reader=("the test suite",),
        doc="The TensorRT-LLM options-file layout that the GPU test writes "
            "(`launch.release`).")
    trtllm_hardware: str = _setting(
        "SERVESWEEP_TRTLLM_HARDWARE", "h100-sxm", default_text="`h100-sxm`",
        form="a hardware catalog name", reader=("the test suite",),
        doc="The hardware catalog entry that the conformance test's TensorRT-LLM case "
            "declares.")


def env_name(field: str) -> str:
    """The variable a field is read from: ``home`` -> ``SERVESWEEP_HOME``."""
    alias = Settings.model_fields[field].alias
    assert alias is not None
    return alias


def field_info(field: str) -> dict[str, Any]:
    """A field's ``doc``, ``default_text``, ``form`` and ``reader`` (a list)."""
    extra = Settings.model_fields[field].json_schema_extra
    assert isinstance(extra, dict)
    return dict(extra)


def _raw(environ: Mapping[str, str]) -> dict[str, str]:
    """Variable -> value, for the variables that are set and not empty. A deprecated
    name counts where its current name is not set."""
    out = {}
    for name in Settings.model_fields:
        var = env_name(name)
        olds = [old for old, new in DEPRECATED_ALIASES.items() if new == var]
        value = environ.get(var) or next((environ[o] for o in olds if environ.get(o)), None)
        if value:
            out[var] = value
    return out


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings, read now from ``environ`` (default: ``os.environ``). Raises
    ``SettingsError`` for a value that does not parse, naming the variable."""
    raw = _raw(os.environ if environ is None else environ)
    try:
        return Settings.model_validate(raw)
    except ValidationError as err:
        by_var = {env_name(n): n for n in Settings.model_fields}
        problems = []
        for e in err.errors():
            var = str(e["loc"][0]) if e["loc"] else "?"
            form = field_info(by_var[var])["form"] if var in by_var else e["msg"]
            problems.append(f"{var}={raw.get(var)!r}: expected {form}")
        raise SettingsError("bad environment variable " + "; ".join(problems)) from None


def markdown_table() -> str:
    """The README's settings table: variable, default, what it does, who reads it."""
    rows = ["| Variable | Default | What it does | Read by |", "|---|---|---|---|"]
    for name in Settings.model_fields:
        info = field_info(name)
        rows.append(f"| `{env_name(name)}` | {info['default_text']} | {info['doc']} | "
                    f"{', '.join(info['reader'])} |")
    return "\n".join(rows)
