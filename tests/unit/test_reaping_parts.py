"""The pure parts of reaping and placement: routing ledger groups to nodes, Ray's node
entries, nvidia-smi's GPU names, where the cgroup v2 tree is."""

from __future__ import annotations

from actors.cgroups import cgroup2_mount, own_cgroup
from actors.gpus import parse_smi
from actors.proctree import _parse_stat
from orchestrator.execution.cluster import NodeInfo, node_info
from orchestrator.execution.reaping import route
from orchestrator.results.events import Started

NODES = [NodeInfo(node_id="n1", host="h1"), NodeInfo(node_id="n2", host="h2")]


def test_groups_go_to_their_node_else_to_a_node_on_their_host():
    groups = [Started(key="a", node_id="n1", host="h1"),
              Started(key="b", node_id="old-id", host="h2"),  # its raylet restarted
              Started(key="c", node_id="gone", host="h9")]
    routed, unreached = route(groups, NODES)
    assert {n: [g.key for g in gs] for n, gs in routed.items()} == {"n1": ["a"], "n2": ["b"]}
    assert unreached == ["gone"]


def test_a_ray_node_entry_gives_gpus_type_and_labels():
    raw = {"NodeID": "x", "NodeManagerHostname": "h", "Alive": True,
           "Resources": {"GPU": 8.0, "CPU": 4.0, "accelerator_type:H100": 1.0},
           "Labels": {"ray.io/node-id": "x", "pool": "a"}}
    n = node_info(raw)
    assert (n.gpus, n.gpu_type, n.labels["pool"], n.host) == (8, "H100", "a", "h")
    raw["Labels"]["ray.io/accelerator-type"] = "H200"  # the label wins over the resource
    assert node_info(raw).gpu_type == "H200"
    assert node_info({"NodeID": "y"}).gpus == 0


def test_nvidia_smi_names_of_the_assigned_gpus():
    text = ("0, GPU-aaa, NVIDIA H200\n1, GPU-bbb, NVIDIA H200\n"
            "2, GPU-ccc, NVIDIA A100-SXM4-80GB\n")
    assert parse_smi(text, ["0", "1"]) == "NVIDIA H200"
    assert parse_smi(text, ["GPU-ccc"]) == "NVIDIA A100-SXM4-80GB"
    assert parse_smi(text, ["1", "2"]) == "NVIDIA A100-SXM4-80GB + NVIDIA H200"
    assert parse_smi("", ["0"]) is None


def test_the_cgroup2_mount_and_this_process_cgroup_are_read():
    hybrid = ("30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    assert str(cgroup2_mount(hybrid)) == "/sys/fs/cgroup/unified"
    assert cgroup2_mount("30 25 0:26 / /x rw - ext4 /dev/sda rw\n") is None
    assert own_cgroup("4:memory:/a\n0::/user.slice/x.scope\n") == "/user.slice/x.scope"
    assert own_cgroup("0::/\n") == "/" and own_cgroup("4:memory:/a\n") is None


def test_a_stat_line_with_spaces_and_parentheses_in_the_name_parses():
    line = ("4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
            "987654 1000 10 18446744073709551615")
    st = _parse_stat(4242, line)
    assert st is not None and (st.ppid, st.pgid, st.sid, st.state, st.start_time) == \
        (1, 4242, 4242, "S", 987654)
