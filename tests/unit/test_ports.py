"""Engine ports: drawn from outside the kernel's ephemeral range, free by a bind test; the
LISTEN sockets of a port read from /proc/net/tcp (issue 14, "Ports and health")."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import pytest

from actors.engines import get_adapter
from actors.procs import (
    PORT_SPAN,
    RAY_WORKER_PORTS,
    choose_port,
    engine_port_range,
    listening_inodes,
    port_is_free,
    port_listeners,
    read_port_range,
)

#: ephemeral ranges seen in the wild (Linux's default, IANA's, a widened one, odd ones)
RANGES = [(32768, 60999), (49152, 65535), (1024, 65000), (10000, 60000), (15000, 64000),
          (20000, 65535), (40000, 40000), (60000, 61000), (10000, 30000)]


def _range_file(tmp_path: Path, low: int, high: int) -> Path:
    f = tmp_path / "ip_local_port_range"
    f.write_text(f"{low}\t{high}\n")  # the kernel's format
    return f


@pytest.mark.parametrize("ephemeral", RANGES, ids=[f"{a}-{b}" for a, b in RANGES])
def test_the_chooser_never_returns_a_port_of_the_ephemeral_range(tmp_path, ephemeral):
    low, high = ephemeral
    f = _range_file(tmp_path, low, high)
    rng = random.Random(14)
    ports = [choose_port("127.0.0.1", rng=rng, range_file=f, is_free=lambda h, p: True)
             for _ in range(2000)]
    assert not [p for p in ports if low <= p <= high]
    assert all(PORT_SPAN[0] <= p <= PORT_SPAN[1] for p in ports)
    assert len(set(ports)) > 1


def test_the_range_is_the_largest_gap_outside_the_ephemeral_and_ray_worker_ports():
    assert engine_port_range((32768, 60999)) == (20000, 32767)  # Linux's default
    assert engine_port_range((49152, 65535)) == (20000, 49151)
    assert engine_port_range((10000, 60000)) == (60001, 65535)  # above it: the only room
    assert engine_port_range((20000, 65535)) == (10000, 19999)  # too little beside Ray's
    assert engine_port_range((32768, 60999), reserved=()) == (10000, 32767)
    lo, hi = engine_port_range((32768, 60999))
    assert hi < 32768 and lo > RAY_WORKER_PORTS[1]
    # no port outside the ephemeral range at all: the span less Ray's ports (bind test and
    # the host's listener check still guard it)
    assert engine_port_range((1024, 65535)) == (20000, 65535)
    assert engine_port_range(None) == (20000, 65535)  # the file could not be read


def test_the_range_file_is_read_not_assumed(tmp_path):
    assert read_port_range(_range_file(tmp_path, 40000, 50000)) == (40000, 50000)
    assert read_port_range(tmp_path / "missing") is None
    (tmp_path / "bad").write_text("x y")
    assert read_port_range(tmp_path / "bad") is None
    real = read_port_range()
    assert real is not None and real[0] <= real[1]


def test_the_chooser_skips_taken_and_excluded_ports(tmp_path):
    # 20000-20099 is too little beside Ray's ports: the range is 10000-20099
    f = _range_file(tmp_path, 20100, 65535)
    taken = set(range(10000, 15000))
    ports = {choose_port("127.0.0.1", rng=random.Random(i), range_file=f, exclude={15001},
                         is_free=lambda h, p: p not in taken) for i in range(300)}
    assert ports and not ports & taken and 15001 not in ports
    assert all(15000 <= p <= 20099 for p in ports)


def test_bind_test_sees_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        assert not port_is_free("0.0.0.0", port)
    assert port_is_free("127.0.0.1", port)


TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4E21 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0
   1: 0100007F:4E21 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0
   2: 00000000:4E22 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0
   3: garbage
"""
TCP6 = "\n".join([
    "  sl  local_address                         remote_address                        st",
    "   0: 00000000000000000000000000000000:4E21 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1000        0 444 1 0",
])


def test_listening_inodes_of_a_port_from_both_tables():
    assert listening_inodes(0x4E21, [TCP, TCP6]) == {111, 444}  # LISTEN only, v4 and v6
    assert listening_inodes(0x4E22, [TCP, TCP6]) == {333}
    assert listening_inodes(1, [TCP, TCP6, "", "x\ny"]) == set()


def test_port_listeners_tells_ours_from_foreign():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        listeners, foreign = port_listeners(port, None, "no-such-marker/x") or (set(), set())
        assert len(listeners) == 1 and foreign == listeners  # this process is no trial's
        # held by a process of the group: ours
        assert port_listeners(port, os.getpgid(0), "no-such-marker/x") == (listeners, set())
        assert port_listeners(port, None, "x", known=listeners) == (listeners, set())
    assert port_listeners(port, None, "x") == (set(), set())


def test_every_process_engine_retries_a_taken_port_from_its_exit():
    """The adapters classify a bind failure as port_in_use (the host retries it)."""
    line = "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', " \
           "20001): address already in use"
    for name in ("sim", "vllm", "trtllm"):
        a = get_adapter(name)
        events = a.parse_log_line("Traceback (most recent call last):") + a.parse_log_line(line)
        assert a.classify_exit(events, 1) == "port_in_use", name
