"""What the hardware is: cores, caches and line size (sysfs), SIMD flags, GPU, a peak-FLOP estimate.

Everything is read, not assumed: kernels size their tiles from it and benchmarks record it beside
every figure so a number never travels without the machine it was measured on.
"""
from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")
SIMD_FLAGS = ("sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
              "avx512_fp16", "amx_tile", "neon", "asimd", "sve")


@dataclass(frozen=True)
class Cache:
    level: int
    kind: str          # "Data", "Instruction", "Unified"
    size_bytes: int
    line_bytes: int
    ways: int | None
    shared_by: int     # logical CPUs sharing one instance


@dataclass(frozen=True)
class Topology:
    cpu_model: str
    logical_cpus: int
    physical_cores: int
    usable_cpus: tuple[int, ...]
    caches: tuple[Cache, ...]
    line_bytes: int
    simd: tuple[str, ...]
    mhz: float | None
    gpu: str | None = None
    extras: dict = field(default_factory=dict)

    def cache(self, level: int, kind: str = "Data") -> Cache | None:
        """The cache at level (1 → L1d, 2 → L2, 3 → L3); kind is ignored for unified levels."""
        for c in self.caches:
            if c.level == level and (c.kind == kind or c.kind == "Unified"):
                return c
        return None

    def peak_gflops(self, dtype: str = "float64", threads: int = 1) -> float | None:
        """Peak FLOP rate from the SIMD width, two FMA ports and the nominal clock (an upper bound)."""
        if not self.mhz:
            return None
        bits = 512 if "avx512f" in self.simd else 256 if "avx2" in self.simd else 128
        lanes = bits // (64 if dtype == "float64" else 32)
        fma_ports = 2
        return self.mhz * 1e-3 * lanes * 2 * fma_ports * threads

    def as_dict(self) -> dict:
        return asdict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def _cpu_list_len(text: str) -> int:
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def read_caches() -> tuple[Cache, ...]:
    """The caches of cpu0 as sysfs describes them (empty off Linux)."""
    caches = []
    for index in sorted((SYSFS_CPU / "cpu0" / "cache").glob("index*")):
        size = _parse_size(_read(index / "size") or "0")
        if not size:
            continue
        ways = _read(index / "ways_of_associativity")
        shared = _read(index / "shared_cpu_list") or "0"
        caches.append(Cache(
            level=int(_read(index / "level") or 0),
            kind=_read(index / "type") or "Unified",
            size_bytes=size,
            line_bytes=int(_read(index / "coherency_line_size") or 64),
            ways=int(ways) if ways and ways.isdigit() else None,
            shared_by=_cpu_list_len(shared),
        ))
    return tuple(caches)


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    text = _read(Path("/proc/cpuinfo")) or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key and key not in info:
            info[key] = value.strip()
        if not line.strip() and info:
            break
    return info


def _gpu_name() -> str | None:
    """The first CUDA device torch sees, if torch is installed (it is never imported otherwise)."""
    import importlib.util
    import sys

    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch
    except Exception:  # a broken torch install must not break `sympathy info`
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, " \
           f"{props.total_memory / 2**30:.0f} GiB)"


@functools.lru_cache(maxsize=None)
def topology(with_gpu: bool = True) -> Topology:
    """The machine this process runs on (cached: the hardware does not change under us)."""
    import psutil

    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    caches = read_caches()
    l1 = next((c for c in caches if c.level == 1 and c.kind == "Data"), None)
    mhz = None
    model = info.get("model name") or platform.processor() or platform.machine()
    m = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if m:
        mhz = float(m.group(1)) * 1000
    else:
        freq = psutil.cpu_freq()
        mhz = (freq.max or freq.current) if freq else None
        if not mhz and info.get("cpu MHz"):
            mhz = float(info["cpu MHz"])
    return Topology(
        cpu_model=model,
        logical_cpus=os.cpu_count() or 1,
        physical_cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        usable_cpus=tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity")
        else tuple(range(os.cpu_count() or 1)),
        caches=caches,
        line_bytes=l1.line_bytes if l1 else 64,
        simd=tuple(f for f in SIMD_FLAGS if f in flags),
        mhz=mhz,
        gpu=_gpu_name() if with_gpu else None,
    )
