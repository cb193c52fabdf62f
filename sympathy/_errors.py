"""C status codes (enum sy_status in c_src/platform.h) turned into Python exceptions.

Every C entry point returns one of these; each module calls `check(status, "what was attempted")`
so a failure surfaces as the exception a Python user expects, with a message that says what failed.
"""
from __future__ import annotations

import errno as _errno
import os

SY_OK = 0
SY_EINVAL = -1
SY_ENOMEM = -2
SY_ETIMEDOUT = -3
SY_EOS = -4
SY_EUNSUPPORTED = -5
SY_ECLOSED = -6
SY_ECORRUPT = -8


class NotSupportedError(RuntimeError):
    """This machine, kernel or build cannot do what was asked (no perf counters, no GPU, ...)."""


class ClosedError(RuntimeError):
    """The object was closed, or the peer on the other side is gone."""


def check(status: int, what: str, *, os_errno: int | None = None) -> int:
    """Return status when it is not an error; raise the matching exception otherwise."""
    if status >= 0:
        return status
    if status == SY_EINVAL:
        raise ValueError(f"{what}: invalid argument")
    if status == SY_ENOMEM:
        raise MemoryError(f"{what}: out of memory")
    if status == SY_ETIMEDOUT:
        raise TimeoutError(f"{what}: timed out")
    if status == SY_EOS:
        code = os_errno if os_errno is not None else _errno.EIO
        raise OSError(code, f"{what}: {os.strerror(code)}")
    if status == SY_EUNSUPPORTED:
        raise NotSupportedError(f"{what}: not supported on this machine")
    if status == SY_ECLOSED:
        raise ClosedError(f"{what}: closed, or the peer is gone")
    if status == SY_ECORRUPT:
        raise RuntimeError(f"{what}: shared memory is corrupt (a sequence or field out of its possible "
                           f"range: something other than sympathy wrote into the segment)")
    raise RuntimeError(f"{what}: unexpected status {status}")
