"""The ring survives its users: close() from another thread, views kept past close, two threads on
one single producer, dead peers, Ctrl-C (issue 15, cases 3-7).

A scenario that could crash or hang runs in a child process with a generous timeout; the test
asserts the child's exit status and what it printed. Forbidden: a signal death (SIGSEGV, SIGBUS),
a hang until the timeout, a lost or duplicated item of a live producer.
"""
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import sympathy as sy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAITS = ["busy_spin", "yield", "sleep", "blocking"]
HANG = 60  # seconds: a child still running then is hung, which is a failure


def run_child(code: str, *, timeout: float = HANG) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter importing this checkout; fail on a hang."""
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONFAULTHANDLER="1")
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"child hung for {timeout} s; output so far: {exc.stdout!r} {exc.stderr!r}")


def assert_clean_exit(proc: subprocess.CompletedProcess) -> str:
    died = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    assert proc.returncode == 0, f"child {died}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


PRELUDE = """
import queue, threading, time
import numpy as np
import sympathy as sy
def in_thread(fn):
    box = {}
    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box
"""


# ---- case 3: close() while another thread is inside ----------------------------------------------
@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("call", ["get", "get_timeout", "get_batch", "view_batch", "publish_full", "claim_full"])
def test_close_wakes_a_thread_inside_with_closed_error(wait, call):
    out = assert_clean_exit(run_child(PRELUDE + f"""
rb = sy.RingBuffer(4, np.int64, wait={wait!r})
c = rb.consumer()
if {call!r}.endswith("_full"):
    rb.publish_batch(np.arange(4, dtype=np.int64))   # full: the next claim waits for space
calls = {{
    "get": lambda: c.get(),
    "get_timeout": lambda: c.get(timeout=30),
    "get_batch": lambda: c.get_batch(4),
    "view_batch": lambda: c.view_batch(4).__enter__(),
    "publish_full": lambda: rb.publish(9),
    "claim_full": lambda: rb.claim(1).__enter__(),
}}
t, box = in_thread(calls[{call!r}])
time.sleep(0.3)                     # the thread is waiting inside C now
rb.close()
t.join(10)
assert not t.is_alive(), "still blocked 10 s after close()"
assert isinstance(box.get("error"), sy.ClosedError), box
print("ClosedError:", box["error"])
""", timeout=HANG))
    assert "closed (by another thread)" in out


def test_close_while_other_threads_hammer_the_ring():
    """Threads publishing and reading when close() lands: every call returns or raises ClosedError;
    nothing touches unmapped memory (before: SIGSEGV or heap corruption)."""
    out = assert_clean_exit(run_child(PRELUDE + """
for round in range(20):
    rb = sy.RingBuffer(64, np.int64, producer="multi", wait=("blocking", "yield")[round % 2])
    consumers = [rb.consumer() for _ in range(2)]
    def produce():
        for i in range(10**9):
            rb.publish(i)
    def consume(c):
        def run():
            while True:
                c.get_batch(16)
        return run
    threads = [in_thread(produce) for _ in range(2)] + [in_thread(consume(c)) for c in consumers]
    time.sleep(0.02 + 0.01 * (round % 5))
    rb.close()
    for t, box in threads:
        t.join(10)
        assert not t.is_alive()
        assert isinstance(box.get("error"), sy.ClosedError), box
print("ok")
"""))
    assert out.strip() == "ok"


# ---- case 4: zero-copy views kept past close() ----------------------------------------------------
def test_views_kept_past_close_stay_readable():
    out = assert_clean_exit(run_child(PRELUDE + """
import gc
tick = np.dtype([("id", np.int32), ("price", np.float64)])
rb = sy.RingBuffer(64, tick)
c = rb.consumer()
poller = rb.poller(after=[c])
batch = np.zeros(8, tick); batch["id"] = np.arange(8); batch["price"] = np.arange(8) * 0.5
rb.publish_batch(batch)
with c.view_batch(8) as view:
    kept = view                       # past the block: documented as invalid, must never crash
records = []
poller.poll(lambda event, seq, end: records.append(event))
with rb.claim(4) as slots:
    slots["id"] = 100
    claimed = slots
