"""Incremental parser of Server-Sent Events as OpenAI-compatible servers stream them."""

from __future__ import annotations

__all__ = ["SSEParser", "DONE"]

DONE = b"[DONE]"


class SSEParser:
    """Feed raw bytes as they arrive; get back the ``data`` payload of each complete event.

    Handles events split across reads, several events in one read, CRLF line
    ends, multi-line ``data`` (joined with a newline), ``:`` keep-alive
    comments and fields other than ``data`` (ignored). A final event without
    its blank line is returned by ``flush``.
    """

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if not self._buf and not self._data and chunk.endswith(b"\n\n"):
            # common case: whole one-line ``data:`` events, LF line ends
            events = chunk[:-2].split(b"\n\n")
            for ev in events:
                if not ev.startswith(b"data: ") or b"\n" in ev:
                    break
            else:
                return [ev[6:] for ev in events]
        buf = self._buf + chunk if self._buf else chunk
        out: list[bytes] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            # comments (":") and other fields (event:, id:, retry:) carry nothing we use
        self._buf = buf[start:]
        return out

    def flush(self) -> list[bytes]:
        """Events left when the stream ended without a trailing blank line."""
        tail = self.feed(b"\n\n") if self._buf or self._data else []
        self._buf = b""
        return tail
