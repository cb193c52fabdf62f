"""Build variants of cuda_src/attention_decode.cu (its -D overrides) and time each on the issue's five
decode shapes beside cuDNN, in one run: how the tile pipeline choices were made (docs/notes-decode.md).

    python3 scripts/decode_variants.py [--variants base=... name=-DFLAG=1,-DOTHER=2 ...]

Each variant is attention_decode.cu alone compiled into its own shared library and swapped in as the
library attention_with_kvcache calls (same cffi declarations). Times: CUDA-graph replay, do_bench
median with L2 flushed, bf16, d = 128, q (B, 32, 1, 128).
"""
import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_check as dc  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda  # noqa: E402

DEFAULT_VARIANTS = ["base=", "no-pdl=-DSY_DECODE_PDL=0", "unsplit3=-DSY_DECODE_STAGES_D128_UNSPLIT=3",
                    "stages2=-DSY_DECODE_STAGES_D128=2", "stages4=-DSY_DECODE_STAGES_D128=4,-DSY_DECODE_STAGES_D128_UNSPLIT=4"]


def build_variant(flags, outdir: Path, name: str, arch: str) -> Path:
    target = outdir / f"decode_{name}.so"
    cmd = [cuda.find_nvcc(), *cuda.NVCC_FLAGS, *cuda._gencode(arch), *flags, "--shared",
           str(cuda.source_dir() / "attention_decode.cu"), "-o", str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    return target


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="*", default=DEFAULT_VARIANTS, help="name=-DFLAG=v,-DFLAG2=w")
    args = ap.parse_args()
    arch = cuda.device_arch()
    ffi, _ = cuda.library(arch)   # the full library: its ffi and its cdef
    variants = [(v.split("=", 1)[0], [f for f in v.split("=", 1)[1].split(",") if f]) for v in args.variants]
    tmp = Path(tempfile.mkdtemp())
    with ThreadPoolExecutor(len(variants)) as pool:
        libs = dict(zip([n for n, _ in variants],
                        pool.map(lambda nv: build_variant(nv[1], tmp, nv[0], arch), variants)))
    full = cuda._libs[arch]
    results = {}
    for B, Hkv, N in dc.SHAPES:
        q, kc, vc = dc.caches(B, Hkv, N)
        fn, _ = dc.sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, kc, vc)
        results[(B, Hkv, N, "cudnn")] = dc.bench(dc.graphed(fn))
        want = dc.reference(q, kc, vc)
        for name, path in libs.items():
            cuda._libs[arch] = ffi.dlopen(str(path))
            call = lambda: sy.attention.attention_with_kvcache(q, kc, vc)  # noqa: E731
            dc.check_correct(call(), want, f"{name} B={B} Hkv={Hkv} N={N}")
            results[(B, Hkv, N, name)] = dc.bench(dc.graphed(call))
        cuda._libs[arch] = full
        del q, kc, vc
        torch.cuda.empty_cache()
    names = list(libs)
    print("\n| B, KV heads, keys | cuDNN | " + " | ".join(f"{n} (÷ cuDNN)" for n in names) + " |")
    print("|---" * (len(names) + 2) + "|")
    for B, Hkv, N in dc.SHAPES:
        c = results[(B, Hkv, N, "cudnn")]
        print(f"| {B}, {Hkv}, {N} | {c * 1e6:.1f} µs | " + " | ".join(
            f"{results[(B, Hkv, N, n)] * 1e6:.1f} µs ({c / results[(B, Hkv, N, n)]:.3f}×)" for n in names) + " |")
    print("\nvariants: " + "; ".join(f"{n}: {' '.join(f) or '(committed defaults)'}" for n, f in variants))


if __name__ == "__main__":
    main()