rb.close()
gc.collect()
big = [np.ones(1 << 20) for _ in range(64)]   # reuse freed memory if the ring had been unmapped
assert kept["id"].tolist() == list(range(8)), kept
assert [r["id"] for r in records] == list(range(8))
assert claimed["id"].tolist() == [100] * 4
print("ok")
"""))
    assert out.strip() == "ok"


def test_view_of_a_named_ring_past_close_and_unlink():
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    out = assert_clean_exit(run_child(PRELUDE + f"""
rb = sy.RingBuffer(16, np.int64, name={name!r})
c = rb.consumer()
rb.publish_batch(np.arange(5, dtype=np.int64))
cm = c.view_batch(5)
view = cm.__enter__()
rb.close()                    # the creator unlinks the name, and the handles go
assert view.tolist() == [0, 1, 2, 3, 4]
del cm, view
print("ok")
"""))
    assert out.strip() == "ok"


# ---- case 5: two threads publishing through one single-producer object ---------------------------
def test_second_thread_publishing_into_a_single_producer_ring_is_refused():
    rb = sy.RingBuffer(4, np.int64, wait="blocking")
    c = rb.consumer()
    rb.publish_batch(np.arange(4, dtype=np.int64))
    blocked = threading.Thread(target=rb.publish, args=(4,), kwargs={"timeout": 30})
    blocked.start()
    try:
        for _ in range(1000):  # until the thread is inside its claim: then we are refused, not Full
            try:
                rb.publish(99, timeout=0)
            except queue.Full:
                time.sleep(0.01)
            except RuntimeError as exc:
                assert "another thread is publishing into this single-producer ring" in str(exc)
                break
        else:
            pytest.fail("a second publishing thread was never refused")
        with pytest.raises(RuntimeError, match="single-producer"):
            rb.publish_batch(np.arange(3, dtype=np.int64), timeout=5)
    finally:
        got = [c.get(timeout=5) for _ in range(5)]
        blocked.join(10)
    assert got == [0, 1, 2, 3, 4]
    with pytest.raises(queue.Empty):
        c.get(timeout=0.05)  # the refused items never went in
    rb.publish(5)  # once the first thread is done, another may publish
    assert c.get(timeout=5) == 5
    rb.close()


def test_two_threads_on_one_single_producer_never_duplicate_or_lose():
    """Every publish that returned is delivered exactly once; every refused one is absent
    (before: 25 duplicates and 45 missing in 400 k, no error)."""
    n = 100_000
    rb = sy.RingBuffer(64, np.int64, wait="yield")
    c = rb.consumer()
    published = [[], []]
    refused = [0, 0]

    def produce(k):
        for i in range(k, 2 * n, 2):
            try:
                rb.publish(i, timeout=30)
                published[k].append(i)
            except RuntimeError:
                refused[k] += 1

    threads = [threading.Thread(target=produce, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    got = []
    while True:  # until both are done and nothing more comes (a lost item must not hang the test)
        done = not any(t.is_alive() for t in threads)
        try:
            got += c.get_batch(1024, timeout=0.5).tolist()
        except queue.Empty:
            if done:
                break
    for t in threads:
        t.join()
    assert len(got) == len(set(got)), "duplicated items"
    assert sorted(got) == sorted(published[0] + published[1])
    assert len(got) + sum(refused) == 2 * n
    rb.close()


# ---- case 6: dead peers ----------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["slots", "contiguous"])
def test_killed_single_producer_is_taken_over(layout):
    """In the contiguous layout nothing but the cursor says what is published: the dead
    producer's open claim (written, never published) must not reach the consumer either."""
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    out = assert_clean_exit(run_child(PRELUDE + f"""
import os, signal, multiprocessing as mp
rb = sy.RingBuffer(64, np.int64, name={name!r}, layout={layout!r})
c = rb.consumer()
ready = mp.get_context("fork").Event()
def producer():
    ring = sy.RingBuffer.attach({name!r}, np.int64)
    ring.publish_batch(np.arange(10, dtype=np.int64))
    with ring.claim(2) as slots:   # killed holding an open claim
        slots[:] = -1
        ready.set()
        time.sleep(600)
child = mp.get_context("fork").Process(target=producer)
child.start()
assert ready.wait(30)
os.kill(child.pid, signal.SIGKILL)
child.join()
rb.publish_batch(np.arange(10, 20, dtype=np.int64))    # the creator takes over the single producer
got = []
while len(got) < 20:
    got += c.get_batch(32, timeout=30).tolist()
assert got == list(range(20)), got
rb.close()
print("ok")
"""))
    assert out.strip() == "ok"


