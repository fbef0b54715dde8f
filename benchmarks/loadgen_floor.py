"""The floor: what reading one token per ``recvmsg`` costs a Python process on this machine.

A minimal synchronous client, no asyncio, no records, no error handling: N keep-alive
connections to the C SSE server (pinned to core 0), one ``epoll`` set, ``recvmsg`` with
kernel receive timestamps (as the lean transport does), the same whole-chunk scan for
``completion_tokens``, one arrival time appended per read. Prints tokens/s and the
process's user and system CPU microseconds per token. It is the lower bound any Python
client can reach here with one read per token: compare ``loadgen_capacity.py``'s
``CPU us/tok`` of the lean transport with it.

    .venv/bin/python benchmarks/loadgen_floor.py --step-ms 5 --streams 256       # ~5 s

``--clients c`` runs ``floor_client.c`` instead (built with gcc into benchmarks/results/):
the same reads with no interpreter at all, so its CPU per token is the kernel's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import select
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import run_floor, sse_server  # noqa: E402

_COMPLETION = re.compile(rb'"completion_tokens":(\d+)')
_TS = socket.CMSG_SPACE(16)
_SO_TIMESTAMPNS = 35


def request(tokens: int) -> bytes:
    body = json.dumps({"model": "m", "prompt": [1] * 32, "max_tokens": tokens,
                       "min_tokens": tokens, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True,
                                          "continuous_usage_stats": True}}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def run(port: int, streams: int, tokens: int, per_stream: int) -> dict:
    req = request(tokens)
    ep = select.epoll()
    conns: dict[int, list] = {}  # fd -> [socket, last usage, arrivals, requests done, in head]
    for _ in range(streams):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        conns[s.fileno()] = [s, 0, [], 0, True]
        ep.register(s.fileno(), select.EPOLLIN)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for c in conns.values():
        c[0].send(req)
    got = reads = 0
    active = streams
    while active:
        for fd, _ in ep.poll():
            c = conns[fd]
            data, anc, _, _ = c[0].recvmsg(65536, _TS)
            c[2].append(anc[0][2] if anc else time.perf_counter())
            reads += 1
            if c[4]:  # the response head (it comes alone: the C server sends it at once)
                data = data[data.find(b"\r\n\r\n") + 4:]
                c[4] = False
            pos, n, last, end_of_body = 0, len(data), -1, False
            while pos < n:  # whole chunks, each one event
                nl = data.find(b"\r\n", pos, pos + 10)
                size = int(data[pos:nl], 16)
                if size == 0:
                    end_of_body = True
                    break
                start, stop = nl + 2, nl + 2 + size
                if data.startswith(b"data: {", start):
                    m = _COMPLETION.search(data, start, stop)
                    if m is not None:
                        last = int(m.group(1))
                pos = stop + 2
            if last >= 0:
                got += last - c[1]
                c[1] = last
            if end_of_body:
                c[1], c[3] = 0, c[3] + 1
                if c[3] < per_stream:
                    c[0].send(req)
                    c[4] = True
                else:
                    active -= 1
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    user, system = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    for c in conns.values():
        c[0].close()
    return {"tok_s": round(got / wall), "tokens": got, "reads": reads,
            "tokens_per_read": round(got / reads, 2),
            "user_us_per_token": round(1e6 * user / got, 1),
            "sys_us_per_token": round(1e6 * system / got, 1),
            "cpu_frac": round((user + system) / wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--clients", default="python,c",
                    help="python (this loop), c (floor_client.c: the same reads in C, the "
                         "kernel's share alone)")
    a = ap.parse_args()
    with sse_server(a.step_ms, cpus="0", kind="c") as srv:
        for client in a.clients.split(","):
            if client == "c":
                out = run_floor(srv["url"], a.streams, a.tokens, a.requests_per_stream, "1")
            else:
                os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
                port = int(srv["url"].rsplit(":", 1)[1])
                out = run(port, a.streams, a.tokens, a.requests_per_stream)
            print(json.dumps({"client": client, "step_ms": a.step_ms, "streams": a.streams,
                              "offered_tok_s": (round(a.streams / a.step_ms * 1e3)
                                                if a.step_ms else None), **out}))


if __name__ == "__main__":
    main()
