"""Matrix multiplication, from the article's pure-Python triple loop to a packed kernel next to OpenBLAS.

    sy.matmul(a, b, kernel="packed", threads=None)   # c_src/matmul.c; NumPy in, NumPy out
    sy.MATMUL_KERNELS                                # the rungs, in the order the article climbs
    sy.matmul_python(a, b, order="ijk")              # the article's loops on lists of lists

Inputs are read in place through their strides (a transposed or sliced view costs no copy; the
packed kernel's packing step is the one copy, and it is the point). The only copies made here are
for arrays no C pointer can describe: non-native byte order, or strides that are not a whole number
of elements. The GIL is released for the whole C call (cffi does it), so threads in Python run on.

`cachegrind_help`, `cachegrind_arguments` and `cachegrind_cases` feed
`sympathy cachegrind matmul --kernel ijk ikj --n 256` (see sympathy/cache.py).
"""
from __future__ import annotations

import argparse
import functools
import threading
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from ._errors import check

Kernel = Literal["ijk", "ikj", "jik", "jki", "kij", "kji", "tiled", "simd", "packed"]
Isa = Literal["auto", "scalar", "avx2", "avx512"]
PythonOrder = Literal["ijk", "ikj"]
MATMUL_KERNELS: tuple[Kernel, ...] = get_args(Kernel)   # the rungs, in the order the article climbs
ISAS: tuple[Isa, ...] = get_args(Isa)
BLOCKING_KEYS = ("mc", "kc", "nc", "tile")
MAX_THREADS = 256     # SY_MAX_THREADS in c_src/matmul.c
MAX_BLOCK = 1 << 16   # SY_BLOCK_MAX in c_src/matmul.c
_PYTHON_ORDERS: tuple[PythonOrder, ...] = get_args(PythonOrder)


@functools.lru_cache(maxsize=None)
def _lib():
    from . import _matmul

    return _matmul.ffi, _matmul.lib


# Each Python thread keeps its own packing workspace (C buffers reused from call to call: a fresh
# 8-16 MiB buffer per call would be mapped and zeroed by the kernel each time). One per thread
# because a workspace serves one call at a time; freed with the thread (or at exit) through ffi.gc.
_per_thread = threading.local()


def _workspace():
    ffi, lib = _lib()
    workspace = getattr(_per_thread, "workspace", None)
    if workspace is None:
        raw = lib.sy_matmul_workspace_new()
        if raw == ffi.NULL:
            raise MemoryError("sy.matmul: no memory for a packing workspace")
        workspace = _per_thread.workspace = ffi.gc(raw, lib.sy_matmul_workspace_free)
    return workspace


@functools.lru_cache(maxsize=None)
def _cache_sizes() -> tuple[int, int, int]:
    """Per-core L1d and L2 and the last level, from sysfs (0 where unknown: C assumes a default)."""
    from .topology import topology

    topo = topology(with_gpu=False)
    sizes = []
    for level in (1, 2, 3):
        cache = topo.cache(level)
        sizes.append(cache.size_bytes if cache else 0)
    return sizes[0], sizes[1], sizes[2]


def _check_threads(threads: Any, kernel: str) -> int:
    if threads is None:
        return 1
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be an int or None; got {type(threads).__name__}")
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be in [1, {MAX_THREADS}]; got {threads}")
    if threads > 1 and kernel != "packed":
        raise ValueError(f"threads > 1 needs kernel='packed' (the only threaded rung); got kernel={kernel!r}")
    return int(threads)


