"""cffi build script for sympathy._lab (c_src/lab.c); runs standalone to build in place."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_in_place, subject_ffibuilder  # noqa: E402

ffibuilder = subject_ffibuilder("lab")

if __name__ == "__main__":
    build_in_place(ffibuilder)
