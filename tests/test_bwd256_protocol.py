"""The d = 256 hopper backward's block protocol, checked on its model (scripts/bwd256_protocol.py) on the CPU.

The model plays the producer and both consumer warpgroups of attention_hopper_bwd256.cu over every interleaving;
a hang on the GPU costs a device call its whole limit, so the schedule is proved here first. The model must also
catch the mistakes it exists for, or it proves nothing: each mutation below breaks one rule of the schedule.
"""
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bwd256_protocol.py"
_spec = importlib.util.spec_from_file_location("bwd256_protocol", _PATH)
proto = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proto)


@pytest.mark.parametrize("ahead", [False, True], ids=["prev", "ahead"])
@pytest.mark.parametrize("n", range(7))
def test_both_schedules_finish_without_a_race(n, ahead):
    assert proto.explore(n, ahead) > 0


def _mutated(mutate):
    """explore() of the `ahead` schedule at 4 tiles with the P warpgroup's program changed by mutate."""
    real = proto.programs

    def programs(n, ahead):
        prod, wg0, wg1 = real(n, ahead)
        return prod, mutate(list(wg0)), wg1

    proto.programs = programs
    try:
        return proto.explore(4, True)
    finally:
        proto.programs = real


def _announce_before_the_ds_barrier(wg0):
    # The next P^T announced before meeting the dS warpgroup at its barrier: a second arrival in one phase.
    i = wg0.index(("sync", "BDs"))
    j = wg0.index(("arrive", "BP"), i)
    wg0[i], wg0[j] = wg0[j], wg0[i]
    return wg0


def _free_the_stage_before_dv(wg0):
    # The stage's copy slot freed before dV has read dO: the next copy lands over unread data.
    i = wg0.index(("rb", "dO", 0))
    j = wg0.index(("arrive_empty", 0))
    wg0.insert(i, wg0.pop(j))
    return wg0


@pytest.mark.parametrize("mutate", [_announce_before_the_ds_barrier, _free_the_stage_before_dv])
def test_the_model_catches_a_broken_schedule(mutate):
    with pytest.raises(proto.Violation):
        _mutated(mutate)
