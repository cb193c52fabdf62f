"""Cache lines and strides: memory moves in 64-byte lines, so every 16th uint32 costs as much as all of them.

The time of one a[::stride] += 1 pass stays flat up to a stride of one line, then halves with each
doubling. Knob: the stride. The counter that proves it: cachegrind's simulated D1 misses per pass
(strides_cachegrind, `sympathy cachegrind lab`), deterministic where the timing is not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import _common
from ._common import GiB, KiB, MiB, _check, _int_in, parse_size

@dataclass
class StrideCurve:
    array_bytes: int
    strides: list[int]                 # in uint32 elements
    seconds: list[float]               # median time of one pass
    touched: list[int]                 # elements touched per pass

    @property
    def ns_per_touch(self) -> list[float]:
        return [s * 1e9 / t for s, t in zip(self.seconds, self.touched)]


def touch_stride(array: np.ndarray, stride: int) -> float:
    """array[::stride] += 1 in C, one pass; seconds."""
    if not isinstance(array, np.ndarray) or array.dtype != np.uint32 or not array.flags.c_contiguous:
        raise TypeError("array must be a C-contiguous NumPy uint32 array")
    if array.size == 0:
        raise ValueError("array must not be empty")
    stride = _int_in("stride", stride, 1, array.size)
    ffi, lib = _common._native()
    elapsed = ffi.new("uint64_t *")
    _check(lib.sy_lab_touch_stride(ffi.from_buffer("uint32_t[]", array), array.size, stride, elapsed), "touch_stride")
    return elapsed[0] * 1e-9


def strides(strides: Sequence[int] = tuple(2**k for k in range(11)), *, array_bytes: int = 64 * MiB,
            repeat: int = 5, pin: bool = True) -> StrideCurve:
    """Time one pass of array[::stride] += 1 over a uint32 array of array_bytes, per stride (median
    of `repeat` after a warm-up pass; the calling thread pinned to one CPU unless pin=False)."""
    array_bytes = _int_in("array_bytes", array_bytes, 4 * KiB, 16 * GiB)
    repeat = _int_in("repeat", repeat, 1, 1000)
    n = array_bytes // 4
    if not strides:
        raise ValueError("strides must name at least one stride")
    strides = [_int_in("strides[i]", s, 1, n) for s in strides]
    array = np.zeros(n, dtype=np.uint32)
    seconds, touched, passes_of_1 = [], [], 0
    with _common._pinned_caller(pin):
        for stride in strides:
            touch_stride(array, stride)                               # warm-up pass
            seconds.append(float(np.median([touch_stride(array, stride) for _ in range(repeat)])))
            touched.append(-(-n // stride))
            passes_of_1 += (repeat + 1) if stride == 1 else 0
    # Every pass touches element 0; element 1 only the stride-1 passes: both counts must add up.
    if int(array[0]) != len(strides) * (repeat + 1) or (n > 1 and int(array[1]) != passes_of_1):
        raise RuntimeError("touch_stride result is wrong: the increments do not add up")
    return StrideCurve(n * 4, strides, seconds, touched)

# ---- cachegrind: the strides experiment in simulated misses (deterministic) ------------------------
cachegrind_help = "D1/LL misses of one a[::stride] += 1 pass per stride: flat up to one line"


def cachegrind_arguments(parser) -> None:
    parser.add_argument("--strides", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128],
                        help="strides in uint32 elements (default 1 2 4 ... 128)")
    parser.add_argument("--array-size", type=parse_size, default=4 * MiB,
                        help="bytes of the uint32 array (default 4MiB: twice the simulated L2)")


def cachegrind_cases(args) -> list[tuple[str, dict]]:
    """(label, keyword arguments of sy.cachegrind) per stride: one pass, only sy_lab_touch_stride counted."""
    n = _int_in("array_size", args.array_size, 4 * KiB, 1 * GiB) // 4
    setup = f"import numpy as np\nfrom sympathy import lab\na = np.zeros({n}, dtype=np.uint32)"
    return [(f"stride {s} ({4 * s} B apart)",
             dict(setup=setup, call=f"lab.touch_stride(a, {_int_in('stride', s, 1, n)})",
                  functions=["sy_lab_touch_stride"]))
            for s in args.strides]


def strides_cachegrind(strides: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128), *, array_bytes: int = 4 * MiB):
    """[(stride, CacheReport)]: valgrind's simulated D1 and LL misses of one pass per stride."""
    from argparse import Namespace

    from ..cache import cachegrind

    cases = cachegrind_cases(Namespace(strides=list(strides), array_size=array_bytes))
    return [(s, cachegrind(**kwargs)) for s, (_, kwargs) in zip(strides, cases)]
