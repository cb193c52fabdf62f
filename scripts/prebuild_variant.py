"""Build a whole CUDA attention library ahead, under the loader's cache name, for a same-run A/B on the GPU machine.

docs/DESIGN.md measures a kernel version against its predecessor with whole libraries built ahead, each timed in
its own process (SYMPATHY_CACHE_DIR=DIR/NAME), interleaved A B A B in one device call. The device has little time
and builds slowly; this builds on the dev machine instead. Objects are cached per source file, keyed by its text,
the headers it includes and the -D flags that name a macro it uses, so a variant recompiles only what its flags
touch. The library is named with the current sources' key (cuda_build._source_key), which is what the loader on
the device looks for; with --xz it is compressed for the device runner's 64 MiB carry.

    python3 scripts/prebuild_variant.py .xfer/ab NAME [-D...] [--xz]
    # e.g. base (no flags) and lpt0 with -DSY_HOPPER_BWD_LPT=0, then on the device:
    # SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/lpt0 python3 scripts/bwd_device.py --only-hopper --skip-check ...
    python3 scripts/prebuild_variant.py --unpack .xfer/ab    # on the device: every *.so.xz under the folder
"""
import argparse
import hashlib
import lzma
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sympathy.attention import cuda_build  # noqa: E402


def includes(path: Path, src: Path) -> set:
    """The project headers path includes, transitively (cuda_build.project_headers; src is path's folder)."""
    assert path.parent == src, (path, src)
    return cuda_build.project_headers(path)


def flags_for(cu: Path, src: Path, defines) -> list:
    """The -D flags that name a macro cu or one of its project headers mentions (the rest cannot change it)."""
    text = cu.read_text() + "".join(h.read_text() for h in includes(cu, src))
    return [d for d in defines if d[2:].split("=")[0] in text]


def unpack(root: Path) -> int:
    packed = sorted(root.rglob("*.so.xz"))
    for path in packed:
        path.with_suffix("").write_bytes(lzma.decompress(path.read_bytes()))
        path.unlink()
    print(f"unpacked {len(packed)} libraries under {root}")
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--unpack":
        return unpack(Path(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="folder of variants; the library goes to ROOT/NAME/cuda/")
    ap.add_argument("name")
    ap.add_argument("defines", nargs="*", help="-DMACRO=VALUE flags of this variant")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--xz", action="store_true", help="write NAME.so.xz instead of NAME.so")
    ap.add_argument("--jobs", type=int, default=2)
    args, rest = ap.parse_known_args()   # -D flags look like options to argparse
    args.defines += rest
    bad = [d for d in args.defines if not d.startswith("-D")]
    if bad:
        ap.error(f"only -D flags are variants' flags: {bad}")

    src, nvcc, arch = cuda_build.source_dir(), cuda_build.find_nvcc(), args.arch
    objects = args.root / ".objects"
    objects.mkdir(parents=True, exist_ok=True)

    def compile_one(cu: Path) -> Path:
        headers = sorted(includes(cu, src))
        flags = flags_for(cu, src, args.defines)
        key = hashlib.sha256(cu.read_bytes())
        for h in headers:
            key.update(h.name.encode() + h.read_bytes())
        key.update(" ".join(flags + [arch]).encode())
        obj = objects / f"{cu.stem}.{key.hexdigest()[:12]}.o"
        if not obj.is_file():
            tmp = obj.with_suffix(".tmp")
            subprocess.run([nvcc, *cuda_build.NVCC_FLAGS, *flags, *cuda_build._gencode(arch), "-c", str(cu), "-o",
                            str(tmp)], check=True)
            tmp.rename(obj)
            print(f"compiled {cu.name} {' '.join(flags)}", flush=True)
        return obj

    with ThreadPoolExecutor(args.jobs) as pool:
        objs = list(pool.map(compile_one, cuda_build.sources()))
    out_dir = args.root / args.name / "cuda"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(f"attention_{arch}_*"):
        old.unlink()
    lib = out_dir / f"attention_{arch}_{cuda_build._source_key(arch, nvcc)}.so"
    cuda_build.link(objs, lib, arch)
    if args.xz:   # the device side: python3 -c "...lzma.decompress..." before the first run
        packed = lib.with_name(lib.name + ".xz")
        packed.write_bytes(lzma.compress(lib.read_bytes(), preset=6))
        lib.unlink()
        lib = packed
    print(f"{lib} {lib.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
