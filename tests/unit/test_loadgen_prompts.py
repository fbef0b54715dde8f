"""Prompts: exact token-id lengths, distinct heads, chat text sized with a tokenizer."""

from __future__ import annotations

from types import SimpleNamespace

from actors.loadgen.prompts import PromptFactory, load_tokenizer, usable_token_ids


class MergingTokenizer:
    """A stand-in whose round trip changes lengths: ids map to 1- or 2-letter pieces, decode
    concatenates them and encode splits text greedily into 2-letter tokens."""

    def __init__(self) -> None:
        letters = "abcdefghij"
        self.pieces = [c for c in letters] + [a + b for a in letters for b in letters]
        self.index = {p: i for i, p in enumerate(self.pieces)}

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i % len(self.pieces)] for i in ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        out, i = [], 0
        while i < len(text):
            step = 2 if text[i:i + 2] in self.index else 1
            out.append(self.index[text[i:i + step]])
            i += step
        return SimpleNamespace(ids=out)


def test_token_id_prompts_have_exact_length_and_distinct_heads():
    f = PromptFactory(list(range(100, 200)), 24, shared_prefix=4, seed=1)
    prompts = [f.make(i, salt=3) for i in range(300)]
    assert all(len(p) == 24 for p in prompts)
    assert all(p[:4] == prompts[0][:4] for p in prompts)  # the shared prefix
    assert len({tuple(p[4:8]) for p in prompts}) == 300  # no other common prefix
    assert f.make(5, salt=3) == prompts[5]  # deterministic


def test_prompts_of_another_run_share_no_prefix():
    """Two runs with the same seed against one server (trials of an ``external`` endpoint,
    benchmark runs back to back) must not hit each other's prefix cache: every prompt of one
    differs from every prompt of the other within its first 8 tokens (the shared prefix,
    asked for, aside); a given nonce rebuilds its run's prompts exactly."""
    ids = list(range(100, 200))
    a, b = (PromptFactory(ids, 64, seed=7) for _ in range(2))
    assert a.nonce != b.nonce
    heads_a = {tuple(a.make(i, salt=s)[:8]) for i in range(200) for s in (0, 1)}
    heads_b = {tuple(b.make(i, salt=s)[:8]) for i in range(200) for s in (0, 1)}
    assert len(heads_a) == 400 and not heads_a & heads_b
    again = PromptFactory(ids, 64, seed=7, nonce=a.nonce)
    assert [again.make(i, 1) for i in range(20)] == [a.make(i, 1) for i in range(20)]
    shared = [PromptFactory(ids, 64, shared_prefix=16, seed=7) for _ in range(2)]
    assert shared[0].make(0)[:16] != shared[1].make(0)[:16]  # nor the shared prefix
    assert a.make_text(3, 1) != b.make_text(3, 1)


def test_chat_text_without_tokenizer_is_counted_in_words():
    f = PromptFactory(list(range(100, 200)), 40, seed=0)
    assert len(f.make_text(7, 1).split()) == 40


def test_chat_text_is_sized_with_the_tokenizer_after_a_round_trip():
    tok = MergingTokenizer()
    f = PromptFactory(list(range(0, 110)), 50, seed=0, tokenizer=tok)
    for i in range(50):
        text = f.make_text(i, 2)
        assert len(tok.encode(text).ids) == 50, i


def test_usable_ids_and_tokenizer_fallbacks(tmp_path):
    ids = usable_token_ids(1000)
    assert ids[0] == 100 and ids[-1] == 999
    assert load_tokenizer(None) is None and load_tokenizer(str(tmp_path)) is None
