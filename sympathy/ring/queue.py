"""sympathy.Queue: multiprocessing.Queue's interface on the ring, work shared among processes.

    q = sy.Queue()                      # or sy.Queue(maxsize=100), sy.JoinableQueue()
    Process(target=worker, args=(q,))   # under fork or spawn: the handle pickles as its segment's name
    q.put(obj); q.get()                 # any picklable object; each item to exactly one consumer

Semantics are multiprocessing.Queue's, call by call (tests/test_queue.py compares the two): `put`
and `get` with `block` and `timeout` (a negative timeout tries once, as there), `queue.Full` and
`queue.Empty`, `ValueError` once this handle is closed, `join_thread` asserting a prior `close`.
`put` waits only for `maxsize`, as there: a record the ring has no room for now is spilled (kept in
this process, its count held) and a feeder thread puts it when room comes, with the same
`close`/`join_thread`/`cancel_join_thread` rules (a process exits only once its spilled records are
in the ring, unless it cancelled that). Otherwise `put` has copied the item into shared memory when
it returns (no feeder delay: `get_nowait` right after `put` finds it). Differences, on the safe
side: the object is pickled in `put` (an unpicklable one raises there; a later change to it is not
sent); the handle may be pickled anywhere, not only to a child process. Capacity: `maxsize` counts
items, as there; independently the ring holds `capacity_bytes` of records (default 16 MiB), and
one item may take at most that much pickled.

Items are pickled with protocol 5; NumPy arrays (whatever pickles through PickleBuffer) travel as
out-of-band buffers, copied once into the ring and once out of it. Several producer processes and
several consumer processes may share one queue; items of one producer arrive in the order it put
them. A consumer killed while it holds an item it has taken (between the take and the copy out)
does not stall the queue: the item is counted in `lost`; a producer killed mid-put is skipped and
counted in `abandoned`. See docs/ring.md, "The queue".
"""
from __future__ import annotations

import collections
import errno
import multiprocessing.util as _mp_util
import os
import pickle
import queue
import secrets
import struct
import sys
import threading
import weakref

import numpy as np

from .._errors import SY_EINVAL, SY_ETIMEDOUT, check
from .._ring import ffi, lib
from . import segment
from ._queue_core import (_SLICE_NS, _TAG_BUFFERS, _TAG_FRAME, _TAG_PICKLE, SMALL_BYTES,  # noqa: F401
                          _get, _get_small, _in_slices, _load_with_buffers, _loads, _Pieces,
                          _put1, _put_record, _put_small, _raise, _timeout_ns)
from .queue_async import AsyncMixin
from .queue_frames import DEFAULT_FRAME_COUNT, FrameStore, FramesMixin, check_frame_args

__all__ = ["Queue", "JoinableQueue"]

SLOT_BYTES = 120          # payload per 128-byte slot (8 go to the slot's header): a pickled small dict fits one
DEFAULT_CAPACITY_BYTES = 1 << 24
SCRATCH_BYTES = 1 << 16   # records up to this land in a kept buffer: no allocation per get
_ITEM_TYPE = b"sympathy.Queue"

_TRY, _SPILLED = lib.SY_QUEUE_TRY, lib.SY_QUEUE_SPILLED
_dumps = pickle.dumps
_handles: weakref.WeakSet = weakref.WeakSet()  # every Queue of this process, for fork


