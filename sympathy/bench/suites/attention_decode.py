"""`sympathy bench attention-decode`: attention against a KV cache (issue #22) beside torch's SDPA.

Decode reads every cached key and value once and does about one FLOP per byte, so its yardstick is
HBM bandwidth. In one run, bf16, q (B, 1, Hq, d) against a (B, N, Hkv, d) cache (flash-attn's layout):
  streaming ceiling   a read-only triton kernel summing 4 GiB, and torch.sum (the larger is the
                      ceiling every row's "% of read ceiling" is taken of), and a device copy
  decode groups       one per --shapes entry (default: the issue's five, B=1 with 128k keys among them):
      sympathy        sy.attention.attention_with_kvcache on the contiguous cache
      sympathy paged  the same keys in pages of --page-size rows stored out of order (block_table);
                      "÷ contiguous" is its time over the contiguous one's
      sdpa-cudnn      torch SDPA's cuDNN backend on its own (B, H, N, d) copy, enable_gqa (the anchor)
      sdpa-flash      torch SDPA's flash backend (FlashAttention-2), the same way
  chunked prefill     --chunk NQ,N new queries over an N-key cache, bottom-right causal (a chunk sees the
                      whole cache before it): sympathy (on sm_90 the `hopper` kernel, kvcache.py's
                      _chunk_on_hopper), sympathy given cache_seqlens as a tensor (the length unknown to
                      the host: the decode kernel's mma.sync path), sdpa-cudnn with the bottom-right
                      mask as a bool tensor (the anchor), sdpa-flash without a mask (it takes none: a
                      lower bound on its time, Nq^2/2 fewer masked scores)

Figures: time_us, the GPU time of one call (the call captured in a CUDA graph and replayed, timed by
triton.testing.do_bench, median, L2 flushed before every replay; --timing eager: direct calls, where
the host's Python shows when it outlasts the flush); TB/s = K+V bytes of the cache read / time;
TFLOP/s (chunk) = 4 x Hq x d x (visible query-key pairs); err = max |out - float64 reference| /
max |reference| on the first sequence. The ratio column is cuDNN's time over each row's (speed).
Without torch or a CUDA GPU the suite says so in one line, exits with status 1 and writes no JSON.
"""
from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path

from ..core import Results, Suite, positive_int
from .attention_gpu import cuda_torch

DEFAULT_SHAPES = ((1, 8, 8192), (8, 8, 8192), (1, 8, 131072), (32, 8, 4096), (8, 32, 16384))   # (B, Hkv, N)
DEFAULT_CHUNK = (512, 32768)   # (new queries, cached keys)
PAGE_MULTIPLE = 64             # kvcache.PAGE_MULTIPLE (not imported: that module needs no torch, this one none)
CEILING_GROUP = "streaming ceiling (read 4 GiB)"


def positive_ints(text: str, names: tuple[str, ...]) -> tuple[int, ...]:
    parts = text.split(",")
    if len(parts) != len(names):
        raise argparse.ArgumentTypeError(f"must be {','.join(names)} (comma-separated integers); got {text!r}")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {','.join(names)} (comma-separated integers); got {text!r}") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"every one of {','.join(names)} must be >= 1; got {text!r}")
    return values


def shape_argument(text: str) -> tuple[int, int, int]:
    """argparse type of --shapes: B,HKV,N."""
    return positive_ints(text, ("B", "HKV", "N"))


def chunk_argument(text: str) -> tuple[int, int]:
    """argparse type of --chunk: NQ,N."""
    return positive_ints(text, ("NQ", "N"))


def kv_bytes(B: int, Hkv: int, N: int, d: int) -> int:
    """Bytes of K and V a call reads: every cached row of every KV head once (2 tensors, 2-byte elements)."""
    return 2 * B * Hkv * N * d * 2


def chunk_flops(Hq: int, d: int, nq: int, n: int) -> float:
    """Forward FLOPs of nq queries over n keys, bottom-right causal: query i sees n - nq + i + 1 keys;
    two GEMMs of 2 FLOPs per multiply-add over the visible pairs only."""
    return 4.0 * Hq * d * (nq * (n - nq) + nq * (nq + 1) / 2)


