"""Old against new ring, alternated in one run: the C bench rows of `sympathy bench ring` for two
(or more) built checkouts, each measured in its own short child process, the checkouts taking turns
round after round (A B, B A, A B, ...) so that a drift of the machine lands on both.

    python scripts/ring_ab.py --tree old=/tmp/orig --tree new=. --rounds 6 \
        --rows 3p1c:busy_spin,3p1c:yield,3p1c:blocking,pp:busy_spin,pp:yield,pp:blocking

Rows: `SHAPE:WAIT` with SHAPE one of unicast, pipeline, multicast, diamond, 3p1c (items/s, higher is
better) or pp (the ping-pong round trip's p50 in ns, lower is better); `SHAPE:WAIT@N` claims N items
at a time (over --claim-items items) instead of --batch. Each checkout must be built in
place (`python setup.py -q build_ext --inplace`). Prints, per row, every round's figure per tree, the
medians, and new / old of the medians and of each round's pair (the first tree is the reference).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

SHAPES = {"unicast": 0, "pipeline": 1, "multicast": 2, "diamond": 3, "3p1c": 4}

WORKER = r"""
import json, sys
from sympathy.bench.suites import ring as s
rows, items, batch, rounds, claim_items = json.loads(sys.argv[1])
out = {}
for row in rows:
    shape, wait = row.split(":")
    wait, _, claim = wait.partition("@")
    if shape == "pp":
        out[row] = s.c_pingpong(wait, rounds)["p50 ns"]
    else:  # SHAPE:WAIT@N: claims of N items, over claim_items items
        n = int(claim) if claim else batch
        out[row] = s.c_ring(%s[shape], wait, claim_items if claim else items, n)["items/s"]
print(json.dumps(out))
""" % (SHAPES,)


def measure(tree: str, rows: list[str], args) -> dict:
    path = os.pathsep.join(p for p in (os.path.abspath(tree), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore")
    spec = json.dumps([rows, args.items, args.batch, args.pp_rounds, args.claim_items])
    done = subprocess.run([sys.executable, "-c", WORKER, spec], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: worker failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a built checkout")
    parser.add_argument("--rows", default="3p1c:busy_spin,3p1c:yield,3p1c:blocking,pp:busy_spin,pp:yield,pp:blocking")
    parser.add_argument("--rounds", type=int, default=4, help="rounds; each runs every tree once")
    parser.add_argument("--items", type=int, default=20_000_000, help="items per shape run (the suite's default)")
    parser.add_argument("--batch", type=int, default=1024, help="producer claim size (the suite's default)")
    parser.add_argument("--claim-items", type=int, default=2_000_000, help="items per SHAPE:WAIT@N run")
    parser.add_argument("--pp-rounds", type=int, default=200_000, help="ping-pong round trips (the suite's default)")
    parser.add_argument("--json", default=None, help="also write every figure here")
    args = parser.parse_args()
    trees = [t.split("=", 1) for t in args.tree]
    rows = args.rows.split(",")
    figures = {name: {row: [] for row in rows} for name, _ in trees}
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for name, path in order:
            for row, value in measure(path, rows, args).items():
                figures[name][row].append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "figures": figures}, f, indent=1)
    ref = trees[0][0]
    for row in rows:
        unit = "ns p50" if row.startswith("pp:") else "M items/s"
        scale = 1 if row.startswith("pp:") else 1e-6
        print(f"\n{row} ({unit}; {'lower' if row.startswith('pp:') else 'higher'} is better)")
        for name, _ in trees:
            values = figures[name][row]
            print(f"  {name:>8}: median {np.median(values) * scale:8.1f}   runs " +
                  " ".join(f"{v * scale:.1f}" for v in values))
        for name, _ in trees[1:]:
            pairs = np.array(figures[name][row]) / np.array(figures[ref][row])
            print(f"  {name}/{ref}: medians {np.median(figures[name][row]) / np.median(figures[ref][row]):.3f}, "
                  f"per round {pairs.min():.3f}-{pairs.max():.3f} (median {np.median(pairs):.3f})")


if __name__ == "__main__":
    main()
