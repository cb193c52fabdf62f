"""cffi build script for sympathy._ring: the Disruptor core, one C file per concept (c_src/ring_*.c,
sharing c_src/ring_internal.h), plus its C benchmarks (c_src/ring_bench*.c, sharing
c_src/ring_bench_internal.h); runs standalone to build in place.

cffi releases the GIL around every C call. For the queue's small calls that never wait
(sy_queue_put_small, sy_queue_get_small, and the batched path's sy_ring_write_now and
sy_ring_read_now) that release and re-take is most of the call: about 800 of
its ~1 500 instructions (cachegrind), plus a chance to hand the interpreter to another thread in
the middle of a put. The preamble below keeps the GIL for those two wrappers only (by the
wrapper's own name, which the compiler folds), and every other call releases it as before.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_in_place, subject_ffibuilder  # noqa: E402

RING_SOURCES = ["ring_segment.c", "ring_liveness.c", "ring_wait.c", "ring_sequencer.c", "ring_barrier.c",
                "ring_work_pool.c", "ring_work_records.c", "ring_work_frames.c"]
BENCH_SOURCES = ["ring_bench_harness.c", "ring_bench.c", "ring_bench_latency.c"]

# Never wait; copy at most SY_QUEUE_SMALL_BYTES (the queue's) or SY_RING_NOW_BYTES (the batched path's).
KEEP_GIL = ("sy_queue_put_small", "sy_queue_get_small", "sy_ring_write_now", "sy_ring_write_args_now",
            "sy_ring_read_now",
            # the in-place claim's first try, and the publish and release that end a claim or a view
            "sy_ring_claim_now", "sy_ring_publish", "sy_ring_release",
            # the zero-copy frames' per-frame calls: a look or a compare-and-swap on one word each
            # (a release's wake is one futex syscall at most), never a wait
            "sy_frames_acquire_now", "sy_frames_queued", "sy_frames_take", "sy_frames_release",
            "sy_frames_unpin", "sy_frames_data")

_KEEP_GIL_PREAMBLE = """
#include <string.h>
/* cffi wraps each call in Py_BEGIN/END_ALLOW_THREADS; for the wrappers named here, keep the GIL. */
static inline int sy_keeps_gil(const char *wrapper) {
    return %s;
}
#undef Py_BEGIN_ALLOW_THREADS
#undef Py_END_ALLOW_THREADS
#define Py_BEGIN_ALLOW_THREADS { PyThreadState *_save = sy_keeps_gil(__func__) ? NULL : PyEval_SaveThread();
#define Py_END_ALLOW_THREADS if (_save) PyEval_RestoreThread(_save); }
""" % " || ".join(f'strcmp(wrapper, "_cffi_f_{name}") == 0' for name in KEEP_GIL)

ffibuilder = subject_ffibuilder("ring", sources=RING_SOURCES, extra_sources=BENCH_SOURCES, libraries=["rt"],
                                preamble=_KEEP_GIL_PREAMBLE)

if __name__ == "__main__":
    build_in_place(ffibuilder)
