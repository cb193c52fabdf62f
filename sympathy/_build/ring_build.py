"""cffi build script for sympathy._ring: the Disruptor core, one C file per concept (c_src/ring_*.c,
sharing c_src/ring_internal.h), plus its C benchmarks in c_src/ring_bench.c; runs standalone to
build in place."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_in_place, subject_ffibuilder  # noqa: E402

RING_SOURCES = ["ring_segment.c", "ring_liveness.c", "ring_wait.c", "ring_sequencer.c", "ring_barrier.c",
                "ring_work_pool.c", "ring_work_records.c",
                "ring_work_frames.c"]

ffibuilder = subject_ffibuilder("ring", sources=RING_SOURCES, extra_sources=["ring_bench.c"], libraries=["rt"])

if __name__ == "__main__":
    build_in_place(ffibuilder)
