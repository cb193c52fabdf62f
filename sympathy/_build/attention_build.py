"""cffi build script for sympathy._attention (c_src/attention.c, attention_simd.c); runs standalone to build in place."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_in_place, subject_ffibuilder  # noqa: E402

# libm: exp2f, log2f in the scalar path
ffibuilder = subject_ffibuilder("attention", sources=["attention.c", "attention_simd.c"], libraries=["m"])

if __name__ == "__main__":
    build_in_place(ffibuilder)
