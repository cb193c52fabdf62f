"""The transports `sympathy bench pipeline` races: sympathy's and every anchor's, behind one shape.

A transport is made in the parent before any child is forked (`prepare`), then each process opens
its own end after the fork (`sender()` in the producing process, `receiver()` in each consuming
one): sockets, iceoryx2 nodes and ring attachments are per process. Ends are objects with
`put(obj)` / `get()` (any picklable object) and `put_frame(src, i)` / `get_frame()` (a frame:
made by copying `src` into wherever this transport wants it written, stamped with `i` in its first
and last 8 bytes; the receiver returns the stamp after checking both ends agree). Copying transports
make each frame in a fresh array and hand it over; zero-copy ones make it in the loaned slot.

Every blocking call has a deadline (TIMEOUT_S): a broken anchor is an exception, never a hung run.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import queue
import tempfile
import time
import uuid

import numpy as np

TIMEOUT_S = 60.0
INSTALL_HINT = "not installed (pip install sympathy[bench])"


def stamp(frame: np.ndarray, i: int) -> None:
    words = frame.reshape(-1).view(np.int64)  # a view: 1080p RGB is a whole number of 8-byte words
    words[0] = words[-1] = i


def read_stamp(frame) -> int:
    words = np.asarray(frame).reshape(-1).view(np.int64)
    first, last = int(words[0]), int(words[-1])
    if first != last:
        raise RuntimeError(f"torn frame: stamped {first} at the start and {last} at the end")
    return first


def make_frame(src: np.ndarray, i: int) -> np.ndarray:
    frame = src.copy()  # the frame's making: a fresh array, as a camera or decoder would fill
    stamp(frame, i)
    return frame


class Transport:
    """Defaults shared by the copying transports: frames are pickled objects like any other."""
    label = ""
    kinds = ("objects", "frames", "workers")
    needs: str | None = None     # the module of an optional anchor (ImportError -> "not installed")
    start_method = "fork"        # how the child processes start
    parent_first = True          # the parent's end opens before the children's (it binds, or creates)
    zero_copy = False

    def prepare(self, kind: str, frame_bytes: int, consumers: int) -> None:
        if self.needs:
            __import__(self.needs)

    def sender(self):
        return self

    def receiver(self):
        return self

    def started(self) -> None:
        """In the sending process once every end is open (all processes passed the ready barrier)."""

    def finish(self) -> None:
        """In the parent, once every item is through: before the stop messages go out."""

    def put_frame(self, src: np.ndarray, i: int) -> None:
        self.put(make_frame(src, i))

    def get_frame(self) -> int:
        return read_stamp(self.get())

    def close(self) -> None:
        pass


class MpQueue(Transport):
    label = "multiprocessing.Queue"

    def prepare(self, kind, frame_bytes, consumers):
        import multiprocessing as mp

        self.q = mp.get_context("fork").Queue()

    def put(self, obj):
        self.q.put(obj)

    def get(self):
        return self.q.get(timeout=TIMEOUT_S)


class SimpleQueue(MpQueue):
    label = "multiprocessing.SimpleQueue"

    def prepare(self, kind, frame_bytes, consumers):
        import multiprocessing as mp

        self.q = mp.get_context("fork").SimpleQueue()

    def get(self):
        # SimpleQueue.get has no timeout: wait on its pipe first, so a dead peer is an error, not a hang
        if not self.q._reader.poll(TIMEOUT_S):
            raise TimeoutError("multiprocessing.SimpleQueue: no item in time")
        return self.q.get()


class FasterFifo(Transport):
    label = "faster-fifo"
    needs = "faster_fifo"

    def prepare(self, kind, frame_bytes, consumers):
        import faster_fifo

        # The circular buffer must hold a whole pickled frame, with room for a few more.
        self.q = faster_fifo.Queue(max_size_bytes=max(8 << 20, 4 * frame_bytes + (1 << 20)))

    def put(self, obj):
        self.q.put(obj, timeout=TIMEOUT_S)

    def get(self):
        return self.q.get(timeout=TIMEOUT_S)


class Zmq(Transport):
    """PUSH/PULL over ipc:// (a Unix socket); arrays go with copy=False (no copy on the sending
    side; the kernel still copies through the socket). The parent's end binds, children connect.
    PUSH deals messages round-robin to the pipes of the workers it has connected, so a stop message
    per worker may reach one twice and another never: workers stop on `finish()`'s event instead."""
    label = "pyzmq PUSH/PULL ipc://"
    needs = "zmq"
    POLL_MS = 50

    def prepare(self, kind, frame_bytes, consumers):
        import multiprocessing as mp

        import zmq  # noqa: F401

        self.dir = tempfile.mkdtemp(prefix="sybench-zmq-")
        self.address = f"ipc://{self.dir}/pipe"
        self.parent = os.getpid()
        self.stop = mp.get_context("fork").Event()

    def _socket(self, kind):
        import zmq

        context = zmq.Context()  # one per process, made after the fork
        s = context.socket(kind)
        # A sender's close() waits for what is still queued (LINGER 0 dropped a run's last frames);
        # a receiver's drops what nobody will read.
        s.setsockopt(zmq.LINGER, int(TIMEOUT_S * 1000) if kind == zmq.PUSH else 0)
        s.setsockopt(zmq.RCVTIMEO if kind == zmq.PULL else zmq.SNDTIMEO,
                     self.POLL_MS if kind == zmq.PULL else int(TIMEOUT_S * 1000))
        (s.bind if os.getpid() == self.parent else s.connect)(self.address)
        self.socket, self.context = s, context
        return self

    def sender(self):
        import zmq

        return self._socket(zmq.PUSH)

    def receiver(self):
        import zmq

        return self._socket(zmq.PULL)

    def _recv(self, **kwargs):
        import zmq

        deadline = None
        while True:
            try:
                return self.socket.recv(**kwargs)
            except zmq.Again:
                if self.stop.is_set():
                    return None
                deadline = deadline or time.monotonic() + TIMEOUT_S
                if time.monotonic() > deadline:
                    raise TimeoutError("pyzmq: no message in time") from None

    def finish(self):
        self.stop.set()

    def put(self, obj):
        self.socket.send(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))  # what send_pyobj does

    def get(self):
        data = self._recv()
        return None if data is None else pickle.loads(data)

    def put_frame(self, src, i):
        self.socket.send(make_frame(src, i), copy=False)

    def get_frame(self):
        return read_stamp(np.frombuffer(self._recv(copy=False).buffer, np.uint8))

    def close(self):
        if getattr(self, "socket", None) is not None:
            self.socket.close(0)
            self.context.term()
            self.socket = None
        if os.getpid() == self.parent:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)


