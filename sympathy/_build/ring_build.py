"""cffi build script for sympathy._ring (c_src/ring.c, plus its C benchmarks in c_src/ring_bench.c);
runs standalone to build in place."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_in_place, subject_ffibuilder  # noqa: E402

ffibuilder = subject_ffibuilder("ring", extra_sources=["ring_bench.c"], libraries=["rt"])

if __name__ == "__main__":
    build_in_place(ffibuilder)
