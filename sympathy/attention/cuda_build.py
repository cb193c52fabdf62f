"""The CUDA attention kernels' loader: nvcc found, cuda_src/ compiled into one shared library per GPU
architecture, cached, and loaded with cffi (the launchers and torch ops that use it: cuda.py).

The sources are compiled by nvcc on first use into one shared library per GPU architecture, cached
under $SYMPATHY_CACHE_DIR/cuda (default ~/.cache/sympathy/cuda, see config.py) by source hash, arch and nvcc
version (every .cu, .cuh and .h of cuda_src/: a header-only change rebuilds), and loaded with cffi's dlopen.
torch is imported only when a function here needs it (device_arch): without it the rest of sympathy works.
Every name here is importable from sympathy.attention.cuda too (cuda.build, cuda.library, cuda._libs, ...).
"""
import functools
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .. import config
from .._errors import NotSupportedError

# -O3 for host and device code; C++17 for `if constexpr`; -lineinfo so Nsight Compute and
# compute-sanitizer can point at source lines (it changes no generated instruction).
NVCC_FLAGS = ("-std=c++17", "-O3", "-lineinfo", "-Xcompiler", "-fPIC")

_SY_EINVAL, _SY_EUNSUPPORTED = -1, -5


# ---- sources, nvcc, cache ---------------------------------------------------------------------------
def source_dir() -> Path:
    """cuda_src/ as sympathy/cuda_src: a folder inside an installed wheel, a symlink to the top-level
    cuda_src/ in a checkout (package data of a namespace package has no reliable importlib path)."""
    path = Path(__file__).resolve().parents[1] / "cuda_src"
    if (path / "attention_api.h").is_file():
        return path
    raise FileNotFoundError(f"the CUDA sources are missing: expected them in {path}")


def sources() -> List[Path]:
    return sorted(source_dir().glob("*.cu"))


def project_headers(src: Path) -> set:
    """The project headers src includes (`#include "..."` found beside it), transitively."""
    seen, todo = set(), [src]
    while todo:
        for name in re.findall(r'#include\s+"([^"]+)"', todo.pop().read_text()):
            header = src.parent / name
            if header.is_file() and header not in seen:
                seen.add(header)
                todo.append(header)
    return seen


def find_nvcc() -> str:
    """The nvcc to build with ($SYMPATHY_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin: config.py)."""
    path = config.nvcc_path()
    if path and os.access(path, os.X_OK):
        return path
    raise NotSupportedError("nvcc not found (CUDA toolkit): the CUDA attention kernels are compiled on first "
                            "use; install the CUDA toolkit, or set CUDA_HOME or SYMPATHY_NVCC")