class SharedMemoryByHand(Transport):
    """multiprocessing.shared_memory by hand: a pool of frame blocks made up front, the block's
    index sent on one multiprocessing.Queue and returned on another once read. The producer makes
    each frame in a free block (zero-copy); two small queue messages per frame."""
    label = "shared_memory + Queue of names"
    kinds = ("frames",)
    zero_copy = True
    BLOCKS = 4

    def prepare(self, kind, frame_bytes, consumers):
        import multiprocessing as mp
        from multiprocessing import shared_memory

        ctx = mp.get_context("fork")
        self.blocks = [shared_memory.SharedMemory(create=True, size=frame_bytes) for _ in range(self.BLOCKS)]
        self.full, self.free = ctx.Queue(), ctx.Queue()
        for b in range(self.BLOCKS):
            self.free.put(b)
        self.parent, self.frame_bytes = os.getpid(), frame_bytes

    def put_frame(self, src, i):
        b = self.free.get(timeout=TIMEOUT_S)
        frame = np.ndarray(src.shape, np.uint8, buffer=self.blocks[b].buf)
        np.copyto(frame, src)
        stamp(frame, i)
        del frame  # no view left on the block when it changes hands
        self.full.put(b)

    def get_frame(self):
        b = self.full.get(timeout=TIMEOUT_S)
        i = read_stamp(np.frombuffer(self.blocks[b].buf, np.uint8, self.frame_bytes))
        self.free.put(b)
        return i

    def close(self):
        if os.getpid() != self.parent:
            return
        for block in self.blocks:
            block.close()
            block.unlink()