class Queue(FramesMixin, AsyncMixin):
    """multiprocessing.Queue on a shared ring; each item goes to exactly one consumer.

    maxsize: at most this many items in the queue (<= 0: no limit), as multiprocessing.Queue.
    capacity_bytes (ours): bytes of records the ring holds, rounded up to a power of two of 128-byte
    slots; an item pickles to at most this much (ValueError otherwise). ctx is accepted for
    multiprocessing.Queue's signature and not needed (the queue works under every start method).
    """

    _joinable = False

    def __init__(self, maxsize: int = 0, *, ctx=None, capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
                 frame_bytes: int = 0, frame_count: int = DEFAULT_FRAME_COUNT):
        if isinstance(maxsize, bool) or not hasattr(maxsize, "__index__"):
            raise TypeError(f"'{type(maxsize).__name__}' object cannot be interpreted as an integer")
        maxsize = max(0, maxsize.__index__())
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int):
            raise TypeError(f"capacity_bytes must be an int; got {type(capacity_bytes).__name__}")
        if not 1024 <= capacity_bytes <= 1 << 40:
            raise ValueError(f"capacity_bytes must be in [1024, 2**40]; got {capacity_bytes}")
        check_frame_args(frame_bytes, frame_count)
        slots = 1 << max(3, (-(-capacity_bytes // (SLOT_BYTES + 8)) - 1).bit_length())
        name = f"sympathy-queue-{os.getpid()}-{secrets.token_hex(6)}"
        handle, nonce = segment.create_multi_producer(name, slots, SLOT_BYTES, _ITEM_TYPE)
        check(lib.sy_queue_init(handle, maxsize, int(self._joinable)), "initialising the queue")
        created = [(name, nonce, segment.remember_created(name, nonce))]
        frames = None
        if frame_bytes:
            frames, made = FrameStore.create(name, frame_bytes, frame_count)
            created.append(made)
        # The creator removes the name when the interpreter exits, or when this object goes if it
        # was never pickled: a pickled handle may still be on its way to a process that attaches
        # by name (Process.start() drops its reference to args before a spawned child unpickles).
        # Processes that attached keep their mapping either way (as with any POSIX shared memory).
        self._pickled = [False]
        self._finalizer = weakref.finalize(self, _unlink_if_creator, created, os.getpid(), self._pickled)
        self._setup(handle, name, maxsize)
        self._frames = frames

    @classmethod
    def _attach(cls, name: str) -> "Queue":
        out = ffi.new("sy_ring **")
        status = lib.sy_ring_attach(segment.segment_name(name), out)
        if status != 0:
            if ffi.errno == errno.ENOENT:
                raise FileNotFoundError(errno.ENOENT, f"queue {name!r} is gone: its creator's Queue object was "
                                                      f"collected, or the creator exited")
            check(status, f"attaching to queue {name!r}", os_errno=ffi.errno or None)
        handle = ffi.gc(out[0], lib.sy_ring_free)
        maxsize, joinable = ffi.new("int64_t *"), ffi.new("int *")
        if lib.sy_queue_check(handle, maxsize, joinable) != 0 or bool(joinable[0]) != cls._joinable:
            raise ValueError(f"segment {name!r} is not a sympathy.{cls.__name__}")
        q = cls.__new__(cls)
        q._finalizer, q._pickled = None, [True]
        q._setup(handle, name, int(maxsize[0]))
        return q

    def _setup(self, handle, name: str, maxsize: int) -> None:
        self._handle = handle
        self._name = name
        self._maxsize = maxsize
        self._max_record = int(lib.sy_queue_max_record(handle))
        self._closed = False
        self._producer = self._worker = None
        self._put_lock, self._get_lock = threading.Lock(), threading.Lock()
        self._spill: collections.deque = collections.deque()  # records waiting for ring space (put lock)
        self._feeder = self._join_feeder = None
        self._join_cancelled = False
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_ptr = ffi.from_buffer(self._scratch)
        self._out, self._tag = ffi.new("int64_t *"), ffi.new("int64_t *")  # bytes, tag
        self._tally = ffi.new("sy_queue_tally *")
        self._frames = None  # the frame buffers' handle, attached on first use
        _handles.add(self)

    def __reduce__(self):
        self._pickled[0] = True
        return type(self)._attach, (self._name,)

    # ---- put -----------------------------------------------------------------------------------
    def put(self, obj, block: bool = True, timeout: float | None = None) -> None:
        """Put obj into the queue. Waits (or raises queue.Full) only for `maxsize`, as
        multiprocessing.Queue: when the ring has no room for the record now, the record is kept in
        this process and a feeder thread puts it as soon as there is (see `join_thread`)."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        if timeout is not None:
            _timeout_ns(block, timeout)  # a bad timeout is an error even when no wait is needed
        try:  # a constant callback: no list and bound method per put (1.3k of its ~12k instructions)
            data = _dumps(obj, 5, buffer_callback=_refuse_buffers)
        except _HasBuffers:  # arrays out of band: pickled again, collecting them (their copy dominates)
            buffers: list = []
            data = _dumps(obj, 5, buffer_callback=buffers.append)
            self._put_built(self._record_with_buffers(data, [b.raw() for b in buffers]), block, timeout)
            return
        n = len(data)
        if n > self._max_record:
            self._too_big(n)
        lock = self._put_lock
        lock.acquire()  # the fast path, inline: one C call between the lock's two
        try:
            if self._spill or self._producer is None:
                status = None  # the slow path below tries
            else:
                if n <= SMALL_BYTES:  # never waits, copies little: the GIL is kept across the call
                    status = _put_small(self._producer, data, n, _TRY)
                else:
                    status = _put1(self._producer, data, n, _TAG_PICKLE, _TRY)
                if status == _SPILLED:
                    self._keep(data)
                    return
        finally:
            lock.release()
        if status != 0:
            self._put_built(data, block, timeout, status)

    def _put_built(self, record, block: bool, timeout, status=None) -> bool:
        """True when the record went straight into the ring, False when it was spilled. status:
        what a first try (SY_QUEUE_TRY) already gave."""
        if status is None:
            with self._put_lock:
                if not self._spill:
                    producer = self._producer or self._open_producer()
                    status = _put_record(producer, record, _TRY)
                    if status == lib.SY_QUEUE_SPILLED:
                        self._keep(record)
                        return False
        if status == 0:
            return True
        if status is not None and status != SY_ETIMEDOUT:
            check(status, "putting an item")
        # maxsize reached, or records spilled before this one: a count first, without the lock (the
        # feeder needs it to put the spilled records, whose counts are already held)
        self._reserve(block, timeout)
        with self._put_lock:
            if not self._spill:
                status = _put_record(self._producer or self._open_producer(), record, lib.SY_QUEUE_RESERVED)
                if status == 0:
                    return True
                if status != lib.SY_QUEUE_SPILLED:
                    check(status, "putting an item")
            self._keep(record)
            return False

    def _reserve(self, block: bool, timeout) -> None:
        """One count below maxsize, held for this put (queue.Full if none comes in time)."""
        t = -1 if block and timeout is None else _timeout_ns(block, timeout)
        producer = self._producer or self._open_producer()
        status = _in_slices(self, lib.sy_queue_reserve, (producer,), (), t)
        if status:
            _raise(status, queue.Full, "putting an item")

    def _record_with_buffers(self, data: bytes, raws: list):
        """A record of the pickle and its out-of-band buffers (each copied once into the ring)."""
        head = struct.pack(f"<{len(raws) + 2}q", len(raws), len(data), *(r.nbytes for r in raws))
        parts = [head, data, *raws]
        total = len(head) + len(data) + sum(r.nbytes for r in raws)
        if total > self._max_record:
            self._too_big(total)
        return _Pieces(parts, total, _TAG_BUFFERS)

    def _keep(self, record) -> None:
        """Spill: the record (its count held) waits in this process for the feeder thread. Called
        with the put lock held, so a later put of this process never overtakes it."""
        if isinstance(record, _Pieces):
            record = record.owned()  # the caller may change its arrays once put() returns
        self._spill.append(record)
        if self._feeder is None:
            self._start_feeder()

    def _start_feeder(self) -> None:
        thread = threading.Thread(target=_feed, args=(self,), name="sympathy.Queue feeder", daemon=True)
        self._feeder = thread
        thread.start()
        # multiprocessing.Queue's rules: at exit this process waits for the feeder to put what was
        # spilled, unless cancel_join_thread() was called (then what is still spilled is dropped,
        # and counted in `abandoned` once this process is gone).
        if not self._join_cancelled:
            self._join_feeder = _mp_util.Finalize(thread, _join_thread, [weakref.ref(thread)], exitpriority=-5)

    def _too_big(self, n: int):
        raise ValueError(f"the item pickles to {n} bytes; this queue's ring holds records of at most "
                         f"{self._max_record} bytes: make the queue with a larger capacity_bytes=")

    def put_nowait(self, obj) -> None:
        return self.put(obj, False)

    # ---- get -----------------------------------------------------------------------------------
    def get(self, block: bool = True, timeout: float | None = None):
        """Remove and return an item; queue.Empty if none comes in time."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        lock = self._get_lock
        if block and timeout is None:
            t = -1
            lock.acquire()
        else:
            t = _timeout_ns(block, timeout)
            # A try of the lock first: acquire() with a timeout costs twice as much (CPython reads
            # the clock for it), and a worker pool's gets mostly find the lock free
            if not lock.acquire(False):
                if t < 0:
                    lock.acquire()
                elif not lock.acquire(True, t / 1e9):
                    raise queue.Empty
        try:
            worker = self._worker or self._open_worker()
            out, tag = self._out, self._tag
            # one look with the GIL kept (it never waits); then, if nothing was there, waits
            status = _get_small(worker, self._scratch_ptr, SCRATCH_BYTES, out, tag)
            if status == 0:
                # pickle stops at its STOP opcode: the whole scratch buffer, no slice (under the lock:
                # the scratch is reused by the next get)
                return _loads(self._scratch)
            if status == SY_ETIMEDOUT and t != 0:
                status = _in_slices(self, _get, (worker, self._scratch_ptr, SCRATCH_BYTES), (out, tag), t)
                if status == 0:
                    return _loads(self._scratch)
            if status != lib.SY_QUEUE_HELD:
                _raise(status, queue.Empty, "getting an item")
            record = bytearray(out[0])  # its own buffer: out-of-band arrays are views of it
            check(lib.sy_queue_copy_held(worker, ffi.from_buffer(record)), "copying an item out")
            kind = tag[0]
        finally:
            lock.release()
        if kind == _TAG_PICKLE:
            return _loads(record)
        if kind == _TAG_FRAME:
            view = self._take_frame(record)
            if view is None:  # its producer died and its buffer was reclaimed: skipped, counted
                return self.get(block, timeout)
            return np.array(view)  # a private copy; the buffer goes back as `view` goes
        return _load_with_buffers(record)

    def get_nowait(self):
        return self.get(False)

    def _take_and_hold(self, timeout: float | None = None) -> int:
        """Take the next record and keep it, uncopied (the path of a record too big for the scratch
        buffer, stopped half-way): for fault tests that kill a consumer holding a record."""
        worker = self._worker or self._open_worker()
        status = lib.sy_queue_get(worker, ffi.NULL, 0, _timeout_ns(True, timeout), self._out, self._tag)
        if status != lib.SY_QUEUE_HELD:
            raise queue.Empty if status == SY_ETIMEDOUT else RuntimeError(f"status {status}")
        return int(self._out[0])

    # ---- sizes -----------------------------------------------------------------------------------
    def _counts(self, reap: bool = False):
        lib.sy_queue_counts(self._handle, int(reap), self._tally)
        return self._tally

    def qsize(self) -> int:
        """Items put (or being put) and not yet taken; approximate while others put and get."""
        return max(0, int(self._counts().items))

    def empty(self) -> bool:
        return self._counts().items <= 0

    def full(self) -> bool:
        return self._maxsize > 0 and self._counts().items >= self._maxsize

    @property
    def lost(self) -> int:
        """Items a consumer took and died holding (killed between its take and its copy out): they
        reached no consumer. Checked for dead consumers when read."""
        return int(self._counts(reap=True).lost)

    @property
    def abandoned(self) -> int:
        """Puts of producers that died before their record was in the ring: killed between claiming ring
        space and publishing (skipped), or holding spilled records that their feeder had not put yet
        (dropped, as multiprocessing.Queue drops its feeder's buffer). Checked for dead producers when read."""
        return int(self._counts(reap=True).abandoned)

    @property
    def name(self) -> str:
        return self._name

    # ---- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """This process puts and gets no more through this handle (multiprocessing.Queue.close);
        records it spilled are still put by the feeder thread (`join_thread` waits for that). A get
        waiting in another thread ends with ValueError within one wait slice. The creator's segment
        name goes when it exits (or, for a queue never pickled, when its Queue object is collected)."""
        if self._closed:
            return
        self._closed = True
        with self._put_lock:
            if self._feeder is None:
                self._release_producer()  # else the feeder does, once it has put every spilled record
        with self._get_lock:
            self._release_worker()

    def join_thread(self) -> None:
        """Wait until the feeder thread has put every record this process spilled (after close()),
        as multiprocessing.Queue.join_thread."""
        if not self._closed:
            raise AssertionError(f"Queue {self!r} not closed")  # multiprocessing.Queue's (an assert there)
        if self._join_feeder is not None:
            self._join_feeder()

    def cancel_join_thread(self) -> None:
        """Let this process exit without waiting for its spilled records to be put (they are then
        dropped, and counted in `abandoned` once the process is gone), as multiprocessing.Queue's."""
        self._join_cancelled = True
        if self._join_feeder is not None:
            self._join_feeder.cancel()

    def _release_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            ffi.gc(producer, None)
            lib.sy_queue_producer_close(producer)

    def _release_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            ffi.gc(worker, None)
            lib.sy_queue_worker_close(worker)

    def _forget_inherited_handles(self) -> None:
        """In a fork()ed child: the parent's producer and worker records are the parent's; drop
        them unclosed (new ones open on first use) and keep the mapping."""
        for attribute in ("_producer", "_worker"):
            handle = getattr(self, attribute)
            if handle is not None:
                ffi.gc(handle, None)
                setattr(self, attribute, None)
        self._put_lock, self._get_lock = threading.Lock(), threading.Lock()
        self._spill = collections.deque()  # the parent's, which its own feeder puts
        self._feeder = self._join_feeder = None
        if self._finalizer is not None:
            self._finalizer.detach()  # the creator's name is the creator's to remove

    def _open_producer(self):
        out = ffi.new("sy_queue_producer **")
        status = lib.sy_queue_producer_open(self._handle, out)
        if status == SY_EINVAL:
            raise ValueError("this queue already has 64 producer processes (or threads' handles)")
        check(status, "opening a producer")
        self._producer = ffi.gc(out[0], lib.sy_queue_producer_close)
        return self._producer

    def _open_worker(self):
        out = ffi.new("sy_queue_worker **")
        status = lib.sy_queue_worker_open(self._handle, out)
        if status == SY_EINVAL:
            raise ValueError("this queue already has 64 consumer processes")
        check(status, "opening a consumer")
        self._worker = ffi.gc(out[0], lib.sy_queue_worker_close)
        return self._worker

    def __repr__(self) -> str:
        return f"<sympathy.{type(self).__name__} {self._name!r} maxsize={self._maxsize}>"


class JoinableQueue(Queue):
    """multiprocessing.JoinableQueue: `task_done()` after each item got, `join()` until all are."""

    _joinable = True

    def task_done(self) -> None:
        if lib.sy_queue_task_done(self._handle) == SY_EINVAL:
            raise ValueError("task_done() called too many times")

    def join(self, *, timeout: float | None = None) -> None:
        """Until every item put has been task_done() (an item lost with a dead consumer counts as
        done: nobody can call task_done for it).

        timeout (ours, keyword-only; multiprocessing's join has none): seconds, then TimeoutError
        naming how many items are not yet done; negative looks once. An item that a consumer got and
        died before its task_done() stays unfinished (whether it was done, nobody can tell: another
        process may call task_done for it), so there join() without a timeout waits for ever, as
        multiprocessing's does."""
        t = -1 if timeout is None else _timeout_ns(True, timeout)
        while lib.sy_queue_join(self._handle, _SLICE_NS if t < 0 or t > _SLICE_NS else t) == SY_ETIMEDOUT:
            if 0 <= t <= _SLICE_NS:
                raise TimeoutError(f"join(timeout={timeout}) ran out with {self._counts().unfinished} "
                                   "item(s) not yet task_done()")
            if t > 0:
                t -= _SLICE_NS


def _record_bytes(record) -> int:
    return len(record) if type(record) is bytes else record.nbytes


def _feed(q: "Queue") -> None:
    """The feeder thread: puts the spilled records in order as ring space comes (waiting for it
    without the put lock, so put() never waits for the feeder), then ends; the next spill starts
    another. Its counts are already held, so only space is waited for."""
    lock, spill = q._put_lock, q._spill
    while True:
        with lock:
            while spill:
                status = _put_record(q._producer, spill[0], lib.SY_QUEUE_RESERVED)
                if status == lib.SY_QUEUE_SPILLED:
                    break
                spill.popleft()
                if status != 0:  # multiprocessing.Queue's feeder also reports and drops such a record
                    lib.sy_queue_unreserve(q._producer, 1)
                    print(f"sympathy.Queue feeder: a record was dropped (status {status})", file=sys.stderr)
            if not spill:
                q._feeder = None
                if q._closed:
                    q._release_producer()
                return
            producer, need = q._producer, _record_bytes(spill[0])
        lib.sy_queue_wait_space(producer, need, _SLICE_NS)


def _join_thread(thread_ref) -> None:
    thread = thread_ref()
    if thread is not None:
        thread.join()


class _HasBuffers(Exception):
    """The object pickles with out-of-band buffers (NumPy arrays): put collects them then."""


def _refuse_buffers(buffer) -> None:
    raise _HasBuffers


def _unlink_if_creator(created: list, pid: int, pickled: list) -> None:
    if os.getpid() == pid and not pickled[0]:
        for name, nonce, inode in created:
            segment.unlink_own(name, nonce, inode)


def _after_fork_in_child() -> None:
    for q in list(_handles):
        q._forget_inherited_handles()


os.register_at_fork(after_in_child=_after_fork_in_child)
