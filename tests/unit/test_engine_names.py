"""Engine knowledge lives in the adapters (``actors/engines``) only.

Everything else asks the adapter (``get_adapter(trial.engine)``) what the engine does:
its attributes and methods (``serves_presets``, ``default_profile``, ``time_scaled``,
``sim_profile_for``, ``startup_estimate_s``, ``served_model_name``, ``kv_pool``, ...).
An AST scan (docstrings and comments do not count) fails on:

- a comparison of an ``engine`` (``cfg.engine == "sim"``, ``entry.engine in (...)``)
  with a string constant, anywhere in ``orchestrator/`` and ``actors/`` outside
  ``actors/engines/``;
- an engine's name as a string constant in ``orchestrator/`` or in the actors' shared
  parts (``contracts``, ``loadgen``, the host), except the few in ``ALLOWED``, each with
  its reason. (``actors/sim`` names its own profiles after the engines they imitate.)
"""

from __future__ import annotations

import ast
from pathlib import Path

from actors.engines import adapter_names
from tests.conftest import ROOT

ENGINES = frozenset(adapter_names())
NO_COMPARISONS = [ROOT / "orchestrator", ROOT / "actors"]
NO_NAMES = [ROOT / "orchestrator", ROOT / "actors" / "contracts", ROOT / "actors" / "loadgen",
            ROOT / "actors" / "engine_host.py", ROOT / "actors" / "procs.py"]
ADAPTERS = ROOT / "actors" / "engines"

#: (file, constant) -> why the name is not an engine branch
ALLOWED = {
    ("orchestrator/commands/profiling.py", "sim"):
        "the spec's `sim:` section (sim.model_profile set to the profile made first)",
    ("orchestrator/planning/model_profiling.py", "sim"):
        "the spec's `sim:` section (the profiling spec keeps its time scale), not the engine",
    ("orchestrator/spec/model_profiles.py", "sim"):
        "the spec's `sim:` section (sim.model_profile, sim.profiles), not the engine",
    ("orchestrator/commands/calibrate.py", "sim"):
        "the spec's `sim:` section (SweepSpec.sim.profiles) the fitted factors are written "
        "under, not the engine",
    ("orchestrator/planning/budget.py", "sim"):
        "the spec's `sim:` section (its time scale set to 1 for real durations), not the engine",
    ("orchestrator/planning/search/guided.py", "sim"):
        "the spec's `sim:` section (the recalibrated profiles), not the engine",
}


def _files(roots: list[Path]) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        found = [root] if root.is_file() else sorted(root.rglob("*.py"))
        out += [p for p in found if ADAPTERS not in p.parents]
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of string constants that are documentation: a bare string statement (a module,
    class or function docstring, or an attribute's)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def _is_engine(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "engine") or \
        (isinstance(node, ast.Name) and node.id == "engine")


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def engine_comparisons(path: Path, root: Path = ROOT) -> list[str]:
    """``<x>.engine`` compared with a string constant (or a collection of them)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(_is_engine(o) for o in operands) and any(_strings(o) for o in operands):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def engine_names(path: Path, root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(file, name, line) of every engine name used as a string constant, docs aside."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    rel = str(path.relative_to(root))
    return [(rel, node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in ENGINES and id(node) not in docs]


def test_no_comparison_of_an_engine_with_its_name_outside_the_adapters():
    found = [hit for p in _files(NO_COMPARISONS) for hit in engine_comparisons(p)]
    assert not found, ("branch on an adapter attribute or method instead (actors/engines/"
                       "base.py documents them):\n" + "\n".join(found))


def test_no_engine_name_constant_outside_the_adapters():
    hits = [h for p in _files(NO_NAMES) for h in engine_names(p)]
    found = [f"{f}:{line}: {name!r}" for f, name, line in hits if (f, name) not in ALLOWED]
    assert not found, ("engine names belong to actors/engines; ask the adapter, or add to "
                       "ALLOWED with a reason:\n" + "\n".join(found))
    used = {(f, name) for f, name, _ in hits}
    assert set(ALLOWED) <= used, f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"


def test_the_scan_sees_a_branch(tmp_path):
    """The scanner itself: it finds what it must, and skips docs."""
    src = tmp_path / "x.py"
    src.write_text('"""Docs may say "vllm"."""\n'
                   'def f(cfg):\n'
                   '    "sim"\n'
                   '    if cfg.engine == "sim":\n'
                   '        return 1\n'
                   '    return cfg.engine in ("vllm", "trtllm") or {"trtllm": 2}\n')
    assert [hit.split(": ")[0] for hit in engine_comparisons(src, tmp_path)] == ["x.py:4",
                                                                                "x.py:6"]
    assert sorted((n, line) for _, n, line in engine_names(src, tmp_path)) == [
        ("sim", 4), ("trtllm", 6), ("trtllm", 6), ("vllm", 6)]
