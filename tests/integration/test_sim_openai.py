"""The sim is a valid OpenAI endpoint: the official client streams from it and reads usage."""

from __future__ import annotations

import openai
import pytest

from tests.simserver import sim_config, sim_server


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with sim_server(sim_config(time_scale=0.05), tmp_path_factory.mktemp("sim")) as (u, _, _):
        yield u


def test_openai_client_streams_a_completion_with_usage(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["sim-model"]
    stream = client.completions.create(
        model="sim-model", prompt=[11, 12, 13, 14, 15], max_tokens=12, stream=True,
        stream_options={"include_usage": True}, temperature=0,
        extra_body={"min_tokens": 12, "ignore_eos": True})
    texts, usage = [], None
    for chunk in stream:
        if chunk.choices:
            texts.append(chunk.choices[0].text)
        if chunk.usage:
            usage = chunk.usage
    assert len(texts) == 12 and all(texts)
    assert usage.prompt_tokens == 5 and usage.completion_tokens == 12
    assert usage.total_tokens == 17


def test_openai_client_streams_chat_and_non_streaming(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "hello there"}],
        max_tokens=6, stream=True, stream_options={"include_usage": True},
        extra_body={"min_tokens": 6, "ignore_eos": True})
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.count(" t") == 6
    assert chunks[-1].usage.completion_tokens == 6
    whole = client.completions.create(model="sim-model", prompt="a b c", max_tokens=4,
                                      extra_body={"min_tokens": 4, "ignore_eos": True})
    assert whole.usage.completion_tokens == 4 and whole.usage.prompt_tokens == 3


def test_bad_request_is_a_400_the_client_raises(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model="sim-model", prompt=[1] * 4090, max_tokens=100)


def test_a_client_that_stops_reading_gets_every_token_as_its_own_event(tmp_path):
    """At time scale 0 the sim writes straight to the socket; while the client does not
    read, the socket backs up and the sim holds its frames, then sends them all: every
    token is still one event with its per-chunk usage, and the stream ends with [DONE]."""
    import json
    import socket
    import time

    from actors.loadgen.client import StreamCounter
    from actors.loadgen.records import RequestRecord
    from actors.loadgen.sse import SSEParser

    n = 2048  # ~0.5 MB of events: far past the sim's 64 KiB write backlog
    body = json.dumps({"model": "sim-model", "prompt": [7] * 16, "max_tokens": n,
                       "min_tokens": n, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True,
                                          "continuous_usage_stats": True}}).encode()
    with sim_server(sim_config(time_scale=0.0), tmp_path) as (url, _, _):
        host, port = url.removeprefix("http://").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
            sock.connect((host, int(port)))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(1.0)  # not reading: the sim must hold what does not fit
            raw = b""
            while not raw.endswith(b"0\r\n\r\n"):
                part = sock.recv(1 << 16)
                assert part, "connection closed before the end of the body"
                raw += part
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0] and b"chunked" in head.lower()
    payload, pos = b"", 0
    while True:  # undo the chunked framing
        nl = chunked.index(b"\r\n", pos)
        size = int(chunked[pos:nl], 16)
        if size == 0:
            break
        payload += chunked[nl + 2:nl + 2 + size]
        pos = nl + 2 + size + 2
    events = SSEParser().feed(payload)
    rec = RequestRecord(0, 0)
    counter = StreamCounter(rec)
    per_event = [counter.event(e) for e in events]
    assert events[-1] == b"[DONE]" and counter.done
    assert per_event.count(1) == n and set(per_event) == {0, 1}  # one token per event
    assert rec.completion_tokens == n and rec.prompt_tokens == 16
