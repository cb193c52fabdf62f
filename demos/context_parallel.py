"""Context parallelism: a long-context training step split over processes, attention by ring_attention.

Each rank holds one shard of every sequence (zigzag layout: balanced causal work) and runs the whole
model on it: embeddings, MLPs and norms are per token, RoPE gets each token's true position
(sy.attention.shard_positions), and attention, the one layer that mixes tokens, is
sy.attention.ring_attention, which passes K/V blocks around the ring and dK/dV back. The weights are
replicated; each rank's gradient covers its own tokens, so one all_reduce of the gradients gives the
full-sequence gradient. Activations per rank are 1/W of the whole: that is the point.

    sympathy demo context_parallel                 # 2 processes on this CPU (gloo, the C kernel), a small model;
                                                   # checks the first step against one process
    torchrun --nproc-per-node 8 -m sympathy.demos.context_parallel --seq 262144 --d-model 1024 --layers 4
                                                   # GPUs: NCCL, bf16, a sequence no single GPU's activations hold
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m sympathy.demos.context_parallel --seq 1048576 --d-model 1024 --layers 4     # a cluster
"""
import argparse
import os
import sys
import tempfile
import time

VOCAB, PHRASE = 256, 64


def build_model(args):
    import torch
    from torch import nn

    import sympathy as sy

    hd = args.d_model // args.heads

    def rope(x, pos):   # x (B, H, n, hd), pos (n,): rotate pairs by angle pos / 10000^(2i/hd)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
        ang = pos.to(x.device, torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).to(x.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(args.d_model), nn.RMSNorm(args.d_model)
            self.q = nn.Linear(args.d_model, args.heads * hd, bias=False)
            self.kv = nn.Linear(args.d_model, 2 * args.kv_heads * hd, bias=False)
            self.o = nn.Linear(args.heads * hd, args.d_model, bias=False)
            self.mlp = nn.Sequential(nn.Linear(args.d_model, 4 * args.d_model), nn.GELU(),
                                     nn.Linear(4 * args.d_model, args.d_model))

        def forward(self, x, pos, attention):
            B, n, _ = x.shape
            h = self.norm1(x)
            q = self.q(h).view(B, n, args.heads, hd).transpose(1, 2)
            k, v = self.kv(h).view(B, n, 2, args.kv_heads, hd).permute(2, 0, 3, 1, 4)
            q, k = rope(q, pos), rope(k, pos)
            a = attention(q, k, v.contiguous() if v.stride(-1) != 1 else v)
            x = x + self.o(a.transpose(1, 2).reshape(B, n, args.heads * hd))
            return x + self.mlp(self.norm2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, args.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm, self.head = nn.RMSNorm(args.d_model), nn.Linear(args.d_model, VOCAB, bias=False)

        def forward(self, tokens, pos, attention):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, pos, attention)
            return self.head(self.norm(x))

    def ring(q, k, v):
        return sy.attention.ring_attention(q, k, v, is_causal=True, enable_gqa=True, layout=args.layout)

    def single(q, k, v):   # the unsharded reference: the same kernels on the whole sequence
        return sy.attention.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return Model(), ring, single


def batch(args, step, device):
    """Sequences of one random phrase repeated (an induction task: only attention can learn it), the
    same on every rank (seeded by step); inputs and next-token labels over the FULL sequence."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    phrase = torch.randint(0, VOCAB, (args.batch, PHRASE), generator=g)
    tokens = phrase.repeat(1, args.seq // PHRASE + 2)[:, :args.seq + 1]
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def run(args):
    """One rank's training loop (the process group is up)."""
    import torch
    import torch.distributed as dist

    import sympathy as sy

    rank, W = dist.get_rank(), dist.get_world_size()
    on_gpu = torch.cuda.is_available() and dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    torch.manual_seed(0)                                    # the same initial weights on every rank
    model, ring, single = build_model(args)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pos = sy.attention.shard_positions(args.seq, W, rank, layout=args.layout).to(device)
    shard = lambda t: sy.attention.shard_sequence(t, W, rank, layout=args.layout, dim=1)   # noqa: E731
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else torch.autocast("cpu", enabled=False)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{W} ranks ({'NCCL, ' + torch.cuda.get_device_name() if on_gpu else 'gloo, CPU'}), sequence {args.seq} "
        f"tokens ({args.seq // W} per rank, layout {args.layout}), batch {args.batch}, d_model {args.d_model}, "
        f"{args.layers} layers, {args.heads} query heads over {args.kv_heads} kv heads")
    for step in range(args.steps):
        inputs, labels = batch(args, step, device)
        t = time.perf_counter()
        with autocast:
            logits = model(shard(inputs), pos, ring)
            # Sum over this rank's tokens / all tokens: the ranks' losses add up to the full mean.
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), shard(labels).flatten(),
                                                     reduction="sum") / labels.numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in model.parameters():                        # each rank's share of the full gradient
            dist.all_reduce(p.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)
        if step == 0 and args.check:
            check_step(model, single, inputs, labels, total, device, say)
        opt.step()
        if on_gpu:
            torch.cuda.synchronize()
        peak = f", peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB per GPU" if on_gpu else ""
        say(f"step {step + 1}: loss {total.item():.4f} ({time.perf_counter() - t:.2f} s{peak})")


def check_step(model, single, inputs, labels, total, device, say):
    """Rank 0 runs the same step on the whole sequence in one process: same loss, same gradients."""
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        import copy

        ref = copy.deepcopy(model)
        ref.zero_grad(set_to_none=True)
        pos = torch.arange(inputs.shape[1], device=device)
        loss = torch.nn.functional.cross_entropy(ref(inputs, pos, single).float().flatten(0, 1), labels.flatten())
        loss.backward()
        gerr = max(((p.grad - r.grad).norm() / r.grad.norm()).item()
                   for p, r in zip(model.parameters(), ref.parameters()))
        say(f"one process, whole sequence: loss {loss.item():.4f} (ring {total.item():.4f}); gradients' "
            f"largest relative difference {gerr:.1e}")
    dist.barrier()


def _import_dynamo_first():
    """torch._dynamo keeps references to every process group that exists when it is first imported
    (the first call of any torch custom op imports it, sympathy's among them), and a group referenced
    past destroy_process_group() is torn down during interpreter exit instead, where gloo can abort the
    process (SIGABRT). Imported before init_process_group, it holds none."""
    import torch._dynamo  # noqa: F401


def _spawned(rank, world, store, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    _import_dynamo_first()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    run(args)
    dist.barrier()   # no rank tears its connections down while a peer still uses them
    dist.destroy_process_group()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2, help="processes to spawn when not under torchrun (CPU, gloo)")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (the whole, over all ranks)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                   help="compare the first step with one process on the whole sequence (default: when spawned)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print('this demo needs torch: pip install "sympathy[torch]"')
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:     # under torchrun: this process is one rank
        args.check = bool(args.check)
        _import_dynamo_first()
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        run(args)
        dist.barrier()
        dist.destroy_process_group()
        return
    args.check = True if args.check is None else args.check
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")            # this machine only
    store = os.path.join(tempfile.mkdtemp(), "store")
    torch.multiprocessing.spawn(_spawned, args=(args.nproc, store, args), nprocs=args.nproc)


if __name__ == "__main__":
    main(sys.argv[1:])
