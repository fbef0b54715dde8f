"""One streaming request against an OpenAI-compatible server (aiohttp).

Matched work: ``ignore_eos``, ``min_tokens = max_tokens = N``, temperature 0 and
``stream_options.include_usage``. Where the server reports usage per chunk
(``continuous_usage_stats``: vLLM and the sim), a chunk carrying k tokens counts
k; elsewhere one token per non-empty chunk, reconciled with the final usage.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from actors.loadgen.results import RequestRecord
from actors.loadgen.sse import DONE, SSEParser

__all__ = ["build_body", "stream_request"]


def build_body(model: str, api: str, prompt: list[int] | str, output_tokens: int,
               per_chunk_usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model, "max_tokens": output_tokens, "min_tokens": output_tokens,
        "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": per_chunk_usage},
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return delta.get("content") or delta.get("reasoning_content") or ""


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                         rec: RequestRecord, headers: dict[str, str] | None = None) -> None:
    """Send ``body`` to ``url`` and fill ``rec``; errors are classified into ``rec.error``."""
    parser = SSEParser()
    last_usage = 0
    rec.start = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                rec.error = f"http_{resp.status}"
                rec.error_detail = (await resp.text())[:300]
                return
            done = False
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                got = 0  # events that arrive in one read share one arrival time
                for data in parser.feed(chunk):
                    if data == DONE:
                        done = True
                        continue
                    ev = json.loads(data)
                    if "error" in ev:
                        rec.error = "server_error"
                        rec.error_detail = str(ev["error"])[:300]
                        continue
                    usage = ev.get("usage")
                    choices = ev.get("choices") or []
                    k = 0
                    if choices:
                        if usage and usage.get("completion_tokens") is not None:
                            k = usage["completion_tokens"] - last_usage
                            last_usage = usage["completion_tokens"]
                        elif _chunk_text(choices[0]):
                            k = 1
                    got += max(k, 0)
                    if usage:
                        rec.prompt_tokens = usage.get("prompt_tokens")
                        rec.completion_tokens = usage.get("completion_tokens")
                if got:
                    if rec.first_token is None:
                        rec.first_token = now
                    rec.arrivals.append(now)
                    rec.counts.append(got)
                    rec.chunk_tokens += got
            if not done and rec.error is None:
                rec.error = "truncated"
                rec.error_detail = "stream ended without [DONE]"
    except asyncio.TimeoutError:
        rec.error = "stall"
        rec.error_detail = "no data within the stall timeout"
    except aiohttp.ClientConnectorError as err:
        rec.error = "connect"
        rec.error_detail = str(err)[:300]
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError) as err:
        rec.error = "disconnect"
        rec.error_detail = str(err)[:300]
    except (aiohttp.ClientError, json.JSONDecodeError, UnicodeDecodeError) as err:
        rec.error = "protocol"
        rec.error_detail = f"{type(err).__name__}: {err}"[:300]
    finally:
        rec.end = time.perf_counter()
