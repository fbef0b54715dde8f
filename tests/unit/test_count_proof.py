"""The count proof: every source counted on its own from the bytes, then judged."""

from __future__ import annotations

import json

import pytest

from actors.loadgen.client import StreamCounter
from actors.loadgen.proof import Verdict, judge, prove, text_tolerance
from actors.loadgen.records import RequestRecord, StreamProof


def _event(text: str, ids: list[int] | None = None, usage: int | None = None) -> bytes:
    choice: dict = {"index": 0, "text": text, "finish_reason": None}
    if ids is not None:
        choice["token_ids"] = ids
    ev: dict = {"choices": [choice]}
    if usage is not None:
        ev["usage"] = {"prompt_tokens": 8, "completion_tokens": usage}
    return b"data: " + json.dumps(ev).encode() + b"\n\n"


def _final(n: int) -> bytes:
    return (b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 8,
                                                             "completion_tokens": n}}).encode()
            + b"\n\n")


def _framed(*events: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events)


def test_every_source_is_counted_from_plain_and_framed_reads_alike():
    rec = RequestRecord(index=0, round=0)
    rec.body = [(True, _framed(_event(" a", [5], 1), _event(" b c", [6, 7], 3))),
                (False, _event(" d", [8], 4) + _final(4) + b"data: [DONE]\n\n")]
    p = prove(rec)
    assert (p.token_ids, p.chunk_usage, p.final_usage, p.final_prompt, p.chunks) == \
        (4, 4, 4, 8, 3)
    assert p.text == " a b c d" and rec.body == [] and rec.proof is p


def test_a_source_missing_from_any_token_chunk_is_no_source():
    rec = RequestRecord(index=0, round=0)
    rec.body = [(False, _event(" a", [5], 1) + _event(" b") + _final(2))]
    p = prove(rec)
    assert p.token_ids is None and p.chunk_usage is None and p.final_usage == 2


def test_role_only_and_empty_chunks_carry_no_token():
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    rec = RequestRecord(index=0, round=0)
    rec.body = [(False, role + _event(" a", [5]) + _final(1))]
    assert prove(rec).chunks == 1 and rec.proof.token_ids == 1


def test_the_tokenizer_counts_the_text_only_when_no_ids_were_sent(tokenizer_dir):
    from actors.loadgen.prompts import load_tokenizer

    tok = load_tokenizer(str(tokenizer_dir))
    rec = RequestRecord(index=0, round=0)
    rec.body = [(False, _event(" the") + _event(" self") + _final(2))]
    assert prove(rec, tok).text_tokens == 2
    rec.body = [(False, _event(" the", [1]) + _final(1))]
    assert prove(rec, tok).text_tokens is None  # ids are exact: no need to re-encode


@pytest.mark.parametrize("proof, verdict, source", [
    (StreamProof(token_ids=4, chunk_usage=4, final_usage=4), Verdict.VERIFIED, "token ids"),
    (StreamProof(chunk_usage=4, final_usage=4), Verdict.VERIFIED, "per-chunk usage"),
    (StreamProof(final_usage=4, text_tokens=5), Verdict.VERIFIED, "tokenizer"),
    (StreamProof(final_usage=4), Verdict.UNVERIFIED, "usage only"),
    (StreamProof(final_usage=40, text_tokens=30), Verdict.UNVERIFIED, "usage, text disagrees"),
    (StreamProof(chunk_usage=40, final_usage=40, text_tokens=30), Verdict.UNVERIFIED,
     "usage, text disagrees"),
    (StreamProof(token_ids=3, final_usage=4), Verdict.USAGE_MISMATCH, ""),
    (StreamProof(token_ids=3, chunk_usage=4, final_usage=4), Verdict.USAGE_MISMATCH, ""),
    (StreamProof(token_ids=3, chunk_usage=3, final_usage=3), Verdict.COUNT_MISMATCH, ""),
])
def test_judge(proof: StreamProof, verdict: Verdict, source: str):
    want = 40 if proof.final_usage == 40 else 4
    j = judge(proof, want)
    assert (j.verdict, j.source) == (verdict, source), j


def test_a_mismatch_names_every_count():
    j = judge(StreamProof(token_ids=200, chunk_usage=256, final_usage=256), 256)
    assert j.detail == "counts disagree: token ids 200, per-chunk usage 256, usage 256"


def test_text_tolerance_is_two_tokens_or_two_percent():
    assert text_tolerance(16) == 2 and text_tolerance(256) == 5 and text_tolerance(1000) == 20


def test_the_slow_path_counts_token_ids_per_chunk_and_says_when_it_guessed():
    rec = RequestRecord(index=0, round=0)
    c = StreamCounter(rec)
    c.feed(_event(" a b", [1, 2]), 1.0)
    assert rec.counts == [2] and rec.counts_known
    c.feed(_event(" c d"), 2.0)
    assert rec.counts == [2, 1] and not rec.counts_known  # one per chunk: a guess


@pytest.mark.parametrize("text", [
    '{"choices":[{"text":" a","token_ids":[7]}]}', ' {"a":1}', '{"a":1} ', '{"a":1}\n',
    '{"a":1},{"b":2}', '{"a":1} x', '{"x":[{"y":1}', '{"z":2}]}', '[1,2]', '"s"', '', '{',
    '{"a":NaN}', '  ',
])
def test_the_proofs_json_reads_an_event_exactly_as_json_loads(text: str):
    """The proof's faster decoder takes an event only when one JSON value spans it
    exactly; anything else is judged by ``json.loads`` (whitespace, extra data, a value cut
    in two by a lying server): the same value, or the same refusal."""
    import json

    from actors.loadgen.proof import _event_json

    try:
        want: object = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _event_json(text)
        return
    assert _event_json(text) == want
