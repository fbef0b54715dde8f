"""What the count proof (``actors/loadgen/proof.py``) costs per token, after a level.

Builds ``--requests`` responses of ``--tokens`` vLLM-shaped events (per-chunk usage and
token ids, framed as the lean transport's fast path keeps them), then times ``prove``
over all of them. Prints microseconds of CPU per streamed token.

    .venv/bin/python benchmarks/proof_cost.py            # ~2 s
    git worktree add /tmp/p0 164d7cf && .venv/bin/python benchmarks/proof_cost.py --tree /tmp/p0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# --tree DIR: measure another checkout's proof.py (e.g. a worktree of an older commit)
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else None
sys.path.insert(0, _TREE or str(Path(__file__).resolve().parent.parent))

from actors.loadgen.proof import prove  # noqa: E402

try:
    from actors.loadgen.records import RequestRecord
except ImportError:  # a tree from before records.py (--tree at 164d7cf)
    from actors.loadgen.results import RequestRecord  # type: ignore[no-redef]


def _event(n: int) -> bytes:
    data = (b'data: {"id":"cmpl-x-0-1","object":"text_completion","created":1795974721,'
            b'"model":"m","choices":[{"index":0,"text":" the","token_ids":[295],'
            b'"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,'
            b'"completion_tokens":%d,"total_tokens":%d}}\n\n' % (n, 512 + n))
    return b"%x\r\n%b\r\n" % (len(data), data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tree", help="another checkout whose proof.py to measure")
    args = ap.parse_args()
    frames = [_event(i) for i in range(1, args.tokens + 1)]
    best = float("inf")
    for _ in range(args.repeat):
        recs = []
        for k in range(args.requests):
            r = RequestRecord(index=k, round=0)
            r.body = [(True, f) for f in frames]
            recs.append(r)
        t0 = time.process_time()
        for r in recs:
            prove(r)
        best = min(best, time.process_time() - t0)
        assert all(r.proof and r.proof.token_ids == args.tokens for r in recs)
    per = best / (args.requests * args.tokens) * 1e6
    print(f"proof: {per:.2f} us CPU per token ({args.requests} x {args.tokens} tokens, "
          f"best of {args.repeat})")


if __name__ == "__main__":
    main()
