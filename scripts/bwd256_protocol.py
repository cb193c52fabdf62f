"""The block protocol of attention_hopper_bwd256.cu checked on a model, before any GPU call (a hang costs a
device call its whole limit): the producer and the two consumer warpgroups as programs of mbarrier waits and
arrivals, named-barrier arrives and syncs, and the begin / end of every shared-memory read (wgmma reads from
issue to wait) and write, over every interleaving, for 0-6 query tiles. Checked: no deadlock, no warpgroup
arriving twice on a named barrier in one phase (the hardware would count both), every read sees its tile from
begin to end, no copy or store over data still to be read. Both schedules: `prev` (-DSY_HOPPER_BWD256_P_AHEAD=0)
and `ahead` (the default). Keep the programs below in step with the kernel when its schedule changes.

    python3 scripts/bwd256_protocol.py          # prints the states explored; exits 1 on the first violation
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_model import Violation, barrier, check_all, explore as explore_programs  # noqa: E402

STAGE = ("Q", "dO", "L", "D")                                   # one copy a tile: Q, dO, LSE, D
READS = {"Q": 2, "dO": 2, "L": 1, "D": 1, "P": 1, "DS": 2}      # reads of one tile's data before its slot is free


def programs(n, ahead):
    """(producer, P warpgroup, dS warpgroup) for n tiles; ops are tuples, resources live in slot tile % 2."""
    prod, wg0, wg1 = [], [], []
    for i in range(n):
        if i >= 2:
            prod.append(("wait_empty", i - 2))
        prod.append(("load", i))
    if ahead:
        if n:
            wg0 += [("wait_full", 0), ("rb", "Q", 0), ("re", "Q", 0), ("rb", "L", 0), ("re", "L", 0),
                    ("w", "P", 0), ("arrive", "BP")]
        for i in range(n):
            wg0 += [("rb", "dO", i), ("re", "dO", i), ("arrive_empty", i)]
            if i + 1 < n:
                wg0 += [("wait_full", i + 1), ("rb", "Q", i + 1), ("re", "Q", i + 1), ("rb", "L", i + 1),
                        ("re", "L", i + 1), ("w", "P", i + 1)]
            wg0 += [("sync", "BDs")]
            if i + 1 < n:
                wg0 += [("arrive", "BP")]
            wg0 += [("rb", "DS", i), ("re", "DS", i)]
    else:
        for i in range(n):
            wg0 += [("wait_full", i), ("rb", "Q", i), ("re", "Q", i), ("rb", "L", i), ("re", "L", i),
                    ("w", "P", i), ("arrive", "BP"), ("rb", "dO", i), ("sync", "BDs"), ("rb", "DS", i),
                    ("re", "dO", i), ("re", "DS", i), ("arrive_empty", i)]
    for i in range(n):
        wg1 += [("wait_full", i), ("rb", "dO", i), ("re", "dO", i), ("sync", "BP"), ("rb", "P", i), ("re", "P", i),
                ("rb", "D", i), ("re", "D", i), ("w", "DS", i), ("arrive" if ahead else "sync", "BDs"),
                ("rb", "DS", i), ("rb", "Q", i), ("re", "DS", i), ("re", "Q", i), ("arrive_empty", i)]
    return prod, wg0, wg1


def step(op, w, bars, waiting, bufs, empty):
    """Apply op of warpgroup w to copies of the state; False where it must wait."""
    kind = op[0]
    if kind == "wait_empty":
        return empty.get(op[1], 0) == 2                       # both consumer warpgroups arrived
    if kind == "arrive_empty":
        empty[op[1]] = empty.get(op[1], 0) + 1
        return True
    if kind == "wait_full":
        cur = bufs.get(("Q", op[1] % 2))
        return cur is not None and cur[0] >= op[1]
    if kind in ("load", "w"):
        for res in (STAGE if kind == "load" else (op[1],)):
            tile = op[1] if kind == "load" else op[2]
            old = bufs.get((res, tile % 2))
            if old and (old[1] < READS[res] or old[2]):
                raise Violation(f"{op} over unread {res} of tile {old[0]}")
            bufs[(res, tile % 2)] = (tile, 0, 0)              # (tile, reads ended, reads in flight)
        return True
    if kind in ("rb", "re"):
        cur = bufs.get((op[1], op[2] % 2))
        if cur is None or cur[0] != op[2]:
            raise Violation(f"warpgroup {w} {op} sees tile {cur and cur[0]}")
        bufs[(op[1], op[2] % 2)] = (cur[0], cur[1] + (kind == "re"), cur[2] + (1 if kind == "rb" else -1))
        return True
    return barrier(kind, w, w, op[1], frozenset({1, 2}), bars, waiting)   # the two consumer warpgroups


def explore(n, ahead):
    return explore_programs(programs(n, ahead), step, 4)


def main():
    cases = [(f"{'ahead' if ahead else 'prev'} n={n}", (n, ahead)) for ahead in (False, True) for n in range(7)]
    return check_all(cases, lambda case: explore(*case))


if __name__ == "__main__":
    sys.exit(main())
