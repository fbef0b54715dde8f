"""The package's layers, checked on the import graph drawn from the source.

Every import counts: module level, inside functions and under ``TYPE_CHECKING``. Rules:
no cycle anywhere (inside packages too); ``actors.contracts`` imports nothing else of the
project; ``actors`` never imports ``orchestrator``; ``actors.loadgen`` never imports
``actors.engines``; inside ``orchestrator`` a layer
imports only layers below it: commands -> execution -> results -> planning -> spec ->
errors. ``make lint`` runs this file.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("orchestrator", "actors")
#: orchestrator's layers, top first: a module may import its own layer and those below
ORCHESTRATOR_LAYERS = ("orchestrator.commands", "orchestrator.execution",
                       "orchestrator.results", "orchestrator.planning", "orchestrator.spec",
                       "orchestrator.errors")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a package import counts its __init__)."""
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        graph[mod]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [_resolve(f"{node.module}.{a.name}", mods) or
                           _resolve(node.module, mods) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [_resolve(a.name, mods) for a in node.names]
            graph[mod].update(t for t in targets if t and t != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def _within(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def test_the_graph_is_drawn_from_every_module(graph):
    assert "actors.contracts.config" in graph and "orchestrator.commands.cli" in graph
    assert "actors.contracts.config" in graph["orchestrator.spec.model"]


def test_no_import_cycle_anywhere(graph):
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_contracts_import_nothing_else_of_the_project(graph):
    bad = {m: sorted(t for t in ts if not _within(t, "actors.contracts") and t != "actors")
           for m, ts in graph.items() if _within(m, "actors.contracts")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_actors_never_import_the_orchestrator(graph):
    bad = {m: sorted(t for t in ts if _within(t, "orchestrator"))
           for m, ts in graph.items() if _within(m, "actors")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_the_load_generator_knows_no_engine(graph):
    """The load generator is handed a ``LoadSpec`` (its engine's ``ClientProfile`` as data):
    it never imports an engine adapter."""
    bad = {m: sorted(t for t in ts if _within(t, "actors.engines"))
           for m, ts in graph.items() if _within(m, "actors.loadgen")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def _layer(mod: str) -> int | None:
    return next((i for i, pkg in enumerate(ORCHESTRATOR_LAYERS) if _within(mod, pkg)), None)


def test_orchestrator_layers_import_only_downwards(graph):
    bad = []
    for m, ts in graph.items():
        here = _layer(m)
        if here is None:
            continue
        for t in ts:
            there = _layer(t)
            if there is not None and there < here:
                bad.append(f"{m} -> {t}")
    assert bad == []


def test_every_orchestrator_module_is_in_a_layer(graph):
    assert [m for m in graph if _within(m, "orchestrator") and m != "orchestrator"
            and _layer(m) is None] == []
