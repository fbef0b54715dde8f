"""Packing trials of mixed tp onto nodes of 4 and 8 GPUs: the pure ``Packer``, then the
controller driven tick by tick on a ``TickCluster`` of several nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.contracts.states import TrialStatus
from orchestrator.errors import UsageError
from orchestrator.execution.cluster import NodeInfo
from orchestrator.execution.controller import SweepController
from orchestrator.execution.packing import Packer, node_matches, ordered
from orchestrator.execution.progress import Progress
from orchestrator.results.ledger import Ledger
from orchestrator.spec import ClusterSpec, TrialOrder, parse_spec
from tests.conftest import minimal_spec
from tests.unit.test_controller_ticks import StandInLoadGen, TickCluster

A8, B8, C4 = (NodeInfo(node_id="a", gpus=8, gpu_type="H100"),
              NodeInfo(node_id="b", gpus=8, gpu_type="H100", labels={"zone": "x"}),
              NodeInfo(node_id="c", gpus=4, gpu_type="A100"))


def packer(nodes: list[NodeInfo] = (A8, B8, C4), **spec: Any) -> Packer:  # type: ignore[assignment]
    p = Packer(ClusterSpec(**spec), gpus=True)
    p.refresh(nodes)
    p.begin_pass()
    return p


def test_largest_tp_first_keeps_the_declared_order_among_equals():
    tps = [1, 2, 4, 8, 1, 2, 4, 8]
    labelled = list(enumerate(tps))
    got = ordered(labelled, TrialOrder.PACKED, lambda t: t[1])
    assert got == [(3, 8), (7, 8), (2, 4), (6, 4), (1, 2), (5, 2), (0, 1), (4, 1)]
    assert ordered(labelled, TrialOrder.DECLARED, lambda t: t[1]) == labelled


def test_best_fit_keeps_the_big_nodes_whole():
    p = packer()
    assert p.place(4) == "c"  # the 4-GPU node is an exact fit: both 8s stay whole
    p.take("t1", "c", 4)
    assert p.place(1) == "a"  # c is full; a and b tie: the first
    p.take("t2", "a", 1)
    assert p.place(2) == "a"  # a (7 free) fits more tightly than b (8 free)
    p.take("t3", "a", 2)
    assert p.place(8) == "b"
    p.take("t4", "b", 8)
    assert p.place(8) is None
    assert p.give_back("t4") == "b" and p.free("b") == 8


def test_a_trial_that_fits_nowhere_keeps_a_node_from_smaller_ones():
    p = packer([A8, C4])
    p.take("small", "a", 2)
    p.take("c-full", "c", 4)
    assert p.place(8) is None and p.held == "a"  # a will be empty first: it waits for it
    assert p.place(1) is None  # a is kept for the tp=8 trial, c is full
    p.begin_pass()  # a new pass: nothing is kept until a trial fits nowhere again
    assert p.place(1) == "a"


def test_trials_per_node_caps_the_sweeps_trials_on_a_node():
    p = packer(trials_per_node=1)
    p.take("t1", "c", 1)
    assert p.place(1) == "a"
    p.take("t2", "a", 1)
    assert p.place(1) == "b"
    p.take("t3", "b", 1)
    assert p.place(1) is None  # 17 GPUs free, but every node runs a trial


def test_gpu_type_and_labels_choose_the_nodes():
    assert [n.node_id for n in (A8, B8, C4) if node_matches(n, ClusterSpec(gpu_type="h100"))] \
        == ["a", "b"]
    assert node_matches(B8, ClusterSpec(gpu_type="H100", node_labels={"zone": "x"}))
    assert not node_matches(A8, ClusterSpec(node_labels={"zone": "x"}))
    p = packer(gpu_type="A100")
    assert p.capacity() == (4, 4) and p.place(4) == "c" and p.place(8) is None


def test_a_retry_avoids_the_node_its_attempt_failed_on_while_another_has_room():
    p = packer([A8, B8])
    assert p.place(1, avoid=["a"]) == "b"
    p.take("x", "b", 8)
    assert p.place(1, avoid=["a"]) == "a"  # no other room: the same node rather than none


# -- the controller, tick by tick -----------------------------------------------------------
def controller(tmp_path: Path, cluster: TickCluster, space: dict[str, Any],
               **cluster_opts: Any) -> SweepController:
    spec_dict = minimal_spec(name="packing")
    spec_dict["cluster"] = {"gpus": cluster.gpus, **cluster_opts}
    spec_dict["space"] = [{"engine": "sim", **space}]
    ledger = Ledger.create("name: packing\n", "packing", tmp_path)
    return SweepController(parse_spec(spec_dict), ledger, None, Progress(1, quiet=True),
                           tick_s=0.0, cluster=cluster)


def run(ctl: SweepController) -> list[tuple[str, int]]:
    """Drive to the end; (node, tp) of each attempt in the order they started."""
    while not ctl.done():
        ctl.step()
    results = ctl.ledger.results()
    return [(results[e.key].host.get("node_id") or "-", e.config["tp"])
            for e in ctl.ledger.events() if e.type == "scheduled"]


MIXED = {"profile": ["vllm", "trtllm"], "tp": [1, 2, 4, 8]}
NODES = [NodeInfo(node_id="a", host="ha", gpus=8), NodeInfo(node_id="b", host="hb", gpus=8),
         NodeInfo(node_id="c", host="hc", gpus=4)]


def _overlaps(holds: list[tuple[str, list[int], int, int | None]]) -> list[tuple]:
    """Pairs of holds of one GPU at the same time (there must be none)."""
    bad = []
    for i, (n1, g1, s1, e1) in enumerate(holds):
        for n2, g2, s2, e2 in holds[i + 1:]:
            if n1 == n2 and set(g1) & set(g2) and s1 < (e2 or 10**9) and s2 < (e1 or 10**9):
                bad.append(((n1, g1, s1, e1), (n2, g2, s2, e2)))
    return bad


def test_mixed_tp_on_nodes_of_8_8_and_4_largest_first_and_never_waiting(tmp_path):
    cluster = TickCluster(nodes=list(NODES))
    ctl = controller(tmp_path, cluster, MIXED)
    started = run(ctl)
    assert [tp for _, tp in started] == [8, 8, 4, 4, 2, 2, 1, 1]
    assert [node for node, _ in started[:3]] == ["a", "b", "c"]  # tp=4 fits c exactly
    assert not cluster.waiting and not _overlaps(cluster.holds)
    results = ctl.ledger.results().values()
    assert {r.status for r in results} == {TrialStatus.OK}
    for r in results:
        assert len(r.host["gpu_ids"]) == r.config.tp
    # no trial ever waited in its place phase: packing never guessed a room that was not
    assert cluster.max_wait == 0


def test_declared_order_with_a_big_trial_waiting_keeps_its_node_free(tmp_path):
    node = [NodeInfo(node_id="a", host="ha", gpus=8)]
    ctl = controller(tmp_path, TickCluster(nodes=node),
                     {"profile": ["vllm", "trtllm"], "tp": [1, 8]}, order="declared")
    started = run(ctl)
    # declared: vllm tp1, vllm tp8, trtllm tp1, trtllm tp8; vllm tp1 starts, then vllm tp8
    # fits nowhere and keeps the node: trtllm tp1 does not slip in ahead of it
    assert [tp for _, tp in started] == [1, 8, 1, 8]


def test_one_trial_per_node(tmp_path):
    nodes = [NodeInfo(node_id="a", host="ha", gpus=4), NodeInfo(node_id="b", host="hb", gpus=4)]
    cluster = TickCluster(nodes=nodes)
    ctl = controller(tmp_path, cluster, {"profile": ["vllm", "trtllm"],
                                         "cuda_graphs": [True, False]}, trials_per_node=1)
    run(ctl)
    assert len(cluster.holds) == 4
    for node in ("a", "b"):
        spans = sorted((s, e) for n, _, s, e in cluster.holds if n == node)
        assert all(e1 is not None and e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


def test_a_gpu_type_pins_every_trial_to_its_nodes(tmp_path):
    nodes = [NodeInfo(node_id="a", host="ha", gpus=4, gpu_type="A100"),
             NodeInfo(node_id="h", host="hh", gpus=2, gpu_type="H100")]
    cluster = TickCluster(nodes=nodes)
    ctl = controller(tmp_path, cluster, {"profile": ["vllm", "trtllm"], "tp": [1, 2, 4]},
                     gpu_type="H100")
    run(ctl)
    results = list(ctl.ledger.results().values())
    tp4 = [r for r in results if r.config.tp == 4]
    assert [r.status for r in tp4] == [TrialStatus.INFEASIBLE] * 2  # H100 nodes have 2 GPUs
    assert {n for n, _, _, _ in cluster.holds} == {"h"}
    assert all(r.host["node_id"] == "h" for r in results if r.config.tp < 4)


def test_a_gpu_type_no_node_has_is_an_error_naming_what_there_is(tmp_path):
    nodes = [NodeInfo(node_id="a", host="ha", gpus=4, gpu_type="A100")]
    with pytest.raises(UsageError, match=r"gpu_type='L4'.*have: A100"):
        controller(tmp_path, TickCluster(nodes=nodes), MIXED, gpu_type="L4")


def test_a_lost_nodes_trial_is_retried_on_the_other_node(tmp_path):
    nodes = [NodeInfo(node_id="a", host="ha", gpus=2), NodeInfo(node_id="b", host="hb", gpus=2)]
    cluster = TickCluster(nodes=nodes, loadgens=[StandInLoadGen(dead=True)])
    ctl = controller(tmp_path, cluster, {"profile": ["vllm"]})
    run(ctl)
    (r,) = ctl.ledger.results().values()
    (attempt,) = [e for e in ctl.ledger.events() if e.type == "attempt"]
    assert (r.status, r.attempt) == (TrialStatus.OK, 2)
    assert attempt.host["node_id"] == "a" and r.host["node_id"] == "b"


def test_the_end_of_a_run_reaps_every_node_from_the_ledger(tmp_path):
    cluster = TickCluster(nodes=list(NODES))
    ctl = controller(tmp_path, cluster, {"profile": ["vllm"], "tp": [8, 4]})
    ctl.run()
    assert sorted(n for n, _, _ in cluster.reaped) == ["a", "b", "c"]  # every node asked
    by_node = {n: t for n, t, _ in cluster.reaped}
    assert sorted(t.key for ts in by_node.values() for t in ts) == sorted(ctl.results)
    for node, targets in by_node.items():  # each group to the node it ran on, by identity
        assert all(t.start_time == 777 and t.pid == 4242 for t in targets)
        assert {ctl.results[t.key].host["node_id"] for t in targets} <= {node}
    (reaped,) = [e for e in ctl.ledger.events() if e.type == "reaped"]
    assert reaped.complete and ctl.ledger.open_groups() == []


def test_a_failed_attempt_is_reaped_on_its_node_by_identity_not_by_marker(tmp_path):
    from actors.contracts.states import FailureClass
    from tests.unit.test_controller_ticks import StandInHost

    oom = StandInHost(fail={"wait_ready": FailureClass.STARTUP_OOM})
    cluster = TickCluster(nodes=list(NODES), hosts=[oom])
    ctl = controller(tmp_path, cluster, {"profile": ["vllm"], "tp": [4]})
    run(ctl)
    ((node, targets, sweeps),) = cluster.reaped
    assert (node, sweeps) == ("c", [])  # its node; a retry would carry the same marker
    assert [(t.pid, t.start_time) for t in targets] == [(4242, 777)]
