"""The d = 64 / 128 hopper backward's dQ-share protocol, checked on its model (scripts/bwd_dq_protocol.py) on the CPU.

The model plays both consumer warpgroups and the dQ warp of attention_hopper_bwd.cu over every interleaving, with
one share buffer (d = 64) and two (d = 128). It must also catch the mistakes it exists for, or it proves nothing:
the full barrier shared by both buffers (the launch that failed in session 2026-11-29d), a store without waiting
for the buffer to be empty, and an empty arrival before the copy engine finished reading.
"""
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bwd_dq_protocol.py"
_spec = importlib.util.spec_from_file_location("bwd_dq_protocol", _PATH)
proto = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proto)


@pytest.mark.parametrize("buffers", [1, 2])
@pytest.mark.parametrize("tiles", range(7))
def test_the_shipped_protocol_finishes_without_a_race(tiles, buffers):
    assert proto.explore(tiles, buffers) > 0


def test_one_full_barrier_for_both_buffers_arrives_twice_in_a_phase():
    assert proto.explore(1, 2, full_per_buffer=False) > 0   # one tile never reuses a barrier
    with pytest.raises(proto.Violation, match="arrives twice"):
        proto.explore(3, 2, full_per_buffer=False)


def _mutated(mutate, tiles=3, buffers=2):
    real = proto.programs

    def programs(n, b, full_per_buffer=True):
        return mutate(*(list(p) for p in real(n, b, full_per_buffer)))

    proto.programs = programs
    try:
        return proto.explore(tiles, buffers)
    finally:
        proto.programs = real


def _no_empty_barriers(wg0, wg1, writer):
    # The warpgroups store without waiting for their buffer to be read (every empty barrier gone, so no count is off).
    def keep(op):
        return not (op[0] in ("sync", "arrive") and op[1][0] == "empty") and op[0] != "arrive_for"
    return [op for op in wg0 if keep(op)], [op for op in wg1 if keep(op)], [op for op in writer if keep(op)]


def _empty_before_the_read_ends(wg0, wg1, writer):
    # The dQ warp hands warpgroup 0's buffer back as soon as the reduce-add is issued, not once it has read it.
    for i, op in enumerate(writer):
        if op[0] == "arrive" and op[1][:2] == ("empty", 0):
            j = max(k for k in range(i) if writer[k][0] == "read_end" and writer[k][1][0] == 0)
            writer.insert(j, writer.pop(i))
    return wg0, wg1, writer


@pytest.mark.parametrize("mutate", [_no_empty_barriers, _empty_before_the_read_ends])
def test_the_model_catches_a_share_overwritten_before_it_was_read(mutate):
    with pytest.raises(proto.Violation, match="not yet read"):
        _mutated(mutate)
