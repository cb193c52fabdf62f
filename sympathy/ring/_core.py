"""What the ring's Python modules share: the C module, statuses, timeouts, wait slices."""
from __future__ import annotations

import os
import sys

from .._errors import check

try:
    from .._ring import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError("sympathy._ring is not built: run `pip install .` or "
                      "`python sympathy/_build/ring_build.py`") from exc

from .segment import SHM_DIR  # noqa: E402  (after the build check above)


# Bound once: a module-global lookup is cheaper than `lib.name` on the per-item paths.
_write_one, _write_i64 = lib.sy_ring_write_one, lib.sy_ring_write_i64
_read_one, _read_ahead = lib.sy_ring_read_one, lib.sy_ring_read_ahead
_write_many = lib.sy_ring_write  # the batched path
# ... and their first try: never wait, so the GIL is kept across them (sympathy/_build/ring_build.py)
_write_now, _read_now, _NOT_NOW = lib.sy_ring_write_now, lib.sy_ring_read_now, lib.SY_RING_NOT_NOW
_write_args_now = lib.sy_ring_write_args_now
NOW_BYTES = lib.SY_RING_NOW_BYTES
LAYOUTS = {"slots": lib.SY_RING_LAYOUT_SLOTS, "contiguous": lib.SY_RING_LAYOUT_CONTIGUOUS}
_SLICE, _EBUSY = lib.SY_RING_WAIT_SLICE, lib.SY_RING_EBUSY
WAIT_SLICE_NS = 20_000_000  # a C wait comes back this often: Ctrl-C is seen within it (the target is 100 ms)
READ_AHEAD = 256  # items get() may take in one C call (plain numeric dtypes, no consumer after it)
ARENA_BYTES = 1 << 20  # get_batch copies into a block this large, handing out slices of it; asks over
                       # NOW_BYTES wait first, then allocate exactly what is ready

# The GIL handoff's count of this process's threads inside a ring wait (c_src/ring_wait.c): one
# per process, never freed (every ring handle points at it). A forked child starts with none: the
# parent's waiting threads do not exist there.
_GIL_WAITERS = ffi.new("int64_t *")
os.register_at_fork(after_in_child=lambda: _GIL_WAITERS.__setitem__(0, 0))

WAITS = {"busy_spin": lib.SY_WAIT_BUSY_SPIN, "yield": lib.SY_WAIT_YIELD, "sleep": lib.SY_WAIT_SLEEP,
         "blocking": lib.SY_WAIT_BLOCKING}
PRODUCERS = {"single": lib.SY_RING_SINGLE_PRODUCER, "multi": lib.SY_RING_MULTI_PRODUCER}
MAX_CONSUMERS = 64
_MAX_CAPACITY = 1 << 40


def _timeout_ns(timeout: float | None) -> int:
    if timeout is None:
        return -1
    if not isinstance(timeout, (int, float)) or timeout != timeout:
        raise TypeError(f"timeout must be a number of seconds or None; got {timeout!r}")
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 (or None to wait forever); got {timeout}")
    return int(timeout * 1e9) if timeout < 1e9 else -1  # beyond ~31 years: forever (fits int64)


def _rewait(call, before: tuple, t: int, after: tuple = ()) -> int:
    """Call `call(*before, t, *after)` again while it comes back for its wait slice (SY_RING_WAIT_SLICE:
    nothing was done, a whole slice passed), the timeout one slice shorter each time. Between the
    calls the interpreter runs signal handlers: Ctrl-C raises KeyboardInterrupt here, not after the
    wait. (Arguments, not a closure: a closure would cost the per-item fast paths cell objects.)"""
    while True:
        if t > 0:
            t = max(t - WAIT_SLICE_NS, 0)
        status = call(*before, t, *after)
        if status != _SLICE:
            return status


def _segment_version(name: str) -> str:
    """The format version word of a named segment (offset 8 in every version), for error messages."""
    try:
        with open(f"{SHM_DIR}/{name}", "rb") as f:
            f.seek(8)
            return str(int.from_bytes(f.read(4), sys.byteorder))
    except OSError:
        return "unknown"


def _describe(status: int, what: str) -> None:
    """check(), with the errno of a failed OS call attached."""
    check(status, what, os_errno=ffi.errno or None)