def _config(threads: int, isa: str | None, blocking: dict | None):
    isa = "auto" if isa is None else isa
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}; got {isa!r}")
    blocking = dict(blocking or {})
    unknown = set(blocking) - set(BLOCKING_KEYS)
    if unknown:
        raise ValueError(f"blocking keys must be among {BLOCKING_KEYS}; got {sorted(unknown)}")
    for key, value in blocking.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_BLOCK:
            raise ValueError(f"blocking[{key!r}] must be an int in [1, {MAX_BLOCK}]; got {value!r}")
    l1, l2, l3 = _cache_sizes()
    ffi, _ = _lib()
    config = ffi.new("struct sy_matmul_config *")
    config.l1d_bytes, config.l2_bytes, config.l3_bytes = l1, l2, l3
    config.mc, config.kc, config.nc = (int(blocking.get(k, 0)) for k in ("mc", "kc", "nc"))
    config.tile = int(blocking.get("tile", 0))
    config.isa = ISAS.index(isa)
    config.threads = threads
    return config


def _as_operand(x: Any, name: str) -> np.ndarray:
    """x as a 2-D float array whose strides C can follow (a copy only when none could)."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D; got {arr.ndim}-D with shape {arr.shape}")
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise TypeError(f"{name} must be float32 or float64; got {arr.dtype}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    return arr


def matmul(a: npt.ArrayLike, b: npt.ArrayLike, kernel: Kernel = "packed", threads: int | None = None, *,
           isa: Isa | None = None, blocking: dict[str, int] | None = None) -> np.ndarray:
    """a @ b with one rung of the ladder: float32 or float64, any (m, k) @ (k, n), any strides.

    kernel: one of MATMUL_KERNELS. threads: packed only (None means 1). isa ("auto", "scalar",
    "avx2", "avx512") and blocking ({"mc", "kc", "nc", "tile"}) override what the machine would
    choose, for experiments and tests; the result is the same, only the speed changes.
    """
    a = _as_operand(a, "a")
    b = _as_operand(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must share a dtype; got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not line up: a has {a.shape[1]} columns, "
                         f"b has {b.shape[0]} rows")
    if kernel not in MATMUL_KERNELS:
        raise ValueError(f"kernel must be one of {MATMUL_KERNELS}; got {kernel!r}")
    config = _config(_check_threads(threads, kernel), isa, blocking)
    ffi, lib = _lib()
    if kernel == "packed":
        config.workspace = _workspace()
    (m, k), n = a.shape, b.shape[1]
    out = np.empty((m, n), dtype=a.dtype)
    ctype, entry = ("double *", lib.sy_matmul_f64) if a.dtype == np.float64 else ("float *", lib.sy_matmul_f32)
    size = a.itemsize
    status = entry(MATMUL_KERNELS.index(kernel), m, n, k,
                   ffi.cast(ctype, a.ctypes.data), a.strides[0] // size, a.strides[1] // size,
                   ffi.cast(ctype, b.ctypes.data), b.strides[0] // size, b.strides[1] // size,
                   ffi.cast(ctype, out.ctypes.data), n, config)
    check(status, f"sy.matmul(kernel={kernel!r}, {a.dtype}, ({m},{k})@({k},{n}))")
    return out


def plan(dtype: npt.DTypeLike = np.float64, kernel: Kernel = "packed", threads: int | None = None, *,
         isa: Isa | None = None, blocking: dict[str, int] | None = None) -> dict[str, int | str]:
    """The blocking matmul would use: micro-tile MR×NR, blocks MC/KC/NC, tile edge, instruction set."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64; got {dtype}")
    if kernel not in MATMUL_KERNELS:
        raise ValueError(f"kernel must be one of {MATMUL_KERNELS}; got {kernel!r}")
    config = _config(_check_threads(threads, kernel), isa, blocking)
    ffi, lib = _lib()
    out = ffi.new("struct sy_matmul_plan *")
    check(lib.sy_matmul_plan(MATMUL_KERNELS.index(kernel), dtype.itemsize, config, out), "sy.matmul plan")
    return {"mr": out.mr, "nr": out.nr, "mc": out.mc, "kc": out.kc, "nc": out.nc, "tile": out.tile,
            "isa": ISAS[out.isa]}


