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
