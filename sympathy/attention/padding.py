"""Left padding without a mask kernel: a padded batch as one unmasked call per sequence.

transformers pads a batch on the left and hands SDPA a boolean mask (B, 1, N, N) that is the causal
triangle AND "key j is not padding" (j >= start[b]); encoders pass the padding part alone. Our fast
kernels take is_causal but no mask, so such a mask is recognised (compared element for element with
the pattern it claims to be: a mask that differs anywhere is not split) and each sequence b runs on
its unpadded part q[b, :, start:], k[b, :, start:], v[b, :, start:]: top-left causal on that part is
exactly the masked call's answer, and the padded query rows, which see no key, are zeros (torch's
answer for a fully masked row). The split is plain slicing and concatenation, so autograd flows.

Not under torch.compile: the starts are data (they decide the shapes), which would break the graph.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LeftPaddingSplit:
    starts: list            # first real key of each sequence (n_kv: none)
    causal: bool            # the causal triangle is part of the mask
    n_q: int
    n_kv: int

    def pieces(self, query, key, value):
        """(q, k, v, is_causal) of each sequence that has a real key, in batch order."""
        for b, s in enumerate(self.starts):
            if s < self.n_kv:
                q = query[b:b + 1, :, s:] if self.causal else query[b:b + 1]
                yield q, key[b:b + 1, :, s:], value[b:b + 1, :, s:], self.causal

    def join(self, outputs, value):
        """The batch's output from the per-sequence outputs: zeros for query rows that see no key."""
        import torch

        heads, dv = outputs[0].shape[1] if outputs else None, value.shape[-1]
        it, batch = iter(outputs), []
        for s in self.starts:
            if s >= self.n_kv:              # nothing but padding: every row sees no key
                batch.append(value.new_zeros((1, heads, self.n_q, dv)))
                continue
            out = next(it)
            if self.causal and s:           # rows before the first real key see no key
                out = torch.cat([out.new_zeros((1, out.shape[1], s, dv)), out], dim=2)
            batch.append(out)
        return torch.cat(batch, dim=0)


def split_left_padding(attn_mask, query, key, is_causal: bool):
    """A LeftPaddingSplit when attn_mask is exactly left padding (with the causal triangle when it is
    there and Nq == Nk), else None (the caller takes another path)."""
    import torch

    if is_causal or not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
        return None
    if torch.compiler.is_compiling():
        return None
    B, _, n_q, _ = query.shape
    n_kv = key.shape[2]
    if attn_mask.dim() != 4 or attn_mask.shape[1] != 1 or attn_mask.shape[0] not in (1, B) \
            or attn_mask.shape[2] not in (1, n_q) or attn_mask.shape[3] != n_kv or attn_mask.device != query.device:
        return None
    mask = attn_mask[:, 0].expand(B, n_q, n_kv)
    last = mask[:, -1]                                          # the last query row sees every real key
    starts = (~last).to(torch.int32).cumprod(-1).sum(-1)        # leading padding keys per sequence
    keys = torch.arange(n_kv, device=mask.device)
    padding = keys[None, None, :] >= starts[:, None, None]
    if torch.equal(mask, padding.expand(B, n_q, n_kv)):
        causal = False
    elif n_q == n_kv and torch.equal(mask, padding & torch.ones(n_q, n_kv, dtype=torch.bool,
                                                                device=mask.device).tril()):
        causal = True
    else:
        return None
    starts = [int(s) for s in starts.tolist()]
    if all(s >= n_kv for s in starts):
        return None                         # nothing to run: torch's answer for a fully masked batch
    return LeftPaddingSplit(starts=starts, causal=causal, n_q=n_q, n_kv=n_kv)
