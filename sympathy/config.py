"""Every environment knob sympathy reads, in one place.

SYMPATHY_DEBUG      0 (default) silent; 1 prints what is built and loaded; 2 also each C/CUDA call's
                    arguments. Read through `debug(level, message)`.
SYMPATHY_CACHE_DIR  where compiled CUDA kernels are cached (default: $XDG_CACHE_HOME/sympathy or
                    ~/.cache/sympathy), keyed by source hash, arch and nvcc version.
SYMPATHY_NVCC       the nvcc to use (default: `nvcc` on PATH, then $CUDA_HOME/bin/nvcc).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

DEBUG = int(os.environ.get("SYMPATHY_DEBUG", "0") or 0)


def debug(level: int, message: str) -> None:
    """Print message to stderr when SYMPATHY_DEBUG >= level."""
    if DEBUG >= level:
        print(f"[sympathy] {message}", file=sys.stderr)


def cache_dir() -> Path:
    """The folder for build products (compiled CUDA), created on demand."""
    explicit = os.environ.get("SYMPATHY_CACHE_DIR")
    base = Path(explicit) if explicit else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sympathy"
    base.mkdir(parents=True, exist_ok=True)
    return base


def nvcc_path() -> str | None:
    """The nvcc to compile CUDA with, or None when there is none."""
    import shutil

    explicit = os.environ.get("SYMPATHY_NVCC")
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(cuda_home or "/usr/local/cuda") / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def package_parent() -> Path:
    """The folder holding this sympathy package (site-packages, or a checkout's root).

    A child `python -c`/`-m` puts its working folder first on sys.path, so a child started here
    imports this very package, never a source tree that happens to be in the caller's folder.
    """
    return Path(__file__).resolve().parent.parent