def nvcc_version(nvcc: Optional[str] = None) -> str:
    out = subprocess.run([nvcc or find_nvcc(), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release [\d.]+, V[\d.]+", out)
    return match.group(0) if match else out.strip().splitlines()[-1]


def cache_dir() -> Path:
    return config.cache_dir() / "cuda"


def _check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise ValueError(f"arch must look like 'sm_80' or 'sm_90a'; got {arch!r}")
    return arch


def _gencode(arch: str) -> List[str]:
    return ["-gencode", f"arch=compute_{arch[3:]},code={arch}"]


def _source_key(arch: str, nvcc: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(source_dir().iterdir()):
        if path.suffix in (".cu", ".cuh", ".h"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(" ".join((arch, nvcc_version(nvcc)) + NVCC_FLAGS).encode())
    return digest.hexdigest()[:16]


def _compile_weight(src: Path, arch: str) -> int:
    """How long src takes to compile for arch, roughly: its text and its project headers', in bytes."""
    text = src.read_text() + "".join(h.read_text() for h in project_headers(src))
    return len(text) if arch == "sm_90a" or "SY_HOPPER_DEVICE_CODE" not in text else 0


def compile_objects(archs: Sequence[str], outdir: Path, jobs: Optional[int] = None) -> List[Path]:
    """Compile every .cu for every arch to an object file (`nvcc -c`), files in parallel.

    Used by the build and by the CI test that keeps every kernel compiling for sm_80 and sm_90a.
    A compile error raises RuntimeError with nvcc's message.
    """
    nvcc = find_nvcc()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    # Longest first, so that no core is left idle behind one long compile at the end (2 cores: 449 -> ~400 s for both
    # archs). A file's text with its project headers stands in for its compile time; the sm_90a-only files compile
    # to empty kernels elsewhere (their device code is behind SY_HOPPER_DEVICE_CODE), so they go last there.
    work = sorted(((src, _check_arch(arch)) for arch in archs for src in sources()),
                  key=lambda item: -_compile_weight(*item))

    def one(item: Tuple[Path, str]) -> Path:
        src, arch = item
        obj = outdir / f"{src.stem}.{arch}.o"
        cmd = [nvcc, *NVCC_FLAGS, *_gencode(arch), "-c", str(src), "-o", str(obj)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed on {src.name} for {arch}:\n{done.stderr.strip()}")
        return obj

    with ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, work))


def link(objects: Sequence[Path], target: Path, arch: str) -> None:
    """Link compiled objects into the shared library `target` (`nvcc --shared`); RuntimeError with nvcc's message."""
    cmd = [find_nvcc(), *_gencode(_check_arch(arch)), "--shared", *map(str, objects), "-o", str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed to link {Path(target).name}:\n{done.stderr.strip()}")


def build(arch: str, force: bool = False) -> Path:
    """The shared library of all kernels for one arch, from the cache or freshly compiled."""
    nvcc = find_nvcc()
    arch = _check_arch(arch)
    target = cache_dir() / f"attention_{arch}_{_source_key(arch, nvcc)}.so"
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Said before the wait, not after it: the first call would otherwise sit silent for ~30 s.
    print(f"sympathy: compiling the CUDA attention kernels for {arch} with nvcc (about 30 s, once per "
          "version; `sympathy build-cuda` does it ahead of time)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        objects = compile_objects([arch], Path(tmp))
        partial = Path(tmp) / target.name
        link(objects, partial, arch)
        os.replace(partial, target)   # atomic: a concurrent loader sees the old file or the whole new one
    return target


# ---- the device (torch, imported on first use) ------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError as exc:
        raise NotSupportedError("the CUDA attention kernels work on torch tensors: pip install sympathy[torch]") from exc
    return torch


def device_arch(device=None) -> str:
    """The nvcc arch of a CUDA device: sm_90a on Hopper (its arch-specific features), else sm_XY."""
    torch = _torch()
    if not torch.cuda.is_available():
        raise NotSupportedError("no CUDA GPU visible to torch (torch.cuda.is_available() is False)")
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}{'a' if (major, minor) == (9, 0) else ''}"


# ---- per-call host work (host fact served: at N <= 1024 a kernel runs 20-250 us, about what one call's
# Python took on the host, so calls back to back waited on the host; each question below is asked once) ----
@functools.lru_cache(maxsize=None)
def device_facts(index: int) -> Tuple[Tuple[int, int], int, str]:
    """(compute capability, SM count, nvcc arch) of CUDA device `index`, asked once per process."""
    props = _torch().cuda.get_device_properties(index)
    return (props.major, props.minor), props.multi_processor_count, device_arch(index)


def device_index(device) -> int:
    """The index of a CUDA torch.device (the current device for a bare "cuda")."""
    return device.index if device.index is not None else _torch().cuda.current_device()


def current_stream(torch, index: int) -> int:
    """The raw cudaStream_t of torch's current stream on device `index` (the fast private accessor
    inductor uses, else the public one)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def launch_on(device, launcher, params) -> int:
    """launcher(params, stream) on torch's current stream of `device`, that device made current only when
    it is not already (the launchers ask the runtime for the current device)."""
    torch = _torch()
    index = device_index(device)
    ffi = _ffi
    if index == torch.cuda.current_device():
        return launcher(params, ffi.cast("void *", current_stream(torch, index)))
    with torch.cuda.device(index):
        return launcher(params, ffi.cast("void *", current_stream(torch, index)))


def build_all(archs: Optional[Sequence[str]] = None, force: bool = False) -> List[Path]:
    """Compile the kernels for each arch (default: this machine's GPU); the paths of the libraries."""
    if not archs:
        try:
            archs = [device_arch()]
        except NotSupportedError as exc:
            raise NotSupportedError(f"{exc}; to build without a GPU name the architectures, "
                                    "e.g. archs=['sm_80', 'sm_90a'] (sympathy build-cuda --arch sm_80 sm_90a)") from None
    return [build(arch, force=force) for arch in archs]


# ---- the loaded library ---------------------------------------------------------------------------------
_ffi = None
_libs: dict = {}
_lock = threading.Lock()


def _cdef() -> str:
    header = (source_dir() / "attention_api.h").read_text()
    match = re.search(r"/\* CDEF BEGIN \*/(.*)/\* CDEF END \*/", header, re.S)
    if not match:
        raise RuntimeError("attention_api.h has no CDEF block")
    return re.sub(r"/\*.*?\*/", "", match.group(1), flags=re.S)


def library(arch: str):
    """(ffi, lib) for an arch: built if needed, dlopen'ed once per process."""
    global _ffi
    lib = _libs.get(arch)   # loaded: no lock (a dict read is atomic), nothing to build
    if lib is not None:
        return _ffi, lib
    with _lock:
        if _ffi is None:
            import cffi

            ffi = cffi.FFI()
            ffi.cdef(_cdef())
            _ffi = ffi
        if arch not in _libs:
            _libs[arch] = _ffi.dlopen(str(build(arch)))
        return _ffi, _libs[arch]


def _raise_for_status(status: int, lib, what: str) -> None:
    if status == 0:
        return
    message = _ffi.string(lib.sy_attn_error_string(status)).decode()
    if status == _SY_EINVAL:
        raise ValueError(f"{what}: {message}")
    if status == _SY_EUNSUPPORTED:
        raise NotSupportedError(f"{what}: {message}")
    raise RuntimeError(f"{what}: CUDA error {status}: {message}")
