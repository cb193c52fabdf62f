"""`sy.attention.patch()`: torch's own F.scaled_dot_product_attention runs on sympathy's kernels.

    with sy.attention.patch() as stats:        # or @sy.attention.patch() on a function
        logits = model(input_ids)              # an unmodified model that calls F.scaled_dot_product_attention
    print(stats)                               # calls taken, fallbacks and why

Inside the context, torch.nn.functional.scaled_dot_product_attention is a function with torch's
exact signature that sends every call our kernels support to them (torch_api.decide: CUDA tensors,
CPU float32, left-padding masks, on CUDA fp16/bf16 at d 64/128 any bool or additive mask tile by tile,
dropout_p > 0 on CUDA fp16/bf16, with or without such a mask) and every other call to torch's original
(other dtypes or masks, dropout with a mask in deterministic mode, ...), counting both. On exit, also by
an exception, torch's function is put back.

Nesting: the innermost active patch's options apply; every active patch counts the calls made while
it is active, and `patch_stats()` counts every call since the process started (or its last reset).
The patch replaces a module attribute: it holds for every thread while active (as any monkeypatch).
Code that bound the function before the patch (`from torch.nn.functional import
scaled_dot_product_attention`) keeps torch's. Under torch.compile the routing runs while tracing
(the graph holds our op, or torch's); dynamo replays the counting on every call of the compiled code.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from dataclasses import dataclass, field

from .._errors import NotSupportedError
from .torch_api import decide, register_ops, torch_sdpa

_lock = threading.RLock()
_active: list = []            # the patches entered and not yet exited, innermost last


@dataclass
class PatchStats:
    """Calls seen by a patch: `taken` ran on our kernels (`paths`: where), `fallbacks` on torch's,
    `reasons` says why each fallback happened."""
    taken: int = 0
    fallbacks: int = 0
    paths: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)

    @property
    def calls(self) -> int:
        return self.taken + self.fallbacks

    def _record(self, path: str | None, reason: str | None) -> None:
        if reason is None:
            self.taken += 1
            self.paths[path] += 1
        else:
            self.fallbacks += 1
            self.reasons[reason] += 1

    def __str__(self) -> str:
        lines = [f"sympathy attention: {self.taken} of {self.calls} calls on our kernels"
                 + (f" ({', '.join(f'{p} {n}' for p, n in self.paths.most_common())})" if self.paths else "")]
        lines += [f"  torch's SDPA {n}x: {why}" for why, n in self.reasons.most_common()]
        return "\n".join(lines)


_process_stats = PatchStats()


def patch_stats(reset: bool = False) -> PatchStats:
    """Every call any patch() has seen in this process (a live object); reset=True starts afresh."""
    global _process_stats
    with _lock:
        if reset:
            _process_stats = PatchStats()
        return _process_stats


def _record(path, reason) -> None:
    import torch

    if torch.compiler.is_compiling():      # tracing: one thread, and dynamo cannot enter a lock
        _record_unlocked(path, reason)
        return
    with _lock:
        _record_unlocked(path, reason)


def _record_unlocked(path, reason) -> None:
    seen = []
    for p in _active:
        if not any(s is p.stats for s in seen):   # a patch entered twice counts once
            seen.append(p.stats)
            p.stats._record(path, reason)
    _process_stats._record(path, reason)


def _patched_sdpa(original):
    @functools.wraps(original)   # __wrapped__ = torch's: torch_api.torch_sdpa finds it
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                     scale=None, enable_gqa=False):
        options = _active[-1] if _active else None
        if options is not None:
            decision = decide(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                              kernel=options.kernel, deterministic=options.deterministic, mask_kernel=False)
            if decision.run is not None:
                try:
                    out = decision.run()
                except NotSupportedError as exc:     # this machine cannot run it (no nvcc, ...)
                    _record(None, f"not supported here: {exc}")
                else:
                    _record(decision.path, None)
                    return out
            else:
                _record(None, decision.reason)
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    scaled_dot_product_attention.__sympathy_patch__ = True
    return scaled_dot_product_attention


class patch(contextlib.ContextDecorator):
    """Context manager and decorator: torch's F.scaled_dot_product_attention runs on sympathy's
    kernels where they support the call, on torch's otherwise. `with patch() as stats` gives this
    patch's PatchStats. kernel: the CUDA kernel ("auto", "naive", "tiled", "mma", "hopper");
    deterministic: as sy.attention.scaled_dot_product_attention's."""

    def __init__(self, *, kernel: str = "auto", deterministic: bool | None = None):
        if kernel not in ("auto", "naive", "tiled", "mma", "hopper"):
            raise ValueError(f"kernel must be 'auto', 'naive', 'tiled', 'mma' or 'hopper'; got {kernel!r}")
        if deterministic is not None and not isinstance(deterministic, bool):
            raise TypeError(f"deterministic must be a bool or None; got {type(deterministic).__name__}")
        self.kernel, self.deterministic = kernel, deterministic
        self.stats = PatchStats()     # one per patch object: a decorated function's calls add up here
        self._saved: list = []

    def __enter__(self) -> PatchStats:
        register_ops()   # outside any torch.compile trace, which cannot define an op; no torch: a clear error
        import torch.nn.functional as F

        with _lock:
            original = torch_sdpa()  # torch's, read before anything is replaced
            self._saved.append(F.scaled_dot_product_attention)
            if not _active:
                F.scaled_dot_product_attention = _patched_sdpa(original)
            _active.append(self)
        return self.stats

    def __exit__(self, *exc_info) -> bool:
        import torch.nn.functional as F

        with _lock:
            # Exits come in reverse order of entries (with-blocks nest); remove this patch's last entry.
            index = len(_active) - 1 - _active[::-1].index(self)
            del _active[index]
            saved = self._saved.pop()
            if not _active:
                F.scaled_dot_product_attention = saved
        return False