def _exit_mid_claim(name, ready):
    rb = sy.RingBuffer.attach(name, np.int64)
    with rb.claim(3):
        ready.set()
        time.sleep(0.2)
        os._exit(0)  # leaves the claim open: three sequences nobody will publish


@pytest.mark.parametrize("wait", WAITS)
def test_os_exit_of_one_multi_producer_loses_only_its_claim(wait):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(16, np.int64, name=name, producer="multi", wait=wait) as rb:
        c = rb.consumer()
        d = rb.consumer(after=[c])  # a consumer after it skips the same sequences
        ready = ctx.Event()
        child = ctx.Process(target=_exit_mid_claim, args=(name, ready))
        child.start()
        assert ready.wait(30)
        for i in range(40):  # this live producer laps the ring past the hole
            rb.publish(i, timeout=HANG)
            assert c.get(timeout=HANG) == i
            assert d.get(timeout=HANG) == i
        child.join()
        assert c.lost == 3 and d.lost == 3
        rb.close_stream()
        with pytest.raises(sy.ClosedError):
            c.get(timeout=HANG)


@pytest.mark.parametrize("wait", WAITS)
def test_a_dead_claim_of_several_sequences_does_not_end_the_stream(wait):
    """A producer exits inside a claim of 3; the live producer's items after that claim are all
    published before close_stream(), and only then do the readers reach the claim. Each of its 3
    sequences must be skipped (lost == 3) and the live items after them delivered. Before: the
    readers abandoned the claim's first sequence only, found the second "not published" on a closed
    stream, and ended with ClosedError having silently dropped all 10 live items (the fault runs'
    "live producer k: 1451 of 1500 delivered")."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(16, np.int64, name=name, producer="multi", wait=wait) as rb:
        c = rb.consumer()
        poller = rb.poller()
        ready = ctx.Event()
        child = ctx.Process(target=_exit_mid_claim, args=(name, ready))
        child.start()
        assert ready.wait(30)
        rb.publish_batch(np.arange(10, dtype=np.int64), timeout=HANG)  # after the dead claim
        child.join(HANG)
        assert child.exitcode == 0
        rb.close_stream()
        got = []
        with pytest.raises(sy.ClosedError):
            while True:
                got += c.get_batch(16, timeout=HANG).tolist()
        handled = []
        deadline = time.monotonic() + HANG
        with pytest.raises(sy.ClosedError):
            while time.monotonic() < deadline:
                poller.poll(lambda event, sequence, end_of_batch: handled.append(event))
        assert got == list(range(10)) and c.lost == 3
        assert handled == list(range(10)) and poller.lost == 3


@pytest.mark.parametrize("lane", ["owner", "shared"])
def test_a_live_claim_held_open_behind_a_dead_one_is_waited_for(lane):
    """A producer exits inside a claim of 3; then a live producer's thread holds its own claim
    open. The readers skip the dead claim (lost == 3) and wait at the live one, which is delivered
    once published. A multi-producer handle records its claims in two lanes (ring_sequencer.c,
    owner_claims): the first thread that claims through it writes plain stores, any other thread
    counts its claims; a reader that missed either lane would skip the live claim as the dead
    producer's (its floor lies below) and lose its items."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(16, np.int64, name=name, producer="multi", wait="yield") as rb:
        c = rb.consumer()
        poller = rb.poller()
        ready = ctx.Event()
        child = ctx.Process(target=_exit_mid_claim, args=(name, ready))
        child.start()
        assert ready.wait(30)
        child.join(HANG)
        assert child.exitcode == 0
        if lane == "shared":
            rb.publish(100, timeout=HANG)  # this thread claims first: the holder below is not the owner
        holding, release = threading.Event(), threading.Event()

        def hold():
            with rb.claim(2, timeout=HANG) as slots:
                slots[:] = [101, 102]
                holding.set()
                release.wait(HANG)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        assert holding.wait(HANG)
        if lane == "owner":
            rb.publish(100, timeout=HANG)  # after the held claim, through the other lane
        got = [c.get(timeout=HANG)] if lane == "shared" else []
        with pytest.raises(queue.Empty):
            c.get(timeout=0.5)  # dozens of liveness periods: the live claim must not be skipped
        assert c.lost == 3
        seen = []
        for _ in range(50):
            poller.poll(lambda event, sequence, end_of_batch: seen.append(event))
            time.sleep(0.01)
        assert poller.lost == 3 and seen == got
        release.set()
        holder.join(HANG)
        got += c.get_batch(16, timeout=HANG).tolist()
        while len(got) < 3:
            got += c.get_batch(16, timeout=HANG).tolist()
        assert got == ([100, 101, 102] if lane == "shared" else [101, 102, 100]) and c.lost == 3


