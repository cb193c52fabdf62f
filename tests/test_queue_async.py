"""sympathy.Queue from asyncio: get_async / put_async never block the event loop.

Allowed: the awaiting coroutine resumes once an item (or room) comes, while other tasks keep
running; queue.Empty / queue.Full at the timeout; a cancelled waiter takes nothing.
Forbidden: the loop stalling while one coroutine waits; an item lost to a cancelled get_async.
"""
import asyncio
import multiprocessing as mp
import queue
import threading
import time

import pytest

import sympathy as sy

TIMEOUT = 30.0


async def _ticker(counter: list, stop: asyncio.Event):
    while not stop.is_set():
        counter[0] += 1
        await asyncio.sleep(0.001)


def test_get_async_lets_other_tasks_run_while_it_waits():
    q = sy.Queue()

    async def main():
        ticks, stop = [0], asyncio.Event()
        ticker = asyncio.create_task(_ticker(ticks, stop))
        threading.Timer(0.3, q.put, args=("late",)).start()  # another thread puts after 0.3 s
        got = await asyncio.wait_for(q.get_async(), TIMEOUT)
        waited_ticks = ticks[0]
        stop.set()
        await ticker
        return got, waited_ticks

    got, ticks = asyncio.run(main())
    assert got == "late"
    assert ticks >= 20  # the ticker ran throughout the 0.3 s wait (a blocked loop gives 1)


def _put_later(q, delay):
    time.sleep(delay)
    q.put({"from": "a child process"})


def test_get_async_receives_from_another_process():
    q = sy.Queue()
    child = mp.get_context("fork").Process(target=_put_later, args=(q, 0.2))
    child.start()
    assert asyncio.run(asyncio.wait_for(q.get_async(), TIMEOUT)) == {"from": "a child process"}
    child.join(TIMEOUT)
    assert child.exitcode == 0


def test_timeouts_raise_empty_and_full():
    q = sy.Queue(maxsize=1)
    with pytest.raises(queue.Empty):
        asyncio.run(q.get_async(timeout=0.05))
    asyncio.run(q.put_async("only room for one"))
    with pytest.raises(queue.Full):
        asyncio.run(q.put_async("no room", timeout=0.05))
    with pytest.raises(TypeError):
        asyncio.run(q.get_async(timeout="soon"))
    assert q.get(timeout=TIMEOUT) == "only room for one"


def test_put_async_waits_for_room_without_blocking_the_loop():
    q = sy.Queue(maxsize=1)
    q.put("first")

    async def main():
        ticks, stop = [0], asyncio.Event()
        ticker = asyncio.create_task(_ticker(ticks, stop))
        threading.Timer(0.3, q.get).start()  # room comes after 0.3 s
        await asyncio.wait_for(q.put_async("second"), TIMEOUT)
        stop.set()
        await ticker
        return ticks[0]

    assert asyncio.run(main()) >= 20
    assert q.get(timeout=TIMEOUT) == "second"


def test_a_cancelled_get_async_takes_nothing():
    q = sy.Queue()

    async def main():
        waiter = asyncio.create_task(q.get_async())
        await asyncio.sleep(0.1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        q.put("for the next reader")
        return await asyncio.wait_for(q.get_async(), TIMEOUT)

    assert asyncio.run(main()) == "for the next reader"
    assert q.empty()


def test_many_coroutines_share_the_items_exactly_once():
    q = sy.Queue()
    n = 2000

    async def reader(got):
        while (item := await q.get_async(timeout=TIMEOUT)) is not None:
            got.append(item)

    async def main():
        lists = [[] for _ in range(4)]
        readers = [asyncio.create_task(reader(g)) for g in lists]
        for i in range(n):
            await q.put_async(i)
        for _ in readers:
            await q.put_async(None)
        await asyncio.gather(*readers)
        return lists

    lists = asyncio.run(main())
    assert sorted(i for g in lists for i in g) == list(range(n))
    assert all(g == sorted(g) for g in lists)
