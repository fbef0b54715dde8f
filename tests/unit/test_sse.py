"""SSE parsing and token counting: split reads, multi-token chunks, [DONE], errors, comments."""

from __future__ import annotations

import json

import pytest

from actors.loadgen.client import StreamCounter
from actors.loadgen.records import RequestRecord
from actors.loadgen.sse import DONE, SSEParser
from tests.conftest import FIXTURES

VLLM = FIXTURES / "vllm-cpu"


def _events(raw: bytes, sizes: list[int] | None = None) -> list[bytes]:
    p = SSEParser()
    out: list[bytes] = []
    if sizes is None:
        out += p.feed(raw)
    else:
        i = 0
        for n in sizes:
            out += p.feed(raw[i:i + n])
            i += n
        out += p.feed(raw[i:])
    return out + p.flush()


def test_whole_events_in_one_read():
    assert _events(b"data: a\n\ndata: b\n\ndata: [DONE]\n\n") == [b"a", b"b", DONE]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 50])
def test_events_split_across_reads_at_any_byte(step: int):
    raw = b'data: {"x": 1}\n\ndata: {"y": 22}\n\ndata: [DONE]\n\n'
    sizes = [step] * (len(raw) // step)
    assert _events(raw, sizes) == [b'{"x": 1}', b'{"y": 22}', DONE]


def test_crlf_line_ends_and_a_split_between_cr_and_lf():
    raw = b"data: one\r\n\r\ndata: two\r\n\r\n"
    assert _events(raw) == [b"one", b"two"]
    assert _events(raw, [10, 1]) == [b"one", b"two"]  # "\r" | "\n" split


def test_keep_alive_comments_and_other_fields_are_ignored():
    raw = b": ping\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n:\n\n"
    assert _events(raw) == [b"x"]


def test_multi_line_data_is_joined_with_newline():
    assert _events(b"data: a\ndata: b\n\n") == [b"a\nb"]


def test_data_without_space_and_empty_data():
    assert _events(b"data:x\n\ndata:\n\n") == [b"x", b""]


def test_final_event_without_blank_line_comes_from_flush():
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert p.flush() == [DONE]
    assert p.flush() == []


# -- token counting --------------------------------------------------------------------------

def _count(raw: bytes, reads: list[bytes] | None = None) -> RequestRecord:
    rec = RequestRecord(index=0, round=0)
    c = StreamCounter(rec)
    for t, chunk in enumerate(reads if reads is not None else [raw]):
        c.feed(chunk, float(t))
    c.finish(99.0)
    return rec


def _chunk(i: int, per_chunk_usage: bool = True, text: str = "t", prompt: int = 8) -> bytes:
    ev = {"id": "x", "object": "text_completion",
          "choices": [{"index": 0, "text": text, "finish_reason": None}]}
    if per_chunk_usage:
        ev["usage"] = {"prompt_tokens": prompt, "completion_tokens": i,
                       "total_tokens": prompt + i}
    return b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n"


def _final(n: int, prompt: int = 8) -> bytes:
    return (b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,'
            b'"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (prompt, n, prompt + n))


def test_per_chunk_usage_counts_k_tokens_for_a_multi_token_chunk():
    reads = [_chunk(1), _chunk(2), _chunk(5), _chunk(6) + _final(6)]
    rec = _count(b"", reads)
    assert rec.ok
    assert rec.counts == [1, 1, 3, 1]
    assert rec.arrivals == [0.0, 1.0, 2.0, 3.0]
    assert rec.first_token == 0.0
    assert (rec.prompt_tokens, rec.completion_tokens, rec.chunk_tokens) == (8, 6, 6)


def test_events_in_one_read_share_its_arrival_time():
    rec = _count(b"", [_chunk(1), _chunk(2) + _chunk(3) + _chunk(4), _final(4)])
    assert rec.arrivals == [0.0, 1.0] and rec.counts == [1, 3]


def test_without_per_chunk_usage_one_token_per_non_empty_chunk():
    reads = [_chunk(0, False), _chunk(0, False, text=""), _chunk(0, False), _final(3)]
    rec = _count(b"", reads)
    assert rec.ok
    assert rec.counts == [1, 1]  # the empty chunk carries no token
    assert rec.chunk_tokens == 2 and rec.completion_tokens == 3  # reconciled in the level


def test_pretty_printed_json_takes_the_slow_path_with_the_same_result():
    ev = {"choices": [{"index": 0, "text": "a"}], "usage": {"prompt_tokens": 8,
                                                            "completion_tokens": 2}}
    raw = _chunk(1) + b"data: " + json.dumps(ev).encode() + b"\n\n" + _final(2)
    rec = _count(raw)
    assert rec.ok and rec.counts == [2] and rec.completion_tokens == 2


def test_error_event_is_classified():
    raw = _chunk(1) + b'data: {"error": {"message": "boom", "code": 500}}\n\ndata: [DONE]\n\n'
    rec = _count(raw)
    assert rec.error == "server_error" and "boom" in rec.error_detail


def test_stream_without_done_is_truncated():
    rec = _count(_chunk(1) + _chunk(2))
    assert rec.error == "truncated"
    assert rec.chunk_tokens == 2


def test_bad_json_raises_for_the_transport_to_classify():
    with pytest.raises(ValueError):
        _count(b"data: {not json\n\n")


@pytest.mark.parametrize("name, prompt, out", [
    ("sse-completions-0.32.0.txt", 32, 16),
    ("sse-completions-0.32.0-multitoken-chunk.txt", 32, 16),
    ("sse-completions-0.32.0-empty-text-chunks.txt", 32, 128),
    ("sse-chat-0.32.0.txt", 20, 16),
])
def test_real_vllm_streams_count_exactly(name: str, prompt: int, out: int):
    raw = (VLLM / name).read_bytes()
    for reads in ([raw], [raw[i:i + 97] for i in range(0, len(raw), 97)]):
        rec = _count(b"", reads)
        assert rec.ok, rec.error_detail
        assert rec.prompt_tokens == prompt
        assert rec.completion_tokens == out
        assert rec.chunk_tokens == out  # per-chunk usage: no reconciliation needed


def test_fast_and_slow_paths_agree_on_every_fixture_event():
    for f in VLLM.glob("sse-*.txt"):
        fast, slow = StreamCounter(RequestRecord(0, 0)), StreamCounter(RequestRecord(0, 0))
        for data in _events(f.read_bytes()):
            assert fast.event(data) == slow._slow_event(data), (f.name, data[:120])
        assert (fast.rec.prompt_tokens, fast.rec.completion_tokens) == \
            (slow.rec.prompt_tokens, slow.rec.completion_tokens)
