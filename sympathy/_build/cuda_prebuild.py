"""Compile the CUDA attention kernels for this machine's GPUs at install time (run by setup.py).

Without it the first attention call on a GPU waits about 30 s while nvcc compiles. It runs only where
nvcc and an NVIDIA GPU (nvidia-smi) are present, and never fails the install: the kernels still
compile on first use. SYMPATHY_NO_CUDA_PREBUILD=1 turns it off. The libraries land in the same cache
(SYMPATHY_CACHE_DIR, see sympathy/config.py) under the same key (sources, arch, nvcc) as a first use.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPT_OUT = "SYMPATHY_NO_CUDA_PREBUILD"


def arch_of(compute_cap: str) -> str:
    """nvcc's arch for a compute capability ("9.0" → sm_90a: Hopper's wgmma and TMA need the `a` target,
    as sympathy.attention.cuda.device_arch says; "8.6" → sm_86)."""
    major, minor = (int(x) for x in compute_cap.strip().split("."))
    return f"sm_{major}{minor}{'a' if (major, minor) == (9, 0) else ''}"


def local_archs() -> list[str]:
    """The archs of the GPUs nvidia-smi lists (empty without nvidia-smi or a GPU)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return sorted({arch_of(line) for line in done.stdout.splitlines() if line.strip()})


def plan(environ: dict, nvcc: str | None, archs: list[str]) -> tuple[list[str], str]:
    """(archs to build, why not when empty)."""
    if environ.get(OPT_OUT, "0") not in ("", "0"):
        return [], f"{OPT_OUT} is set"
    if not nvcc:
        return [], "no nvcc"
    if not archs:
        return [], "no NVIDIA GPU visible to nvidia-smi"
    return archs, ""


def _source_packages() -> None:
    """sympathy and sympathy.attention as bare packages over the sources, without their __init__
    (numpy and the C modules are not importable inside pip's build environment)."""
    for name, folder in (("sympathy", ROOT / "sympathy"), ("sympathy.attention", ROOT / "sympathy" / "attention")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package


def main() -> int:
    _source_packages()
    config = importlib.import_module("sympathy.config")   # stdlib only, like attention/cuda.py
    archs, why_not = plan(dict(os.environ), config.nvcc_path(), local_archs())
    if not archs:
        print(f"sympathy: CUDA kernels not prebuilt ({why_not}); they compile on first use, "
              "or run `sympathy build-cuda`", file=sys.stderr)
        return 0
    try:
        cuda = importlib.import_module("sympathy.attention.cuda")
        for arch in archs:
            print(f"sympathy: prebuilding the CUDA attention kernels for {arch} with nvcc (about 30 s; "
                  f"{OPT_OUT}=1 skips this)", file=sys.stderr)
            print(f"sympathy: built {cuda.build(arch)}", file=sys.stderr)
    except Exception as exc:  # never fail the install: the first use compiles (and reports) instead
        print(f"sympathy: CUDA prebuild failed, the kernels will compile on first use: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
