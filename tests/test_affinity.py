import os
import threading

import pytest

import sympathy as sy

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


def test_pinned_pins_only_the_calling_thread_and_restores():
    before = os.sched_getaffinity(0)
    seen = {}

    def worker():
        with sy.pinned(0) as cpus:
            seen["inside"] = cpus
        seen["after"] = os.sched_getaffinity(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["inside"] == {0}
    assert seen["after"] == before
    assert os.sched_getaffinity(0) == before, "pinning a worker thread must not move the main thread"


@pytest.mark.parametrize("bad", [-1, 10_000, [], "0"])
def test_pin_rejects_cpus_that_do_not_exist(bad):
    with pytest.raises(ValueError):
        sy.pin(bad)
