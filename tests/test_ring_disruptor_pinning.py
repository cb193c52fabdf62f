"""Per-handler CPU pinning in the Disruptor DSL: handle_events_with(h, cpu=N) / .then(h, cpu=N).

Each handler records the affinity of the thread it runs on; a pinned handler's thread may run on
its CPU only, an unpinned one keeps the process's mask. A CPU outside the mask is refused when
wiring, before any thread starts.
"""
import multiprocessing as mp
import os

import numpy as np
import pytest

import sympathy as sy

MASK = sorted(os.sched_getaffinity(0))


def _recorder(seen: list):
    def handler(events, sequence, end_of_batch):
        seen.append((frozenset(os.sched_getaffinity(0)), len(events)))
    return handler


def test_each_handler_runs_on_the_cpu_it_was_given():
    first, last = MASK[0], MASK[-1]
    a, b, c = [], [], []
    d = sy.Disruptor(64, np.int64)
    d.handle_events_with(_recorder(a), _recorder(b), cpu=(last, None)).then(_recorder(c), cpu=first)
    d.start()
    d.publish_batch(np.arange(500))
    d.shutdown(timeout=30)
    assert {s for s, _ in a} == {frozenset({last})}
    assert {s for s, _ in b} == {frozenset(MASK)}  # unpinned: the process's mask
    assert {s for s, _ in c} == {frozenset({first})}
    assert sum(n for _, n in a) == sum(n for _, n in b) == sum(n for _, n in c) == 500
    assert sorted(os.sched_getaffinity(0)) == MASK  # the caller's own thread is untouched


def _wire_outside_the_mask(results):
    os.sched_setaffinity(0, {MASK[0]})
    d = sy.Disruptor(8, np.int64)
    try:
        d.handle_events_with(lambda *a: None, cpu=MASK[-1])
        results.put("accepted")
    except ValueError as exc:
        results.put(str(exc))


@pytest.mark.skipif(len(MASK) < 2, reason="needs two CPUs in the affinity mask to leave one out")
def test_a_cpu_outside_the_affinity_mask_is_a_clear_error():
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_wire_outside_the_mask, args=(results,))
    child.start()
    message = results.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert f"cpu {MASK[-1]} is not in this process's affinity mask [{MASK[0]}]" in message


def test_bad_cpu_arguments():
    d = sy.Disruptor(8, np.int64)
    with pytest.raises(ValueError, match="affinity mask"):
        d.handle_events_with(lambda *a: None, cpu=(os.cpu_count() or 1) + 7)
    with pytest.raises(ValueError, match="2 entries for 1 handlers"):
        d.handle_events_with(lambda *a: None, cpu=(MASK[0], MASK[0]))
    with pytest.raises(TypeError):
        d.handle_events_with(lambda *a: None, cpu="0")
    with pytest.raises(TypeError):
        d.handle_events_with(lambda *a: None, cpu=True)
    assert not d._processors  # nothing was wired by the refusals