def test_a_thread_waiting_for_space_does_not_shield_a_dead_claim():
    """Two threads publish through one multi-producer object: the first owns the record's owner
    lane, the second counts its claims in the shared lane. A producer dies inside a claim; the
    owner thread fills the ring behind it; the second thread's publish then waits for space. The
    reader must skip the dead claim, which is what frees that space. Before, the waiting thread's
    claim was counted open through its wait, under a floor from its previous claim (below the dead
    one), so the reader took the hole for the waiting thread's and waited too: the ring stalled
    until the publish timed out."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(16, np.int64, name=name, producer="multi", wait="yield") as rb:
        c = rb.consumer()
        rb.publish(0, timeout=HANG)                      # this thread: the owner lane, sequence 0
        second = threading.Thread(target=lambda: rb.publish(1, timeout=HANG))
        second.start()
        second.join(HANG)                                # the shared lane, sequence 1
        ready = ctx.Event()
        child = ctx.Process(target=_exit_mid_claim, args=(name, ready))
        child.start()
        assert ready.wait(30)
        child.join(HANG)                                 # sequences 2-4: a dead claim
        for i in range(5, 16):
            rb.publish(i, timeout=HANG)
        got = c.get_batch(16, timeout=HANG).tolist()     # 0 and 1: the reader now stands at the hole
        rb.publish(16, timeout=HANG)
        rb.publish(17, timeout=HANG)                     # the ring is full from there
        errors = []

        def publish_when_space():
            try:
                rb.publish(18, timeout=HANG)
            except BaseException as exc:
                errors.append(exc)

        waiting = threading.Thread(target=publish_when_space)
        waiting.start()
        time.sleep(0.3)                                  # well inside its wait for space
        try:
            while len(got) < 16:
                got += c.get_batch(16, timeout=5).tolist()
        except queue.Empty:
            pass
        waiting.join(HANG)
        assert got == [0, 1] + list(range(5, 19)) and c.lost == 3 and not errors, (got, c.lost, errors)


def test_records_of_dead_producers_with_open_claims_are_reclaimed():
    """A multi-producer ring has 64 producer records. A producer that dies holding a claim keeps
    its record while the claim is open, because readers learn from it who may own the hole; once
    every consumer has passed the cursor as it stood after the death, nobody needs it. Before, such
    records were never freed: after 63 such deaths (the 64th record is this process's producer)
    no producer could join any more. Here 70 producers each die inside a claim, one after another;
    each must join, and every live item comes through with the 70 dead claims counted lost."""
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    out = assert_clean_exit(run_child(PRELUDE + f"""
import os, multiprocessing as mp
ctx = mp.get_context("fork")
rb = sy.RingBuffer(64, np.int64, name={name!r}, producer="multi", wait="yield")
c = rb.consumer()
def die_inside_a_claim():
    ring = sy.RingBuffer.attach({name!r}, np.int64)
    ring._producer_handle()  # joins: a free (or freed) record, else ValueError and exit status 1
    with ring.claim(1):
        os._exit(0)
got = []
for i in range(70):
    child = ctx.Process(target=die_inside_a_claim)
    child.start()
    child.join(30)
    if child.exitcode != 0:
        print("producer", i, "could not join: exit status", child.exitcode)
        break
    rb.publish(i, timeout=30)
    got.append(c.get(timeout=30))
print("delivered", got == list(range(70)), "lost", c.lost)
rb.close()
"""))
    assert out.strip().splitlines()[-1] == "delivered True lost 70", out


def test_a_65th_live_multi_producer_is_told_why_it_cannot_join():
    """64 producer records: the 65th live producer gets a ValueError that says so (before: "this
    single-producer ring already has a producer", said of a multi-producer ring)."""
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(128, np.int64, name=name, producer="multi") as rb:
        rings = [sy.RingBuffer.attach(name, np.int64) for _ in range(64)]
        for ring in rings[:63]:
            ring.publish(1)  # each object opens its own producer: with rb's, 64 records in use
        rb.publish(1)
        with pytest.raises(ValueError, match="every producer record"):
            rings[63].publish(1)
        for ring in rings:
            ring.close()


# ---- case 7: Ctrl-C ---------------------------------------------------------------------------------
@pytest.mark.parametrize("wait", WAITS)
def test_ctrl_c_interrupts_every_blocked_call(wait):
    """SIGINT raises KeyboardInterrupt in a blocked get(), get(timeout=30), publish on a full ring
    and view_batch (before: still blocked 5 s later). The latency is printed, not asserted."""
    code = PRELUDE + f"""
import sys
rb = sy.RingBuffer(4, np.int64, wait={wait!r})
c = rb.consumer()
calls = [("get", lambda: c.get()), ("get_timeout", lambda: c.get(timeout=30)),
         ("view_batch", lambda: c.view_batch(4).__enter__()),
         ("publish_full", lambda: (rb.publish_batch(np.arange(4, dtype=np.int64)), rb.publish(4)))]
for what, call in calls:
    print("READY", what, flush=True)
    try:
        call()
        print("RETURNED", what, flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED", what, time.monotonic(), flush=True)
    if what == "publish_full":
        c.get_batch(4)
print("DONE", flush=True)
"""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, other = queue.Queue(), []  # the child's protocol lines; anything else (a warning) aside

    def pump():
        for text in proc.stdout:
            words = text.split()
            if words and words[0] in ("READY", "INTERRUPTED", "RETURNED", "DONE"):
                lines.put(words)
            else:
                other.append(text)

    threading.Thread(target=pump, daemon=True).start()

    def next_line():
        try:
            return lines.get(timeout=HANG)
        except queue.Empty:
            pytest.fail(f"child printed nothing for {HANG} s: hung; other output: {other}")

    latencies = {}
    try:
        for _ in range(4):
            line = next_line()
            assert line and line[0] == "READY", line
            time.sleep(0.3)  # well inside the wait
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            reply = next_line()
            assert reply[:2] == ["INTERRUPTED", line[1]], reply
            latencies[line[1]] = float(reply[2]) - sent
        assert next_line() == ["DONE"]
        assert proc.wait(HANG) == 0
    finally:
        proc.kill()
        proc.wait()
    print(wait, {k: f"{v * 1e3:.1f} ms" for k, v in latencies.items()})


def test_ctrl_c_as_get_returns_from_c_loses_no_item():
    """get() of a plain dtype takes every ready item in one C call, which releases them, and hands
    them out one by one. A SIGINT that arrives during that call raises KeyboardInterrupt when the
    call returns (the interpreter runs signal handlers then): before, the items it took were
    dropped (released, never stored); now they stay counted in the consumer and come next. The
    interrupt is raised exactly there by wrapping the C call (and, for a single item, the unpack
    after it)."""
    out = assert_clean_exit(run_child(PRELUDE + """
import sympathy.ring.consumer as cm
rb = sy.RingBuffer(64, np.int64)
c = rb.consumer()
real_read = cm._read_ahead
def read_then_interrupt(*args):
    real_read(*args)
    raise KeyboardInterrupt  # what a pending SIGINT does as the call returns
def interrupted(call):
    try:
        call()
    except KeyboardInterrupt:
        return True
    return False
rb.publish_batch(np.arange(10, dtype=np.int64))
cm._read_ahead = read_then_interrupt
assert interrupted(c.get)
cm._read_ahead = real_read
got = []
try:
    while len(got) < 10:
        got.append(c.get(timeout=1))
except queue.Empty:
    pass
print("batch", got == list(range(10)), got)
rb.publish(42)
real_unpack = rb._unpack
def unpack_then_interrupt(buf):
    real_unpack(buf)
    raise KeyboardInterrupt
rb._unpack = unpack_then_interrupt
assert interrupted(c.get)
rb._unpack = real_unpack
try:
    print("single", c.get(timeout=1) == 42)
except queue.Empty:
    print("single", False)
rb.publish_batch(np.arange(100, 105, dtype=np.int64))
cm._read_ahead = read_then_interrupt
assert interrupted(c.get)
cm._read_ahead = real_read
try:
    print("then get_batch", c.get_batch(16, timeout=1).tolist() == list(range(100, 105)))
except queue.Empty:
    print("then get_batch", False)
"""))
    assert out.split("\n")[-4:] == ["batch True " + str(list(range(10))), "single True", "then get_batch True", ""], out
