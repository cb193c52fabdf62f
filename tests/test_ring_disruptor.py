"""The Disruptor DSL: handler graphs, batches with end_of_batch, exception handling, lifecycle."""
import threading

import numpy as np
import pytest

import sympathy as sy


class Recorder:
    def __init__(self, upstream=None):
        self.items: list[int] = []
        self.ends = 0
        self.upstream = upstream or []
        self.order_violations = 0
        self.lock = threading.Lock()

    def __call__(self, events, sequence, end_of_batch):
        assert not events.flags.writeable
        for up in self.upstream:  # every upstream handler already returned for these events
            if len(up.items) < sequence + len(events):
                self.order_violations += 1
        self.items.extend(events.tolist())
        self.ends += end_of_batch


def test_diamond_every_handler_sees_every_event_in_order():
    journal, replicate = Recorder(), Recorder()
    logic = Recorder(upstream=[journal, replicate])
    d = sy.Disruptor(64, np.int64, batch_size=16)
    d.handle_events_with(journal, replicate).then(logic)
    d.start()
    for lo in range(0, 3000, 100):
        d.publish_batch(np.arange(lo, lo + 100, dtype=np.int64))
    d.shutdown(timeout=30)
    for h in (journal, replicate, logic):
        assert h.items == list(range(3000))
        assert h.ends >= 1
    assert logic.order_violations == 0
    assert d.ring.closed


def test_pipeline_with_then_chain_and_context_manager():
    a, b, c = Recorder(), Recorder(), Recorder()
    with sy.Disruptor(8, np.int64, producer="multi") as d:
        d.handle_events_with(a).then(b).then(c)
        d.start()
        for i in range(200):
            d.publish(i)
    assert a.items == b.items == c.items == list(range(200))


def test_end_of_batch_marks_the_last_ready_event():
    seen = []
    gate = threading.Event()

    def handler(events, sequence, end_of_batch):
        gate.wait(5)
        seen.append((sequence, len(events), end_of_batch))

    d = sy.Disruptor(64, np.int64, batch_size=4)
    d.handle_events_with(handler)
    d.start()
    d.publish_batch(np.arange(10, dtype=np.int64))
    gate.set()
    d.shutdown(timeout=10)
    # all 10 were published with one claim, so the first wait saw them all: batches of
    # batch_size while more is ready are not the end of the batch; the last one is
    assert seen == [(0, 4, False), (4, 4, False), (8, 2, True)]


def test_exception_handler_skips_and_default_is_fatal():
    handled = []

    def flaky(events, sequence, end_of_batch):
        if sequence <= 5 < sequence + len(events):
            raise RuntimeError("boom at 5")

    d = sy.Disruptor(16, np.int64, exception_handler=lambda exc, seq, events: handled.append(str(exc)))
    d.handle_events_with(flaky)
    d.start()
    d.publish_batch(np.arange(10, dtype=np.int64))
    d.shutdown(timeout=10)
    assert handled == ["boom at 5"]

    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(flaky)
    d.start()
    d.publish_batch(np.arange(10, dtype=np.int64))
    with pytest.raises(RuntimeError, match="boom at 5"):
        d.shutdown(timeout=10)


def test_shutdown_times_out_when_a_handler_is_stuck():
    release = threading.Event()
    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(lambda events, seq, end: release.wait(10))
    d.start()
    d.publish(1)
    threading.Timer(0.5, release.set).start()
    with pytest.raises(TimeoutError, match="did not catch up"):
        d.shutdown(timeout=0.1)


def test_halt_stops_without_draining():
    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(Recorder())
    d.start()
    d.halt()
    assert all(not p.thread.is_alive() for p in d._processors)
    d.ring.close()


def test_bad_wiring():
    d = sy.Disruptor(16, np.int64)
    with pytest.raises(RuntimeError, match="no handlers"):
        d.start()
    with pytest.raises(TypeError, match="callable"):
        d.handle_events_with(42)
    with pytest.raises(ValueError, match="at least one handler"):
        d.handle_events_with()
    with pytest.raises(ValueError, match="batch_size"):
        sy.Disruptor(16, np.int64, batch_size=0)
    d.ring.close()


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test inspects whatever came out
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_shutdown_timeout_is_kept_when_a_handler_never_returns():
    """shutdown(timeout=1) comes back with TimeoutError although the handler is stuck for a minute
    (before: it joined the handler thread, 11.8 s for a 10 s handler); the ring is closed."""
    release = threading.Event()
    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(lambda events, seq, end: release.wait(60))
    d.start()
    d.publish(1)
    t, box = _in_thread(lambda: d.shutdown(timeout=1))
    t.join(30)  # far below the handler's 60 s: still inside shutdown here means it waited for it
    release.set()
    assert not t.is_alive(), "shutdown(timeout=1) waited for the stuck handler"
    assert isinstance(box.get("error"), TimeoutError) and "still inside a handler call" in str(box["error"])
    assert d.ring.closed


def test_a_dead_handler_without_exception_handler_stops_the_publisher():
    """The handler dies at its first event; the publisher of more than the ring holds gets
    ClosedError caused by the handler's error (before: publish_batch hung forever)."""
    def dies(events, sequence, end_of_batch):
        raise ValueError("handler died")

    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(dies)
    d.start()
    t, box = _in_thread(lambda: [d.publish_batch(np.arange(8, dtype=np.int64)) for _ in range(100)])
    t.join(30)
    assert not t.is_alive(), "publish_batch hung behind a dead handler"
    error = box.get("error")
    assert isinstance(error, sy.ClosedError) and isinstance(error.__cause__, ValueError), box
    with pytest.raises(ValueError, match="handler died"):
        d.shutdown(timeout=10)


def test_a_handlers_keyboard_interrupt_is_re_raised_by_shutdown():
    def interrupted(events, sequence, end_of_batch):
        raise KeyboardInterrupt

    d = sy.Disruptor(16, np.int64)
    d.handle_events_with(interrupted, Recorder())
    d.start()
    d.publish_batch(np.arange(4, dtype=np.int64))
    with pytest.raises(KeyboardInterrupt):
        d.shutdown(timeout=10)
