"""FlashAttention-4's Hopper forward compiled on a machine with no GPU, for its SASS beside ours (session
2026-11-29h, docs/notes-hopper.md): the CuTe DSL compiles for CUTE_DSL_ARCH without a device when the tensors
are fake ones, and keeps the cubin and PTX where CUTE_DSL_DUMP_DIR says. Only compiles; never runs.

    pip install --target /tmp/fa4site --no-deps flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 \\
        nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \\
        quack-kernels==0.6.5 'apache-tvm-ffi<0.2' torch-c-dlpack-ext einops 'cuda-bindings>=13,<14' cuda-pathfinder triton
    PYTHONPATH=/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages CUTE_DSL_ARCH=sm_90a CUTE_DSL_KEEP=cubin,ptx \\
        CUTE_DSL_DUMP_DIR=/tmp/fa4out python3 scripts/fa4_sass.py [--causal] [--d 128]
    cuobjdump -sass /tmp/fa4out/*.cubin

The kernel is built as flash_attn/cute/interface.py builds it for arch 9.x (its _tile_size_fwd_sm90 tile, 2
stages, 384 threads, P V from registers, the intra-warpgroup overlap), bf16, q/k/v/o laid out (B, N, H, d) with
every extent and stride but the last dynamic (what interface.py's to_cute_tensor makes), and the LSE; the
stream is a fake TVM-FFI one, as interface.py passes. (A CPU tensor through from_dlpack also compiles the device
code, but the TVM-FFI host wrapper then asks for GPU tensors.)
"""
import argparse
import math
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90  # noqa: E402
from flash_attn.cute.interface import _tile_size_fwd_sm90  # noqa: E402
from flash_attn.cute.utils import AuxData  # noqa: E402


def fake_tensor(dtype, ndim: int, align: int):
    """A global-memory tensor with dynamic extents and strides, unit stride last (mark_layout_dynamic's)."""
    shape = tuple(cute.sym_int() for _ in range(ndim))
    stride = tuple(cute.sym_int64() for _ in range(ndim - 1)) + (1,)
    return cute.runtime.make_fake_tensor(dtype, shape, stride=stride, assumed_align=align)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--d", type=int, default=128, help="head dim (q, k and v)")
    args = ap.parse_args()
    if os.environ.get("CUTE_DSL_DUMP_DIR"):   # the DSL keeps nothing where the folder does not exist
        os.makedirs(os.environ["CUTE_DSL_DUMP_DIR"], exist_ok=True)
    cfg = _tile_size_fwd_sm90(args.d, args.d, args.causal, False)
    kernel = FlashAttentionForwardSm90(
        cutlass.BFloat16, args.d, args.d, 1, is_causal=args.causal, is_local=False, pack_gqa=False,
        tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, num_stages=2, num_threads=384, Q_in_regs=False,
        intra_wg_overlap=cfg.intra_wg_overlap, mma_pv_is_rs=cfg.mma_pv_is_rs, mask_mod=None, score_mod=None,
        has_aux_tensors=False, q_subtile_factor=1, paged_kv_non_tma=False)
    q, k, v, o = (fake_tensor(cutlass.BFloat16, 4, 16) for _ in range(4))
    lse = fake_tensor(cutlass.Float32, 3, 4)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    # interface.py's argument order: tensors, scale, cu_seqlens q/k, seqused q/k, page table, window left/right,
    # learnable sink, block-sparse tensors, aux data, cu_total_m_blocks, cu_total_splits_m_blocks, stream.
    cute.compile(kernel, q, k, v, o, lse, 1.0 / math.sqrt(args.d), None, None, None, None, None, None, None, None,
                 None, AuxData(None, None), None, None, stream, options="--enable-tvm-ffi")
    print(f"compiled: tile {cfg.m_block_size} x {cfg.n_block_size}, d = {args.d}, causal = {args.causal}; "
          f"cubin and PTX under {os.environ.get('CUTE_DSL_DUMP_DIR', '(CUTE_DSL_DUMP_DIR unset: nothing kept)')}")


if __name__ == "__main__":
    main()