class AttentionDecodeSuite(Suite):
    title = "Attention against a KV cache (bf16): decode and a chunked prefill, sympathy vs torch SDPA, GPU time"
    primary = "time_us"
    higher_is_better = False
    columns = ("time_us", "TB/s", "% of read ceiling", "TFLOP/s", "÷ contiguous", "err")
    ratio_label = "× sdpa-cudnn (speed)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shapes", type=shape_argument, nargs="+", default=list(DEFAULT_SHAPES), metavar="B,HKV,N",
                            help="decode shapes: batch, KV heads, cached keys (default: "
                                 f"{' '.join(','.join(map(str, s)) for s in DEFAULT_SHAPES)})")
        parser.add_argument("--heads-q", type=positive_int, default=32, help="query heads (a multiple of every HKV)")
        parser.add_argument("--head-dim", type=int, choices=(64, 128), default=128, help="head dim d")
        parser.add_argument("--page-size", type=positive_int, default=256,
                            help=f"rows per page of the paged cache (a multiple of {PAGE_MULTIPLE})")
        parser.add_argument("--no-paged", action="store_true", help="skip the paged-cache rows")
        parser.add_argument("--chunk", type=chunk_argument, default=DEFAULT_CHUNK, metavar="NQ,N",
                            help="chunked prefill: new queries, cached keys, with --chunk-kv-heads KV heads "
                                 f"(default: {DEFAULT_CHUNK[0]},{DEFAULT_CHUNK[1]})")
        parser.add_argument("--chunk-kv-heads", type=positive_int, default=8, help="KV heads of the chunk")
        parser.add_argument("--no-chunk", action="store_true", help="skip the chunked prefill")
        parser.add_argument("--timing", choices=("graph", "eager"), default="graph",
                            help="graph: each call captured in a CUDA graph (GPU time); eager: direct calls")

    def check_arguments(self, args: argparse.Namespace) -> None:
        kv_heads = [hkv for _, hkv, _ in args.shapes] + ([] if args.no_chunk else [args.chunk_kv_heads])
        for hkv in kv_heads:
            if args.heads_q % hkv:
                raise ValueError(f"--heads-q {args.heads_q} must be a multiple of every KV head count; {hkv} is not a divisor")
        if args.page_size % PAGE_MULTIPLE:
            raise ValueError(f"--page-size must be a multiple of {PAGE_MULTIPLE}; got {args.page_size}")
        if not args.no_chunk and args.chunk[0] > args.chunk[1]:
            raise ValueError(f"--chunk NQ,N: the new queries are part of the cache, so NQ <= N; got {args.chunk[0]},{args.chunk[1]}")

    def run(self, args: argparse.Namespace, results: Results) -> None:
        from ..._errors import NotSupportedError

        torch = cuda_torch("docs/notes-decode.md")
        if torch.cuda.get_device_capability() < (8, 0):
            raise NotSupportedError(f"needs compute capability 8.0 or newer (the decode kernel's mma.sync on bf16); "
                                    f"{torch.cuda.get_device_name()} is {torch.cuda.get_device_capability()}: nothing measured")
        results.note(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
                     f"{torch.backends.cudnn.version()}; times: {_timing_words(args.timing)}")
        ceiling = self._ceiling(torch, results)
        run = _Runner(torch, args, results, ceiling)
        for shape in results.progress(args.shapes, "attention-decode"):
            run.decode(*shape)
        if not args.no_chunk:
            run.chunk(*args.chunk)
        for line in sorted(run.skipped):
            results.note(f"skipped: {line}")

    def _ceiling(self, torch, results: Results) -> float:
        """Read-only HBM bandwidth measured now: the larger of a triton kernel summing 4 GiB in 64 KiB
        slices (one store per block) and torch.sum; a device-to-device copy beside them (bytes read +
        written). Returns bytes/s."""
        n = 1 << 31   # bf16 elements: 4 GiB, far past the 50 MiB L2
        x = torch.empty(n, device="cuda", dtype=torch.bfloat16).normal_()
        found = {}
        try:
            read = _triton_read_kernel()
            block, tiles = 8192, 8
            out = torch.empty(n // (block * tiles), device="cuda")
            grid = (n // (block * tiles),)
            found["read (triton kernel)"] = _median_us(lambda: read[grid](x, out, BLOCK=block, TILES=tiles))
        except ImportError:
            results.note("no triton: the read ceiling is torch.sum's alone")
        found["read (torch.sum)"] = _median_us(lambda: x.sum())
        for name, us in found.items():
            results.add(CEILING_GROUP, name, params={"kind": "ceiling"}, **{"time_us": us, "TB/s": 2 * n / us / 1e6})
        y = torch.empty(n // 4, device="cuda", dtype=torch.bfloat16)
        src = x[: n // 4]
        us = _median_us(lambda: y.copy_(src))
        results.add(CEILING_GROUP, "copy (read + write)", params={"kind": "ceiling"},
                    **{"time_us": us, "TB/s": 2 * 2 * (n // 4) / us / 1e6})
        del x, y, src
        torch.cuda.empty_cache()
        return max(2 * n / us * 1e6 for us in found.values())

    def plot(self, results: Results, outdir: Path) -> list:
        paths = []
        decode = [r for r in results.rows if r.params.get("kind") == "decode"]
        if decode:
            ceiling = max((r.metrics["TB/s"] for r in results.rows
                           if r.params.get("kind") == "ceiling" and r.variant.startswith("read")), default=None)
            paths.append(_bandwidth_chart(decode, ceiling, outdir / "attention-decode-tbps.png"))
        chunk = [r for r in results.rows if r.params.get("kind") == "chunk"]
        if chunk:
            paths.append(_chunk_chart(chunk, outdir / "attention-decode-chunk.png"))
        return paths


def _bandwidth_chart(rows, ceiling, path: Path) -> Path:
    """One cluster of bars per decode shape (TB/s of K+V read), the anchor hatched, the read-only
    streaming ceiling of the same run as a dashed line."""
    from .. import plots

    plt = plots._pyplot()
    groups = list(dict.fromkeys(r.group for r in rows))
    variants = list(dict.fromkeys(r.variant for r in rows))
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(groups) + 4.5), 4.5), layout="constrained")
    for i, variant in enumerate(variants):
        found = [(g, r) for g, group in enumerate(groups) for r in rows if r.group == group and r.variant == variant]
        bars = ax.bar([g + (i - (len(variants) - 1) / 2) * width for g, _ in found], [r.metrics["TB/s"] for _, r in found],
                      width, label=variant + (" (anchor)" if any(r.anchor for _, r in found) else ""))
        for bar, (_, r) in zip(bars, found):
            if r.anchor:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
    if ceiling:
        ax.axhline(ceiling, color="grey", linestyle="--", linewidth=1, label=f"read-only streaming ceiling ({ceiling:.2f} TB/s)")
    ax.set_xticks(range(len(groups)), [g.removeprefix("decode ") for g in groups], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("TB/s of K+V read")
    ax.set_title("decode attention against a KV cache (bf16): bandwidth")
    plots._legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return plots._save(fig, path)


def _chunk_chart(rows, path: Path) -> Path:
    """The chunked prefill's TFLOP/s, one horizontal bar per variant (their names are long), the anchor hatched."""
    from .. import plots

    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(9.0, 1.2 + 0.5 * len(rows)), layout="constrained")
    bars = ax.barh([r.variant + (" (anchor)" if r.anchor else "") for r in rows], [r.metrics["TFLOP/s"] for r in rows])
    for bar, r in zip(bars, rows):
        if r.anchor:
            bar.set_hatch("//")
            bar.set_edgecolor("black")
    ax.invert_yaxis()   # the first variant on top
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("TFLOP/s (visible query-key pairs only)")
    ax.set_title(rows[0].group + " (bf16)")
    ax.grid(axis="x", alpha=0.3)
    return plots._save(fig, path)


def _timing_words(timing: str) -> str:
    return ("each call captured in a CUDA graph and replayed (GPU time), median of triton's do_bench, L2 flushed"
            if timing == "graph" else "direct calls (host time shows where it outlasts the L2 flush), median")


def _triton_read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, TILES: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for t in range(TILES):
            offs = (pid * TILES + t) * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc))

    return read_kernel


def _median_us(fn) -> float:
    from .attention_gpu import median_ms

    return median_ms(fn) * 1e3


def graphed(torch, fn):
    """fn captured in a CUDA graph (a few microseconds of host per replay: do_bench then times the
    GPU's work alone); None where capture fails."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay
    except RuntimeError:
        return None


class _Runner:
    """The decode groups and the chunk group of one run (a class only to share the run's state)."""

    def __init__(self, torch, args, results: Results, ceiling: float):
        self.torch, self.args, self.results, self.ceiling = torch, args, results, ceiling
        self.skipped: set[str] = set()
        self.gen = torch.Generator(device="cuda").manual_seed(0)

    def _time(self, fn, what: str) -> float:
        if self.args.timing == "graph":
            replay = graphed(self.torch, fn)
            if replay is not None:
                return _median_us(replay)
            self.skipped.add(f"graph capture of {what} failed: timed eagerly")
        return _median_us(fn)

    def _randn(self, *shape):
        return self.torch.randn(*shape, device="cuda", dtype=self.torch.bfloat16, generator=self.gen)

    def _error(self, out, want) -> float:
        return ((out.double() - want).abs().max() / want.abs().max()).item()

    def _add(self, group, variant, params, us, nbytes, err, anchor=False, **extra):
        metrics = {"time_us": us, "TB/s": nbytes / us / 1e6, "% of read ceiling": 100 * nbytes / us * 1e6 / self.ceiling,
                   "err": err, **extra}
        self.results.add(group, variant, anchor=anchor, params=params, **metrics)

    def _sdpa(self, q, k, v, mask=None):
        """{backend: (fn, how)} of torch SDPA on (B, H, N, d) tensors: GQA by enable_gqa, else by K/V
        repeated per query head (a copy made here, outside the timing); with `mask`, without it where a
        backend takes none (how says so). A backend that refuses every way is noted and left out."""
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        group = q.shape[1] // k.shape[1]
        expanded = []

        def repeated():
            if not expanded:
                expanded.extend(t.repeat_interleave(group, 1) for t in (k, v))
            return expanded

        ways = [(mask, "enable_gqa"), (mask, "K/V repeated per head")] if group > 1 else [(mask, "")]
        if mask is not None:
            ways += [(None, how) for _, how in ways]
        fns = {}
        for name, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
            errors = []
            for m, how in ways:
                def fn(backend=backend, m=m, how=how):
                    kk, vv = repeated() if how.startswith("K/V") else (k, v)
                    with sdpa_kernel([backend]):
                        return F.scaled_dot_product_attention(q, kk, vv, m, enable_gqa=how == "enable_gqa")
                try:
                    with warnings.catch_warnings():   # torch warns of each backend it refuses: the note says it once
                        warnings.simplefilter("ignore")
                        fn()
                except RuntimeError as exc:
                    errors.append(f"{how or 'plain'}{' + mask' if m is not None else ''}: {str(exc).splitlines()[0][:60]}")
                    continue
                words = [w for w in (how if how != "enable_gqa" else "", "no mask: it takes none; a lower bound"
                                     if mask is not None and m is None else "") if w]
                fns[name] = (fn, "; ".join(words), mask is not None and m is None)
                break
            else:
                self.skipped.add(f"{name}: " + "; ".join(errors))
        return fns

    def decode(self, B: int, Hkv: int, N: int) -> None:
        torch, args = self.torch, self.args
        import sympathy as sy

        Hq, d = args.heads_q, args.head_dim
        group = f"decode B={B} Hkv={Hkv} N={N}"
        params = {"kind": "decode", "B": B, "Hkv": Hkv, "N": N, "d": d, "Hq": Hq}
        q, kc, vc = self._randn(B, 1, Hq, d), self._randn(B, N, Hkv, d), self._randn(B, N, Hkv, d)
        want = float64_reference(torch, q[:1], kc[:1], vc[:1], causal=False)
        nbytes = kv_bytes(B, Hkv, N, d)

        def ours():
            return sy.attention.attention_with_kvcache(q, kc, vc)
        t_contiguous = self._time(ours, "sympathy")
        self._add(group, "sympathy", params, t_contiguous, nbytes, self._error(ours()[:1], want))
        if not args.no_paged:
            pk, pv, table = _paged(torch, kc, vc, args.page_size)
            seqlens = torch.full((B,), N, dtype=torch.int32, device="cuda")

            def paged():
                return sy.attention.attention_with_kvcache(q, pk, pv, cache_seqlens=seqlens, block_table=table)
            us = self._time(paged, "sympathy paged")
            self._add(group, f"sympathy paged (page {args.page_size}, shuffled)", params, us, nbytes,
                      self._error(paged()[:1], want), **{"÷ contiguous": us / t_contiguous})
            del pk, pv
        qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, kc, vc))
        del kc, vc
        for name, (fn, how, _) in self._sdpa(qs, ks, vs).items():
            self._add(group, name + (f" ({how})" if how else ""), params, self._time(fn, name), nbytes,
                      self._error(fn()[:1].transpose(1, 2), want), anchor=name == "sdpa-cudnn")
        del qs, ks, vs
        torch.cuda.empty_cache()

    def chunk(self, nq: int, N: int) -> None:
        torch, args = self.torch, self.args
        import sympathy as sy

        Hq, Hkv, d = args.heads_q, args.chunk_kv_heads, args.head_dim
        group = f"chunk {nq} queries over N={N}, causal"
        params = {"kind": "chunk", "Nq": nq, "N": N, "Hkv": Hkv, "d": d, "Hq": Hq}
        q, kc, vc = self._randn(1, nq, Hq, d), self._randn(1, N, Hkv, d), self._randn(1, N, Hkv, d)
        heads = Hq // Hkv   # the reference on the first KV head's query group: enough to judge, cheap in float64
        want = float64_reference(torch, q[:, :, :heads], kc[:, :, :1], vc[:, :, :1], causal=True)
        nbytes, flops = kv_bytes(1, Hkv, N, d), chunk_flops(Hq, d, nq, N)
        seqlens = torch.full((1,), N, dtype=torch.int32, device="cuda")
        variants = {"sympathy": lambda: sy.attention.attention_with_kvcache(q, kc, vc, causal=True),
                    "sympathy, cache_seqlens a tensor (decode kernel)":
                        lambda: sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)}
        for name, fn in variants.items():
            us = self._time(fn, name)
            self._add(group, name, params, us, nbytes, self._error(fn()[:, :, :heads], want), **{"TFLOP/s": flops / us / 1e6})
        mask = torch.ones(nq, N, dtype=torch.bool, device="cuda").tril(N - nq)   # bottom-right: True takes part
        qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, kc, vc))
        for name, (fn, how, unmasked) in self._sdpa(qs, ks, vs, mask).items():
            us = self._time(fn, name)
            err = math.nan if unmasked else self._error(fn()[:, :heads].transpose(1, 2), want)
            self._add(group, name + (f" ({how})" if how else ""), params, us, nbytes, err,
                      anchor=name == "sdpa-cudnn" and not unmasked, **{"TFLOP/s": flops / us / 1e6})
        del q, kc, vc, qs, ks, vs, mask
        torch.cuda.empty_cache()


