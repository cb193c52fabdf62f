"""FlashAttention-4 (the `flash-attn-4` wheel, CuTe DSL; its sm90 kernels on an H100) as an optional
anchor for scripts/hopper_check.py and scripts/bwd_device.py, measured in the same run as ours.

Not a dependency: the device machine has no network, so its wheels travel with a run (flash-attn-4,
nvidia-cutlass-dsl, nvidia-cutlass-dsl-libs-base, -libs-core and -libs-cu13, quack-kernels, apache-tvm-ffi,
torch-c-dlpack-ext, einops; cuda-bindings and protobuf where the image lacks them), installed with
--no-deps into a folder on PYTHONPATH; the 92 MB libs-cu13 wheel goes in two halves over two calls to one
warm machine (scripts/fa4_device.sh; docs/notes-hopper.md, "FA4 in the same run"). Where it is not
importable, `load` says why and the callers skip its rows with that line.

FA4 takes (B, N, H, d); our timings keep (B, H, N, d) tensors, so each cell makes contiguous (B, N, H, d)
copies once, outside the timed calls.
"""


import os
import sys


def _cutlass_dsl_path() -> None:
    """nvidia-cutlass-dsl puts its packages (cutlass, cutlass.cute) on sys.path through a .pth file, which a
    `pip install --target` folder on PYTHONPATH never runs: do what the .pth does."""
    try:
        import nvidia_cutlass_dsl
    except ImportError:
        return
    path = os.path.join(list(nvidia_cutlass_dsl.__path__)[0], "dsl_packages")
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)


def load():
    """(flash_attn_func, None) or (None, the reason it is not importable)."""
    _cutlass_dsl_path()
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # noqa: BLE001 - any failure to import means: no FA4 rows
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return flash_attn_func, None


def version() -> str:
    try:
        from importlib.metadata import version as v
        return f"flash-attn-4 {v('flash-attn-4')}, nvidia-cutlass-dsl {v('nvidia-cutlass-dsl')}"
    except Exception:  # noqa: BLE001
        return "flash-attn-4 (version unknown)"


def to_bnhd(t):
    """A contiguous (B, N, H, d) copy of a (B, H, N, d) tensor, a leaf with t's requires_grad."""
    return t.detach().transpose(1, 2).contiguous().requires_grad_(t.requires_grad)


def forward(func, q, k, v, causal: bool):
    """FA4's output for (B, N, H, d) inputs (its interface returns (out, lse) in some versions)."""
    out = func(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out
