"""The ring's named shared-memory segment, from Python (the C side is c_src/ring_segment.c).

Names; creation that reclaims a stale segment and explains a full /dev/shm; foreign segments refused
with a message that says whose they are; the creator's segments removed when its interpreter exits,
and only while the name still holds the segment it made; the item dtype stored in the segment so
that `RingBuffer.attach(name)` recovers it.
"""
from __future__ import annotations

import ast
import atexit
import contextlib
import errno
import os
import re
import warnings

import numpy as np

from .._errors import SY_EOS, check
from .._ring import ffi, lib

SHM_DIR = "/dev/shm"  # where glibc's shm_open keeps named segments
NAME_MAX = lib.SY_RING_NAME_MAX - 1  # characters: the C limit counts the leading "/" too
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def segment_name(name: str) -> bytes:
    """The shm_open name of a ring name, checked here so that C never sees a bad one."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be 1..{NAME_MAX} characters from [A-Za-z0-9_.-]; got {name!r}")
    if len(name) > NAME_MAX:
        raise ValueError(f"name is {len(name)} characters; a ring name is at most {NAME_MAX} "
                         f"(SY_RING_NAME_MAX = {lib.SY_RING_NAME_MAX} bytes with the leading '/')")
    return ("/" + name).encode()


def _bytes_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---- creation ---------------------------------------------------------------------------------------
def create_multi_producer(name: str, capacity: int, slot_size: int, item_type: bytes):
    """A named multi-producer ring with the blocking wait, as the queue's records and frames use:
    returns (handle freed with the object, its creation nonce)."""
    config = ffi.new("sy_ring_config *", {"capacity": capacity, "slot_size": slot_size,
                                          "producer_kind": lib.SY_RING_MULTI_PRODUCER,
                                          "wait": lib.SY_WAIT_BLOCKING})
    c_item_type = ffi.new("char[]", item_type)
    config.item_type = c_item_type
    out = ffi.new("sy_ring **")
    create_named(config, name, out)
    handle = ffi.gc(out[0], lib.sy_ring_free)
    return handle, int(lib.sy_ring_nonce(handle))


def create_named(config, name: str, out) -> None:
    """sy_ring_create for a named ring: reclaim a stale segment of that name, explain a full /dev/shm."""
    c_name = segment_name(name)
    status = lib.sy_ring_create(config, c_name, out)
    err = ffi.errno
    if status == SY_EOS and err == errno.EEXIST:
        creator = ffi.new("int64_t *")
        if lib.sy_ring_reclaim_stale(c_name, creator) == 1:
            who = f"process {creator[0]}" if creator[0] else "a process that died while creating it"
            warnings.warn(f"ring {name!r}: removed the stale segment left by {who} (no process maps it "
                          f"any more)", RuntimeWarning, stacklevel=3)
            status = lib.sy_ring_create(config, c_name, out)
            err = ffi.errno
    if status != SY_EOS:
        check(status, f"creating ring {name!r}")
        return
    if err == errno.EEXIST:
        raise FileExistsError(err, f"ring {name!r} already exists and a live process maps it (or it is not "
                                   f"a ring of this version); RingBuffer.cleanup({name!r}) removes it anyway")
    if err == errno.ENOSPC:
        fs = os.statvfs(SHM_DIR)
        need = lib.sy_ring_region_bytes(config.capacity, config.slot_size)
        raise OSError(err, f"creating ring {name!r}: {os.strerror(err)}: the ring needs {_bytes_text(need)} "
                           f"({need} bytes for {config.capacity} slots), {SHM_DIR} has "
                           f"{_bytes_text(fs.f_bavail * fs.f_frsize)} free of {_bytes_text(fs.f_blocks * fs.f_frsize)}"
                           f"; use a smaller capacity, remove unused segments, or give {SHM_DIR} more room "
                           f"(Docker: --shm-size)")
    raise OSError(err, f"creating ring {name!r}: {os.strerror(err)}")


def foreign_segment_error(name: str, err: int) -> PermissionError:
    """What attach raises for a segment of another user, or one open to group/others."""
    try:
        st = os.stat(f"{SHM_DIR}/{name}")
        found = f"owned by uid {st.st_uid} with mode {st.st_mode & 0o777:04o}"
    except OSError:
        found = "not readable by this user"
    return PermissionError(err, f"ring {name!r} is {found}: a ring is attached only when it is owned by this "
                                f"user (euid {os.geteuid()}) with mode 0600, since another user could write "
                                f"its items or shrink it under our mapping; refusing to attach")


# ---- removal: only our own segment, and at exit ---------------------------------------------------------
# Named segments this process created and has not removed: nonce -> (name, creating pid). They go
# when the interpreter exits (normally, by an exception or by sys.exit); a crash leaves them behind
# for the next create of that name to reclaim.
_created: dict[int, tuple[str, int]] = {}


def remember_created(name: str, nonce: int) -> tuple[int, int]:
    """Have the segment removed at exit; its (device, inode), which identify it while it is mapped."""
    _created[nonce] = (name, os.getpid())
    st = os.stat(f"{SHM_DIR}/{name}")  # ours: created O_EXCL, and our lock stops a reclaim
    return st.st_dev, st.st_ino


def forget_created(nonce: int) -> None:
    _created.pop(nonce, None)


def unlink_own(name: str, nonce: int, inode: tuple[int, int] | None) -> None:
    """Remove the name only while it still holds the segment made with this nonce (a ring re-created
    under the name since is someone else's). A segment whose header was scribbled on no longer shows
    its nonce: it is ours if it is the file we still map (its inode cannot be reused meanwhile)."""
    forget_created(nonce)
    status = lib.sy_ring_unlink_own(segment_name(name), nonce)
    if status == 0 and inode is not None:
        with contextlib.suppress(OSError):
            st = os.stat(f"{SHM_DIR}/{name}")
            if (st.st_dev, st.st_ino) == inode:
                status = lib.sy_ring_unlink(segment_name(name))
    if status < 0:
        check(status, f"removing ring {name!r}", os_errno=ffi.errno or None)


@atexit.register
def _remove_created_segments() -> None:
    for nonce, (name, pid) in list(_created.items()):
        if pid == os.getpid():  # not in a fork()ed child that inherited the table
            lib.sy_ring_unlink_own(segment_name(name), nonce)
    _created.clear()


# ---- the item dtype, stored in the segment ---------------------------------------------------------------
def dtype_text(dtype) -> bytes:
    """What the segment stores for attach to read back: NumPy's own descr (the .npy format's), or
    b"" for raw items."""
    if dtype is None:
        return b""
    if dtype.subdtype is not None:  # ("<f4", (3,)): the descr of a subarray dtype is just "|V12"
        base, shape = dtype.subdtype
        text = repr((np.lib.format.dtype_to_descr(base), shape))
    else:
        text = repr(np.lib.format.dtype_to_descr(dtype))
    limit = lib.SY_RING_ITEM_TYPE_MAX - 1
    if len(text) > limit:
        raise ValueError(f"dtype {dtype} takes {len(text)} characters to describe; a ring stores at most "
                         f"{limit}: use fewer or shorter field names, or item_size={dtype.itemsize}")
    return text.encode()


def stored_dtype(handle, name: str) -> np.dtype | None:
    """The dtype a ring was created with (None for raw items)."""
    text = ffi.new("char[]", lib.SY_RING_ITEM_TYPE_MAX)
    if lib.sy_ring_item_type(handle, text, lib.SY_RING_ITEM_TYPE_MAX) <= 0:
        return None
    try:
        descr = ast.literal_eval(ffi.string(text).decode())  # literals only: nothing runs
        if isinstance(descr, tuple):
            return np.dtype((np.lib.format.descr_to_dtype(descr[0]), descr[1]))
        return np.lib.format.descr_to_dtype(descr)
    except (ValueError, TypeError, SyntaxError, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"ring {name!r} is not a valid sympathy ring: its item type cannot be read "
                         f"({exc})") from None


def attach_layout(name: str, handle, given: tuple[np.dtype | None, int] | None,
                  slot_size: int) -> tuple[np.dtype | None, int]:
    """The (dtype, item size) attach uses: the ring's own, or what the caller gave if it agrees."""
    stored = stored_dtype(handle, name)
    if stored is not None and stored.itemsize != slot_size:
        raise ValueError(f"ring {name!r} is not a valid sympathy ring: its dtype {stored} is not its "
                         f"{slot_size}-byte item size")
    if given is None:
        return stored, slot_size
    dtype, size = given
    held = f"dtype {stored}" if stored is not None else f"raw items (item_size={slot_size})"
    if size != slot_size:
        raise ValueError(f"ring {name!r} holds {held}, {slot_size}-byte items; the dtype/item_size given "
                         f"is {size} bytes")
    if dtype is not None and dtype != stored:
        raise ValueError(f"ring {name!r} holds {held}, not {dtype}: attach without dtype to read the "
                         f"ring's own, or with item_size={slot_size} for raw bytes")
    return dtype, size
