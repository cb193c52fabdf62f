"""Shared by the per-subject cffi build scripts: one C file, one public header, one extension.

The cdef is the subject's public header (c_src/<subject>.h) with the preprocessor lines stripped,
so the C and the Python declarations can never drift apart.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parents[2]
C_SRC = ROOT / "c_src"

# -O3 with no -march: SIMD paths are chosen at run time with target attributes, so one build runs
# on any x86-64 (and on Arm through the scalar fallbacks).
CFLAGS = ["-O3", "-std=c11", "-D_GNU_SOURCE", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-fno-strict-aliasing"]
LDFLAGS = ["-pthread"]


def header_cdef(header: Path) -> str:
    """The cffi cdef of a public header: everything between the CDEF markers, minus preprocessor lines."""
    text = header.read_text()
    match = re.search(r"/\* CDEF BEGIN \*/(.*?)/\* CDEF END \*/", text, re.S)
    if not match:
        raise SystemExit(f"{header}: no /* CDEF BEGIN */ ... /* CDEF END */ block for cffi")
    body = "\n".join(line for line in match.group(1).splitlines() if not line.lstrip().startswith("#"))
    return body


def subject_ffibuilder(subject: str, *, sources: list[str] | None = None, extra_sources: list[str] = (),
                       libraries: list[str] = (), extra_cflags: list[str] = (), preamble: str = "") -> FFI:
    """An FFI builder for sympathy._<subject> made from c_src/<subject>.h and c_src/<subject>.c
    (or, for a subject split into several files, the c_src/ files named in `sources`)."""
    header = C_SRC / f"{subject}.h"
    ffibuilder = FFI()
    ffibuilder.cdef(header_cdef(header))
    sources = [C_SRC / s for s in (sources or [f"{subject}.c"]) + list(extra_sources)]
    ffibuilder.set_source(
        f"sympathy._{subject}",
        f'#include "{subject}.h"\n' + preamble,
        sources=[_path(s) for s in sources],
        include_dirs=[_path(C_SRC)],
        extra_compile_args=CFLAGS + list(extra_cflags),
        extra_link_args=LDFLAGS,
        libraries=list(libraries),
    )
    return ffibuilder


def _path(path: Path) -> str:
    """setuptools refuses absolute source paths (pip runs it from the root, so relative ones work);
    a build script run standalone compiles inside build/cffi, where only absolute paths resolve."""
    standalone = Path(sys.argv[0]).name.endswith("_build.py")
    return str(path) if standalone else str(path.relative_to(ROOT))


def build_in_place(ffibuilder: FFI) -> None:
    """`python sympathy/_build/<subject>_build.py`: compile next to the sources, for development."""
    out = ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose="-v" in sys.argv)
    target = ROOT / "sympathy" / Path(out).name
    Path(out).replace(target)
    print(f"built {target.relative_to(ROOT)}")
