"""Servers that lie about token counts: what the load generator makes of each.

Every server is a real sim process (``actors.sim.server``, ``StreamOptions``) started
from this tree; the liars run faster (a smaller time scale) than the honest ones, so a
liar counted at its word would win. The client is this tree's ``LevelRunner``, or the
one of another checkout (``--client-tree DIR``, e.g. a ``git worktree`` of an older
commit: the before/after table of benchmarks/README.md). One concurrency level each.

    .venv/bin/python benchmarks/lying_servers.py                     # ~1 min
    .venv/bin/python benchmarks/lying_servers.py --client-tree /tmp/before
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.sim.config import StreamOptions  # noqa: E402
from tests.simserver import sim_config, sim_server  # noqa: E402
from tests.tinytok import make_tokenizer  # noqa: E402

HONEST, LIAR = 0.5, 0.3
#: name -> (time scale, stream interval, fault, StreamOptions)
SERVERS = {
    "exact": (HONEST, 1, None, {}),
    "2 tokens/chunk": (HONEST, 2, None, {}),
    "2 tokens/chunk, no per-chunk usage": (HONEST, 2, None, {"chunk_usage": False}),
    "2 tokens/chunk, text only": (HONEST, 2, None, {"chunk_usage": False,
                                                    "token_ids": False}),
    "no final usage": (HONEST, 1, None, {"final_usage": False}),
    "stops early, honest usage": (LIAR, 1, "short_by:12", {}),
    "streams fewer than usage (text only)": (LIAR, 1, None, {"withhold": 12,
                                                             "chunk_usage": False,
                                                             "token_ids": False}),
    "streams fewer than usage": (LIAR, 1, None, {"withhold": 12}),
    "duplicated chunks": (LIAR, 1, None, {"duplicate_every": 5}),
    "per-chunk usage inflated (ids say less)": (LIAR, 1, None, {"withhold": 12,
                                                                "inflate_chunk_usage": True}),
    "per-chunk usage inflated (text says less)": (LIAR, 1, None, {
        "withhold": 12, "inflate_chunk_usage": True, "token_ids": False}),
}

# Runs in the client tree: works with this LevelRunner and with older ones (no
# tokenizer argument, no count proof).
_CLIENT = r"""
import asyncio, inspect, json, sys
from actors.loadgen.level import LevelRunner
from actors.loadgen.prompts import PromptFactory, load_tokenizer, usable_token_ids
from orchestrator.spec import Workload
url, tok_dir, conc = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = Workload(prompt_tokens=32, output_tokens=64, concurrency=[conc], rounds=2,
             requests_per_round=2 * conc, warmup_requests=1)
kw = {}
if "tokenizer" in inspect.signature(LevelRunner).parameters:
    kw["tokenizer"] = load_tokenizer(tok_dir)
r = LevelRunner(url, "sim-model", w, PromptFactory(usable_token_ids(32000, tok_dir), 32), **kw)
print(json.dumps(asyncio.run(r.run_level(conc)).model_dump(mode="json")))
"""


def measure(client_tree: Path, url: str, tok_dir: str, concurrency: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _CLIENT, url, tok_dir, str(concurrency)],
                         cwd=client_tree, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(client_tree), "PATH": "/usr/bin:/bin"})
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client-tree", type=Path, default=ROOT)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/lying_servers.json")
    args = ap.parse_args()
    tmp = ROOT / "benchmarks/results/lying"
    tmp.mkdir(parents=True, exist_ok=True)
    tok_dir = str(make_tokenizer(tmp / "tokenizer"))
    rows = []
    for name, (scale, interval, fault, opts) in SERVERS.items():
        cfg = sim_config(time_scale=scale, stream_interval=interval, fault=fault)
        cfg = cfg.model_copy(update={"stream": StreamOptions(**opts), "tokenizer": tok_dir})
        with sim_server(cfg, tmp) as (url, _, _):
            lv = measure(args.client_tree.resolve(), url, tok_dir, args.concurrency)
        rows.append({**lv, "name": name})
    honest = next(r for r in rows if r["name"] == "exact")["metrics"]["output_tok_s"]
    print(f"client: {args.client_tree}  (c={args.concurrency}, 64 output tokens; "
          f"'wins' = valid, not unverified, faster than 'exact' at {honest:,.0f} tok/s)")
    print("| server | status | flags | tok/s | ITL p50 ms | TPOT ms | wins | reason |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        m = r.get("metrics") or {}
        flags = r.get("flags", [])
        wins = (r["status"] == "valid" and "unverified" not in flags
                and (m.get("output_tok_s") or 0) > honest * 1.05)
        fmt = lambda x: "" if x is None else f"{x:,.2f}"  # noqa: E731
        print(f"| {r['name']} | {r['status']} | {','.join(flags)} | "
              f"{fmt(m.get('output_tok_s'))} | {fmt(m.get('itl_p50_ms'))} | "
              f"{fmt(m.get('tpot_p50_ms'))} | {'**yes**' if wins else 'no'} | "
              f"{r.get('reason', '')[:110]} |")
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
