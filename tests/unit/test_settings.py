"""Every ``SERVESWEEP_*`` variable: one settings model, listed in the README, parsed strictly."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from actors.contracts.settings import (
    DEPRECATED_ALIASES,
    MARKER_ENV,
    PREFIX,
    READERS,
    Settings,
    SettingsError,
    env_name,
    field_info,
    markdown_table,
    settings,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

_NAME = re.compile(r"\b" + PREFIX + r"[A-Z0-9_]*[A-Z0-9]")
_SKIP_DIRS = {".git", "mlruns", "node_modules", "__pycache__"}
VARIABLES = {env_name(f): f for f in Settings.model_fields}


def _repo_files() -> list[Path]:
    """The repository's .py, .sh, .md, .yaml files and Makefiles, less venvs, mlruns, .git."""
    out = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".venv")]
        out += [Path(top) / f for f in files
                if f == "Makefile" or f.endswith((".py", ".sh", ".md", ".yaml", ".yml"))]
    return out


def test_every_variable_in_the_repository_is_a_setting() -> None:
    known = set(VARIABLES) | set(DEPRECATED_ALIASES) | {MARKER_ENV}
    found: dict[str, list[str]] = {}
    for p in _repo_files():
        for name in _NAME.findall(p.read_text(errors="replace")):
            found.setdefault(name, []).append(str(p.relative_to(ROOT)))
    unknown = {n: sorted(set(where)) for n, where in found.items() if n not in known}
    assert not unknown, (f"variables that are no field of actors/contracts/settings.py "
                         f"Settings: {unknown}")
    assert set(VARIABLES) <= set(found)  # the scan saw the files (README lists them all)


def test_the_docs_list_every_setting_in_the_generated_table() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc.startswith("# Settings (environment variables)\n"), \
        "docs/settings.md is the settings page"
    for var in VARIABLES:
        assert f"| `{var}` |" in doc, f"docs/settings.md's table does not list {var}"
    assert markdown_table() in doc, (
        "docs/settings.md's table differs from the model: paste "
        "`python -c 'from actors.contracts.settings import markdown_table as t; print(t())'`")
    assert "docs/settings.md" in (ROOT / "README.md").read_text()  # linked from the README


@pytest.mark.parametrize("field", list(Settings.model_fields))
def test_each_field_is_documented(field: str) -> None:
    info = field_info(field)
    description = Settings.model_fields[field].description or ""
    assert description.startswith(env_name(field) + ": ") and "Default:" in description
    assert info["doc"] and info["default_text"] and info["form"]
    assert info["reader"] and set(info["reader"]) <= set(READERS)
    assert env_name(field) == PREFIX + field.upper()


def test_defaults_with_an_empty_environment() -> None:
    s = settings({})
    assert s == Settings.model_validate({})
    assert s.home is None and s.hardware_file is None and s.native_read is True
    assert s.vllm_python is None and s.bench_py is None
    assert s.trtllm_model is None and s.trtllm_release is None
    assert s.trtllm_hardware == "h100-sxm"


def test_empty_values_count_as_unset() -> None:
    assert settings({v: "" for v in VARIABLES}) == settings({})


# field -> (a value as set in the environment, what the field holds then)
SET = {
    "home": ("/srv/state", Path("/srv/state")),
    "hardware_file": ("my-gpus.yaml", Path("my-gpus.yaml")),
    "native_read": ("0", False),
    "vllm_python": ("python3", "python3"),
    "bench_py": ("/opt/py/bin/python", Path("/opt/py/bin/python")),
    "trtllm_model": ("/models/llama", Path("/models/llama")),
    "trtllm_release": ("0.20", "0.20"),
    "trtllm_hardware": ("h200", "h200"),
}


def test_every_field_has_a_parse_case() -> None:
    assert set(SET) == set(Settings.model_fields)


@pytest.mark.parametrize("field", list(SET))
def test_a_set_value_is_read(field: str) -> None:
    raw, want = SET[field]
    assert getattr(settings({env_name(field): raw}), field) == want


def test_it_reads_os_environ_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESWEEP_HOME", "/a")
    assert settings().home == Path("/a")
    monkeypatch.setenv("SERVESWEEP_HOME", "/b")
    assert settings().home == Path("/b")
    monkeypatch.delenv("SERVESWEEP_HOME")
    assert settings().home is None


@pytest.mark.parametrize("raw,want", [("1", True), ("true", True), ("yes", True),
                                      ("on", True), ("0", False), ("false", False),
                                      ("no", False), ("off", False)])
def test_native_read_takes_the_usual_booleans(raw: str, want: bool) -> None:
    assert settings({"SERVESWEEP_NATIVE_READ": raw}).native_read is want


def test_a_bad_value_names_the_variable_and_the_expected_form(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESWEEP_NATIVE_READ", "maybe")
    with pytest.raises(SettingsError) as err:
        settings()
    msg = str(err.value)
    assert "SERVESWEEP_NATIVE_READ='maybe'" in msg and "1/0, true/false" in msg


def test_settings_are_frozen() -> None:
    with pytest.raises(ValueError):
        settings({}).home = Path("/x")  # type: ignore[misc]


def test_deprecated_alias_is_read_and_the_current_name_wins() -> None:
    (old, new), = DEPRECATED_ALIASES.items()
    assert new in VARIABLES and old not in VARIABLES
    assert settings({old: "/old/python"}).vllm_python == "/old/python"
    assert settings({old: "/old/python", new: "/new/python"}).vllm_python == "/new/python"


def test_marker_is_a_constant_not_a_setting() -> None:
    from actors.procs import MARKER_ENV as procs_marker

    assert procs_marker is MARKER_ENV == "SERVESWEEP_MARKER"
    assert MARKER_ENV not in VARIABLES
