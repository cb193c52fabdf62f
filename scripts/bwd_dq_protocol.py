"""The dQ-share protocol of attention_hopper_bwd.cu checked on a model, before any GPU call (a hang costs a device
call its whole limit; a share overwritten before the copy engine read it is a silently wrong dQ).

Per query tile each consumer warpgroup meets the other at the dS^T barrier, waits until its share buffer is empty,
stores its 64 x 64 share and arrives on the buffer's full barrier; the dQ warp of the producer warpgroup syncs on
each full barrier, lets the copy engine read the share (the bulk reduce-add), and arrives on the empty barrier. The
shares use kDqBuffers buffers by tile parity, and each (warpgroup, buffer) has its own full / empty pair of named
barriers (hopper_bwd_pipeline.cuh, BwdNamedBarrier). Named barriers count threads, not phases: a party arriving
twice before the other arrived once pushes the count past the barrier's 160 threads. That happened on the GPU in
session 2026-11-29d, when two buffers shared one full barrier per warpgroup (the launch failed).

Checked over every interleaving of the two warpgroups and the dQ warp, for 0-6 tiles and 1 or 2 buffers: no
deadlock, no party arriving twice on a barrier in one phase, every read of a share sees its own tile, and no store
over a share the copy engine has not finished reading. Keep the programs in step with BwdConsumer::tile and write_dq.

    python3 scripts/bwd_dq_protocol.py       # prints the states explored; exits 1 on the first violation
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_model import Violation, barrier, check_all, explore as explore_programs  # noqa: E402

WRITER = 2           # actors 0 and 1 are the consumer warpgroups
DS = ("ds", -1, -1)  # kBarDs: both warpgroups' dS^T stored


def programs(tiles, buffers, full_per_buffer=True):
    """(warpgroup 0, warpgroup 1, dQ warp) as lists of ops for `tiles` query tiles. Barriers are named (kind, wg,
    buffer): kBarDqFull / kBarDqEmpty + 2 wg + buffer. full_per_buffer=False: one full barrier per warpgroup for
    both buffers, as in session 2026-11-29d's call 2 (the launch failed)."""
    def bar(kind, wg, tile):
        return (kind, wg, tile % buffers if kind == "empty" or full_per_buffer else 0)

    consumers = []
    for wg in (0, 1):
        # One warp stands in for the dQ warp's first arrival on each buffer (the shares start empty).
        ops = [("arrive_for", WRITER, bar("empty", wg, b)) for b in range(buffers)]
        for i in range(tiles):
            ops += [("sync", DS), ("sync", bar("empty", wg, i)), ("store", (wg, i % buffers), i),
                    ("arrive", bar("full", wg, i))]
        consumers.append(ops)
    writer = []
    for i in range(tiles):
        for wg in (0, 1):
            writer += [("sync", bar("full", wg, i)), ("read_begin", (wg, i % buffers), i)]
        for wg in (0, 1):   # bulk_wait_read: the shares in the order they were issued
            writer += [("read_end", (wg, i % buffers), i), ("arrive", bar("empty", wg, i))]
    return consumers[0], consumers[1], writer


def parties(name):
    """The two actors that meet on a barrier: both warpgroups at dS^T, else warpgroup wg and the dQ warp."""
    return (0, 1) if name == DS else (name[1], WRITER)


def step(op, actor, bars, waiting, shares):
    """Apply op of actor to the state (dicts, changed in place); False where the actor must wait."""
    kind = op[0]
    if kind == "store":
        slot, tile = op[1], op[2]
        old = shares.get(slot)
        if old is not None and (not old[1] or old[2]):
            raise Violation(f"warpgroup {actor} stores tile {tile} over share {slot} of tile {old[0]}, not yet read")
        shares[slot] = (tile, False, False)   # (tile, read, being read)
        return True
    if kind in ("read_begin", "read_end"):
        slot, tile = op[1], op[2]
        cur = shares.get(slot)
        if cur is None or cur[0] != tile:
            raise Violation(f"the dQ warp reads share {slot} for tile {tile} and finds tile {cur and cur[0]}")
        shares[slot] = (tile, kind == "read_end", kind == "read_begin")
        return True
    name = op[2] if kind == "arrive_for" else op[1]
    party = op[1] if kind == "arrive_for" else actor
    return barrier("arrive" if kind == "arrive_for" else kind, actor, party, name, frozenset(parties(name)), bars,
                   waiting)


def explore(tiles, buffers, full_per_buffer=True):
    return explore_programs(programs(tiles, buffers, full_per_buffer), step, 3)


def main():
    cases = [(f"{b} buffer(s), {t} tiles", (t, b)) for b in (1, 2) for t in range(7)]
    return check_all(cases, lambda case: explore(*case))


if __name__ == "__main__":
    sys.exit(main())