class Iceoryx2(Transport):
    """iceoryx2 publish-subscribe of a byte slice: the sample is loaned from the publisher's shared
    memory and written in place, the subscriber reads it in place. No loss: safe overflow off, the
    publisher retries until delivered. Objects are pickled into a loaned slice. Publish-subscribe
    hands every sample to every subscriber, so it has no work-sharing row."""
    label = "iceoryx2"
    needs = "iceoryx2"
    kinds = ("objects", "frames")
    zero_copy = True
    BUFFER = 4  # samples in flight, as the other zero-copy transports' pools
    # Samples went missing here three ways: a publisher that exits takes its data segment and the
    # samples not yet received with it (the producer now waits for the consumer's "done"); send()
    # returning 0 receivers part-way through a run, under fork (a child of a parent that has used
    # iceoryx2's runtime); and a subscriber opened before the publisher (iceoryx2 issue #1697, safe
    # overflow off). Publisher first, children spawned: no loss in 12 + 16 runs.
    start_method = "spawn"
    parent_first = False

    def prepare(self, kind, frame_bytes, consumers):
        import iceoryx2  # noqa: F401

        self.service_name = f"sybench/pipeline/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.max_len = frame_bytes if kind == "frames" else 4096

    def _service(self):
        import iceoryx2 as iox

        iox.set_log_level(iox.LogLevel.Error)  # not the "no config file" notice on every node
        self.node = iox.NodeBuilder.new().create(iox.ServiceType.Ipc)
        return (self.node.service_builder(iox.ServiceName.new(self.service_name))
                .publish_subscribe(iox.Slice[ctypes.c_uint8])
                .enable_safe_overflow(False).history_size(0)
                .subscriber_max_buffer_size(self.BUFFER).subscriber_max_borrowed_samples(2)
                .open_or_create())

    def sender(self):
        import iceoryx2 as iox

        self.service = self._service()
        self.pub = (self.service.publisher_builder().initial_max_slice_len(self.max_len)
                    .allocation_strategy(iox.AllocationStrategy.PowerOfTwo)
                    .backpressure_strategy(iox.BackpressureStrategy.RetryUntilDelivered).create())
        return self

    def receiver(self):
        self.sub = self._service().subscriber_builder().buffer_size(self.BUFFER).create()
        return self

    def started(self):
        # A publisher delivers only to the subscribers it has connected to (and, with no history,
        # drops the rest): wait until the subscriber is registered, then connect, then send.
        deadline = time.monotonic() + TIMEOUT_S
        while self.service.dynamic_config.number_of_subscribers < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("iceoryx2: no subscriber registered")
            time.sleep(0.001)
        self.pub.update_connections()

    @staticmethod
    def _view(address: int, n: int) -> np.ndarray:
        return np.frombuffer((ctypes.c_uint8 * n).from_address(address), np.uint8)

    def _receive(self):
        sample, deadline = self.sub.receive(), None
        while sample is None:  # no blocking receive in the bindings: poll, yielding the CPU
            deadline = deadline or time.monotonic() + TIMEOUT_S
            if time.monotonic() > deadline:
                raise TimeoutError("iceoryx2: no sample in time")
            os.sched_yield()
            sample = self.sub.receive()
        return sample

    def put(self, obj):
        data = pickle.dumps(obj, 5)
        sample = self.pub.loan_slice_uninit(len(data))
        self._view(sample.payload_ptr, len(data))[:] = np.frombuffer(data, np.uint8)
        sample.assume_init().send()

    def get(self):
        sample = self._receive()
        obj = pickle.loads(self._view(sample.payload_ptr, sample.payload().len()))
        sample.delete()
        return obj

    def put_frame(self, src, i):
        sample = self.pub.loan_slice_uninit(src.nbytes)
        frame = self._view(sample.payload_ptr, src.nbytes)
        np.copyto(frame, src.reshape(-1))
        stamp(frame, i)
        sample.assume_init().send()

    def get_frame(self):
        sample = self._receive()
        i = read_stamp(self._view(sample.payload_ptr, sample.payload().len()))
        sample.delete()
        return i

    def close(self):
        for name in ("pub", "sub"):
            port = getattr(self, name, None)
            if port is not None:
                port.delete()
                setattr(self, name, None)


