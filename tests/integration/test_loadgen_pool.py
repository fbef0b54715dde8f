"""The lean transport's pool against a real server that misbehaves between requests."""

from __future__ import annotations

import asyncio

import pytest

from actors.loadgen import fastread
from actors.loadgen.pool import ConnectionPool, stream_request_lean
from actors.loadgen.records import RequestRecord

pytestmark = pytest.mark.timeout(30)

TOKEN = (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" a",'
         b'"finish_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":%d,'
         b'"completion_tokens":%d}}\n\n')
N = 3


def chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


async def serve(writers: list[asyncio.StreamWriter], reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter) -> None:
    """Answer each request with N tokens (per-chunk usage), a usage chunk and [DONE]."""
    writers.append(writer)
    try:
        await _answer(reader, writer)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed the connection


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for k in range(1, N + 1):
            writer.write(chunk(TOKEN % (4 + k, k)))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(chunk(b'data: {"choices":[],"usage":{"prompt_tokens":4,'
                           b'"completion_tokens":%d}}\n\n' % N) + chunk(b"data: [DONE]\n\n")
                     + b"0\r\n\r\n")
        await writer.drain()


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_bytes_on_an_idle_connection_close_it_and_spare_the_others(native: bool):
    """A server that writes to a keep-alive connection between requests: that connection is
    closed (its bytes belong to no request), no exception escapes into the event loop, and
    the next requests complete exactly on other connections."""
    if native and fastread.reader(1, 1) is None:
        pytest.skip(f"no native read pass here: {fastread.why_not()}")

    async def main() -> tuple[list[RequestRecord], bool, list[dict]]:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        writers: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda r, w: serve(writers, r, w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        body = {"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": N, "stream": True}
        try:
            async with ConnectionPool(f"http://127.0.0.1:{port}", native_read=native) as pool:
                assert (pool.native is not None) == native
                first = RequestRecord(0, 0)
                await stream_request_lean(pool, "/v1/completions", body, first)
                idle = pool._idle[0]  # the first request's connection, kept alive
                writers[0].write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nhello\r\n")  # unsolicited: no request is waiting
                await asyncio.sleep(0.05)  # read while the connection is idle
                closed = idle.closed
                recs = [RequestRecord(i, 0) for i in range(1, 5)]
                await asyncio.gather(*(stream_request_lean(pool, "/v1/completions", body, r)
                                       for r in recs))
                await asyncio.sleep(0.05)
                return [first] + recs, closed, list(errors)  # (before shutdown)
        finally:
            server.close()

    recs, idle_closed, errors = asyncio.run(main())
    assert idle_closed and not errors
    assert all(r.ok and r.completion_tokens == r.chunk_tokens == N for r in recs), \
        [(r.error, r.error_detail, r.chunk_tokens) for r in recs]