# ---- the article's pure-Python loops ---------------------------------------------------------
def _as_rows(x: Any, name: str) -> list[list[float]]:
    rows = x.tolist() if isinstance(x, np.ndarray) else [list(r) for r in x]
    if isinstance(x, np.ndarray) and x.ndim != 2:
        raise ValueError(f"{name} must be 2-D; got {x.ndim}-D with shape {x.shape}")
    if rows and any(len(r) != len(rows[0]) for r in rows):
        raise ValueError(f"{name} must be rectangular: rows have lengths {sorted({len(r) for r in rows})}")
    for r in rows:
        for v in r:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise TypeError(f"{name} must hold numbers; got {type(v).__name__}")
    return rows


def matmul_python(a: npt.ArrayLike, b: npt.ArrayLike, order: PythonOrder = "ijk",
                  progress: bool = True) -> list[list[float]]:
    """The article's triple loop on lists of lists (arrays are converted): C = A·B as lists.

    order "ijk" walks B down a column in the inner loop; "ikj" walks a row of B and a row of C.
    progress shows a tqdm bar over the outer loop (these loops take seconds even at n=200).
    """
    if order not in _PYTHON_ORDERS:
        raise ValueError(f"order must be one of {_PYTHON_ORDERS}; got {order!r}")
    A, B = _as_rows(a, "a"), _as_rows(b, "b")
    n_rows, inner = len(A), (len(A[0]) if A else 0)
    if inner != len(B) and n_rows:
        raise ValueError(f"a has {inner} columns but b has {len(B)} rows")
    n_cols = len(B[0]) if B else 0
    C = [[0.0] * n_cols for _ in range(n_rows)]

    from tqdm.auto import tqdm

    rows = tqdm(range(n_rows), desc=f"python {order}", disable=not progress, leave=False, unit="row")
    if order == "ijk":
        for i in rows:
            for j in range(n_cols):
                for k in range(inner):
                    C[i][j] += A[i][k] * B[k][j]
    else:
        for i in rows:
            for k in range(inner):
                for j in range(n_cols):
                    C[i][j] += A[i][k] * B[k][j]
    return C


# ---- `sympathy cachegrind matmul` ------------------------------------------------------------
cachegrind_help = "simulated D1/LL cache misses of matmul kernels (valgrind), the article's table"


def cachegrind_arguments(parser: argparse.ArgumentParser) -> None:
    from .bench.core import positive_int

    # --kernels, as in `sympathy bench matmul`; --kernel, the spelling the article's table used.
    parser.add_argument("--kernels", "--kernel", dest="kernels", nargs="+", choices=MATMUL_KERNELS,
                        metavar="KERNEL", default=["ijk", "ikj"],
                        help=f"kernels to measure, from: {' '.join(MATMUL_KERNELS)}")
    parser.add_argument("--n", type=positive_int, default=256, help="square matrix size")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64", help="element type")
    parser.add_argument("--threads", type=positive_int, default=1, help="threads for kernel packed")


def cachegrind_setup(n: int, dtype: str = "float64", m: int | None = None, k: int | None = None) -> str:
    """Python source that makes the inputs a, b (seeded, so every run simulates the same data)."""
    m, k = m or n, k or n
    return ("import numpy as np, sympathy as sy\n"
            "rng = np.random.default_rng(0)\n"
            f"a = rng.random(({m}, {k})).astype({dtype!r})\n"
            f"b = rng.random(({k}, {n})).astype({dtype!r})\n")


def cachegrind_cases(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """(label, keyword arguments of sy.cachegrind) for each kernel asked for."""
    setup = cachegrind_setup(args.n, args.dtype)
    cases = []
    for kernel in args.kernels:
        threads = args.threads if kernel == "packed" else 1
        label = f"{kernel} n={args.n} {args.dtype}" + (f" {threads} threads" if threads > 1 else "")
        cases.append((label, dict(setup=setup, call=f"sy.matmul(a, b, kernel={kernel!r}, threads={threads})",
                                  functions=["sy_matmul*"])))
    return cases


__all__ = ["MATMUL_KERNELS", "matmul", "matmul_python", "plan"]