class SyQueue(Transport):
    """sympathy.Queue: pickle protocol 5, arrays out of band (copied once into the ring, once out)."""
    label = "sy.Queue"

    def prepare(self, kind, frame_bytes, consumers):
        import sympathy as sy

        capacity = 16 << 20 if kind != "frames" else max(16 << 20, 8 * frame_bytes)
        self.q = sy.Queue(capacity_bytes=1 << (capacity - 1).bit_length())

    def put(self, obj):
        self.q.put(obj)

    def get(self):
        return self.q.get(timeout=TIMEOUT_S)

    def close(self):
        self.q.close()


class SyQueueFrames(SyQueue):
    """sympathy.Queue's zero-copy frames: the producer writes each frame in one of the queue's
    shared frame buffers (`put_array`), the consumer reads it in place (`get_array`)."""
    label = "sy.Queue put_array/get_array"
    kinds = ("frames",)
    zero_copy = True
    BUFFERS = 4  # frames in flight, as the other zero-copy transports' pools

    def prepare(self, kind, frame_bytes, consumers):
        import sympathy as sy

        self.q = sy.Queue(frame_bytes=frame_bytes, frame_count=self.BUFFERS)  # ends drop their arrays at once

    def put_frame(self, src, i):
        with self.q.put_array(src.shape, src.dtype, timeout=TIMEOUT_S) as frame:
            np.copyto(frame, src)
            stamp(frame, i)
        del frame  # its buffer goes back to the pool only once no array of it is left

    def get_frame(self):
        with self.q.get_array(timeout=TIMEOUT_S) as view:
            i = read_stamp(view)
        del view
        return i


class SyRingFrames(Transport):
    """sy.RingBuffer of raw frame-sized items in shared memory: the producer writes each frame in
    place (`claim`), the consumer reads it in place (`view_batch`): zero-copy, one consumer."""
    label = "sy.RingBuffer claim/view_batch"
    kinds = ("frames",)
    zero_copy = True
    SLOTS = 4
    WAIT = "blocking"

    def prepare(self, kind, frame_bytes, consumers):
        from ...ring import RingBuffer

        self.name = f"sybench-frames-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.ring = RingBuffer(self.SLOTS, item_size=frame_bytes, name=self.name, wait=self.WAIT)
        self.consumer = self.ring.consumer()  # before any publish: it gates the producer from the start
        self.parent = os.getpid()

    def sender(self):
        from ...ring import RingBuffer

        self.ring = RingBuffer.attach(self.name)
        return self

    def put_frame(self, src, i):
        with self.ring.claim(1, timeout=TIMEOUT_S) as slots:
            frame = slots[0]
            np.copyto(frame, src.reshape(-1))
            stamp(frame, i)

    def get_frame(self):
        with self.consumer.view_batch(1, timeout=TIMEOUT_S) as frames:
            return read_stamp(frames[0])

    def close(self):
        self.ring.close()


class SyRingFramesYield(SyRingFrames):
    """The same ring with the yield wait: its consumer polls with sched_yield, as the iceoryx2
    row's does (its bindings have no blocking receive), so the producer never pays a futex wake
    (the blocking wait's consumer sleeps between frames, and each publish then wakes it)."""
    label = "sy.RingBuffer claim/view_batch, yield wait"
    WAIT = "yield"


def busy_loop_count(task_s: float) -> int:
    """Iterations of an empty Python loop that take task_s on this CPU (the fastest of 5 timings,
    so a task is at least task_s of work when the CPU is not shared). The loop first runs for
    WARM_S: a core that was idle runs at a low clock until the governor raises it, and the 16-core
    host, calibrated cold (5 timings of ~1 ms), gave "50 us" tasks that took 19-25 us once its
    cores were busy (docs/pipeline.md, "Workers: the ideal")."""
    n, t0 = 20_000, time.perf_counter()
    while time.perf_counter() - t0 < WARM_S:
        _time_loop(n)
    best = min(_time_loop(n) for _ in range(5))
    return max(1, round(n * task_s / best))


WARM_S = 0.3


def _time_loop(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        pass
    return time.perf_counter() - t0


def drain(q) -> None:
    try:
        while True:
            q.get_nowait()
    except (queue.Empty, OSError, ValueError):
        pass
