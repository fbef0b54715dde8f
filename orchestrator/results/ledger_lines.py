"""A ledger line's seal: each line carries a checksum of itself, so damage is never silent.

A sealed line is the event's JSON with one more key at its end, ``"sum"``: the first 16
hex digits of the SHA-256 of the line as it would read without that key. ``unseal`` checks
it on the raw text, byte for byte (no re-serialisation). A ledger is sealed when any of its
lines is; then every line must be. Ledgers written before seals (the committed H200
fixtures, for one) have none and are read as they are.

What a read meets, line by line (``scan``):

- a good line: its event text (without the seal);
- a torn last line: not JSON and not ended by a newline (a crash mid-write). It never
  counted; the next append ends it. Reported once, softly;
- a damaged line: anything else that does not check out (bad JSON, a seal that does not
  match, an unsealed line in a sealed ledger). Reported with its number and what it held
  as far as it can be told (``Damage``); never skipped in silence.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["seal", "unseal", "Damage", "scan", "SUM_KEY"]

SUM_KEY = "sum"
_TAIL = re.compile(r',"sum":"([0-9a-f]{16})"\}$')
_KIND = re.compile(r'"type"\s*:\s*"([a-z_]+)"')
_KEY = re.compile(r'"key"\s*:\s*"([0-9a-f]{6,64})"')


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def seal(event_json: str) -> str:
    """``{...}`` -> ``{...,"sum":"<16 hex>"}`` (one JSON object, one line)."""
    if not event_json.endswith("}"):
        raise ValueError("a ledger event is one JSON object")
    return f'{event_json[:-1]},"{SUM_KEY}":"{_digest(event_json)}"}}'


def unseal(line: str) -> tuple[str, bool | None]:
    """(the event's text, True: the seal checks / False: it does not / None: no seal)."""
    m = _TAIL.search(line)
    if not m:
        return line, None
    body = line[:m.start()] + "}"
    return body, _digest(body) == m.group(1)


@dataclass(frozen=True)
class Damage:
    """A line that does not check out: where, why, and what it seems to have held."""

    line: int
    why: str
    kind: str | None  # the event kind its text still names, if any
    key: str | None  # the trial key its text still names, if any
    text: str

    def describe(self) -> str:
        held = (f"a {self.kind!r} event" if self.kind else "an unreadable event") + (
            f" of trial {self.key}" if self.key else "")
        return f"line {self.line}: {self.why}; it held {held}"

    @property
    def lost_trial(self) -> str | None:
        """The trial whose final result this line held (it must run again), if any."""
        return self.key if self.kind == "trial" else None


def scan(text: str) -> Iterator[tuple[int, str | None, Damage | None, bool]]:
    """Every line of a ledger's text: (number, event text or None, damage or None, torn)."""
    lines = text.split("\n")
    ended = text.endswith("\n")
    if ended:
        lines = lines[:-1]
    sealed = any(_TAIL.search(raw) for raw in lines)
    for n, raw in enumerate(lines, 1):
        last = n == len(lines)
        body, ok = unseal(raw)
        if ok is False:
            yield n, None, _damage(n, "its checksum does not match its text", raw), False
            continue
        try:
            json.loads(body)
        except json.JSONDecodeError:
            if last and not ended:
                yield n, None, None, True  # torn by a crash mid-write
            else:
                yield n, None, _damage(n, "not JSON", raw), False
            continue
        if ok is None and sealed:
            yield n, None, _damage(n, "no checksum in a sealed ledger", raw), False
            continue
        yield n, body, None, False


def _damage(n: int, why: str, raw: str) -> Damage:
    kind, key = _KIND.search(raw), _KEY.search(raw)
    return Damage(n, why, kind.group(1) if kind else None, key.group(1) if key else None,
                  raw[:4000])
