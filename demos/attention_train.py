"""Train a small causal transformer with sympathy's CUDA attention and with torch SDPA: same loss curve.

Two runs from one seed on one stream of synthetic data: a 2-layer causal transformer (d_model 256,
4 heads of 64, sequence 256) learns to continue sequences made of a random 32-token phrase repeated
eight times (an induction task: only attention can solve it). Run A calls
sy.attention.scaled_dot_product_attention (forward and backward on cuda_src/), run B torch's SDPA;
bf16 autocast in both. The curves agree to bf16 noise. Needs a CUDA GPU.
"""
import argparse
import math
from pathlib import Path

VOCAB, PHRASE, SEQ, D_MODEL, HEADS, LAYERS = 64, 32, 256, 256, 4, 2


def build_model(attention):
    """A pre-norm causal transformer whose attention is `attention(q, k, v)` on (B, H, N, d)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.qkv, self.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x):
            B, N, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, HEADS, D_MODEL // HEADS).permute(2, 0, 3, 1, 4)
            x = x + self.proj(attention(q, k, v).transpose(1, 2).reshape(B, N, D_MODEL))
            return x + self.mlp(self.norm2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Parameter(torch.zeros(SEQ, D_MODEL))
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.head = nn.Linear(D_MODEL, VOCAB)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return Model()


def batches(steps: int, batch: int, seed: int):
    """Each sequence: one random phrase of PHRASE tokens, repeated to SEQ tokens."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(steps):
        phrase = torch.randint(0, VOCAB, (batch, PHRASE), device="cuda", generator=gen)
        yield phrase.repeat(1, SEQ // PHRASE + 1)[:, :SEQ + 1]


def train(attention, steps: int, batch: int = 16, seed: int = 0) -> list:
    """The per-step training loss of a fresh model (seeded) using `attention`."""
    import torch

    torch.manual_seed(seed)
    model = build_model(attention).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for tokens in batches(steps, batch, seed):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_both(steps: int = 300, seed: int = 0) -> dict:
    """{"sympathy": losses, "torch-sdpa": losses} from the same seed and data."""
    import torch

    import sympathy as sy

    def ours(q, k, v):
        return sy.attention.scaled_dot_product_attention(q, k, v, is_causal=True)

    def theirs(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {"sympathy": train(ours, steps, seed=seed), "torch-sdpa": train(theirs, steps, seed=seed)}


def plot(curves: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=name, linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.set_yscale("log")
    ax.set_title(f"{LAYERS}-layer causal transformer, d_model {D_MODEL}, {HEADS} heads, seq {SEQ} (bf16 autocast)")
    ax.legend()
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: "list[str] | None" = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("sympathy-demo-output/attention_train.png"))
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("this demo needs torch: pip install sympathy[torch]")
        return
    if not torch.cuda.is_available():
        print("this demo needs a CUDA GPU (torch.cuda.is_available() is False): nothing to run")
        return
    from rich.console import Console
    from rich.table import Table

    curves = train_both(args.steps)
    table = Table(title="training loss, same seed and data")
    table.add_column("step", justify="right")
    for name in curves:
        table.add_column(name, justify="right")
    table.add_column("rel. diff", justify="right")
    ours, theirs = curves["sympathy"], curves["torch-sdpa"]
    for step in sorted({1, 10, 50, 100, 200, args.steps} & set(range(1, args.steps + 1))):
        a, b = ours[step - 1], theirs[step - 1]
        table.add_row(str(step), f"{a:.4f}", f"{b:.4f}", f"{abs(a - b) / b:.1%}" if math.isfinite(b) and b else "-")
    Console().print(table)
    print(f"plot: {plot(curves, args.out)}")


if __name__ == "__main__":
    main()