def float64_reference(torch, q, kc, vc, causal: bool):
    """float64 attention of q (B, Nq, Hq, d) against a whole (B, N, Hkv, d) cache, bottom-right causal;
    the query heads of a KV head grouped (K/V converted once, not once per query head)."""
    B, nq, Hq, d = q.shape
    N, Hkv = kc.shape[1], kc.shape[2]
    qf = q.double().view(B, nq, Hkv, Hq // Hkv, d)
    s = torch.einsum("bqhgd,bnhd->bhgqn", qf, kc.double()) / math.sqrt(d)
    if causal:
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(N, device=q.device)[None, :]
        s = s.masked_fill(j > i + N - nq, -math.inf)
    out = torch.einsum("bhgqn,bnhd->bqhgd", torch.softmax(s, -1), vc.double())
    return out.reshape(B, nq, Hq, d)


def _paged(torch, kc, vc, page: int):
    """The (B, N, Hkv, d) caches cut into pages of `page` rows (the last zero-padded), stored in a
    shuffled pool: (pool_k, pool_v, block_table) with pool[block_table[b, j]] = rows j*page.. of b."""
    B, N, Hkv, d = kc.shape
    per = -(-N // page)
    order = torch.randperm(B * per, device=kc.device)
    table = order.view(B, per).to(torch.int32)
    pools = []
    for t in (kc, vc):
        padded = torch.zeros(B, per * page, Hkv, d, device=t.device, dtype=t.dtype)
        padded[:, :N] = t
        pool = torch.empty_like(padded).view(B * per, page, Hkv, d)
        pool[order] = padded.view(B * per, page, Hkv, d)
        pools.append(pool)
        del padded
    return pools[0], pools[1], table


SUITE = AttentionDecodeSuite()
