#!/usr/bin/env python3
"""The precision effects a cross-validation scores, beside whether their own rounds resolve them.

    .venv/bin/python benchmarks/crossval_precision.py \
        benchmarks/measured/crossval-20261207h/crossval.json            # 2 s
    .venv/bin/python benchmarks/crossval_precision.py FILE --fold onnode --beyond 0.05

``crossval.py`` counts a precision effect (FP8 weights or FP8 KV against the same sweep's
BF16 / auto-KV twin at the same level) when the two levels' medians differ by more than
``--beyond``, and asks whether the fold predicts its sign. A median is the middle of a few
rounds (each a full pass of the level's requests). Where the two levels' rounds overlap
(the slower config's best round at or above the faster one's worst), the measurement does
not tell which config is faster: its sign is the rounds' noise, not the precision's.

For each counted effect, Markdown to stdout: the measured and predicted effect, both
levels' round ranges, ``resolved`` (the rounds do not overlap), and the same node's other
measurements of that pair (the same settings, workload and level in another sweep on that
node) with their effects. Then the tally both ways: every counted effect, and the resolved
ones alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from crossval import _own_key, _where  # noqa: E402
from crossval_data import discover, node_of  # noqa: E402
from crossval_worst import fold_args, round_range, row_points  # noqa: E402


def base_key(r: dict) -> str:
    """The BF16 / auto-KV twin's key of a row (crossval.precision_signs' pairing)."""
    return r["config"].replace(" fp8 ", " bf16 ").replace("kv=fp8", "kv=auto") + _where(r)


def resolved(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool | None:
    """Whether two levels' round ranges are apart (None: a level has fewer than two rounds)."""
    if a is None or b is None:
        return None
    return a[0] > b[1] or b[0] > a[1]


def fmt(x: tuple[float, float] | None) -> str:
    return "-" if x is None else f"{x[0]:.0f}-{x[1]:.0f}"


def main() -> None:
    a = fold_args(__doc__ or "", beyond=0.05)
    rows = [r for r in json.loads(a.crossval.read_text())["rows"] if a.fold in r]
    data = discover()
    point_of = dict(enumerate(row_points(rows, data)))
    index = {_own_key(r): i for i, r in enumerate(rows)}
    node = {i: node_of(point_of[i], rows[i].get("source", "")) for i in point_of}
    effects = []  # (row, twin, measured effect, predicted effect)
    for i, r in enumerate(rows):
        j = index.get(base_key(r))
        if j is None or j == i:
            continue
        eff = r["measured"]["output_tok_s"] / rows[j]["measured"]["output_tok_s"] - 1
        if abs(eff) > a.beyond:
            guess = r[a.fold]["output_tok_s"] / rows[j][a.fold]["output_tok_s"] - 1
            effects.append((i, j, eff, guess))

    def pair_elsewhere(i: int, j: int) -> str:
        """The pair's effect in the same node's other sweeps (same point labels)."""
        out = []
        for k, r in enumerate(rows):
            if (k != i and r["point"] == rows[i]["point"] and r["shape"] == rows[i]["shape"]
                    and node.get(k) == node[i]):
                twin = index.get(base_key(r))
                if twin is not None and twin != k:
                    e = r["measured"]["output_tok_s"] / rows[twin]["measured"]["output_tok_s"] - 1
                    out.append(f"{e:+.0%}")
        return ", ".join(out) or "-"

    print(f"| effect ({a.fold}) | node | measured | predicted | sign | its rounds: tok/s | "
          "twin's rounds | resolved | same pair elsewhere on the node |")
    print("|---|---|---|---|---|---|---|---|---|")
    tally = {"all": [0, 0], "resolved": [0, 0]}
    for i, j, eff, guess in effects:
        right = (guess > 0) == (eff > 0)
        rr, tr = round_range(point_of[i]), round_range(point_of[j])
        res = resolved(rr, tr)
        for name in ("all", "resolved") if res else ("all",):
            tally[name][0] += right
            tally[name][1] += 1
        print(f"| {rows[i]['point']} ({rows[i]['shape']}) | {node[i]} | {eff:+.1%} | "
              f"{guess:+.1%} | {'right' if right else 'wrong'} | {fmt(rr)} | {fmt(tr)} | "
              f"{'-' if res is None else ('yes' if res else 'no')} | {pair_elsewhere(i, j)} |")
    print()
    print(f"effects beyond {a.beyond:.0%} with the right sign ({a.fold}): "
          f"{tally['all'][0]} of {tally['all'][1]}; of those their rounds resolve: "
          f"{tally['resolved'][0]} of {tally['resolved'][1]}")


if __name__ == "__main__":
    main()
