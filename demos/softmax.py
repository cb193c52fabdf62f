"""Seed 000's softmax programs as written, every printed value beside the article's, then our online softmax.

  1. `traditional_softmax(matrix, column_index)` on the article's 2x7 matrix, column 2 (0-based).
  2. `flash_attention_softmax(..., block_sizes=[1, 1])` and the article's printed steps: the matrix,
     the column, the blocks, each block's max, the global max, the softmax [0.8176, 0.1824].
  3. Ours, truly online on the same column: one pass keeping (m, l), rescaled by alpha when a block
     brings a larger max; the article's version finds the global max first (two passes).
  4. What the [1, 1] example hides: the article's slicing with unequal blocks, and numerical safety.
The article's programs use torch; without it they run as a NumPy transcription, same values.
"""
from __future__ import annotations

import contextlib
import io
import math

import numpy as np

# What the article's two programs print (its `# result` comments), line by line.
ARTICLE_TRADITIONAL_PRINTED = ["Softmax for column 2 : tensor([0.8176, 0.1824])"]
ARTICLE_STEPS_PRINTED = [
    "Matrix:",
    "tensor([[-0.8000, -5.0000,  5.0000,  1.5000,  3.4000, -2.3000,  2.5000],",
    "        [-0.2000,  2.3000,  3.5000,  1.8000,  0.9000, -1.5000,  0.5000]])",
    "",
    "Column:",
    "tensor([5.0000, 3.5000])",
    "",
    "Blocks after splitting:",
    "(tensor([5.]), tensor([3.5000]))",
    "",
    "Max values within each block:",
    "[tensor(5.), tensor(3.5000)]",
    "",
    "Global maximum value across all blocks:",
    "tensor(5.)",
    "",
    "Softmax for column 2 : tensor([0.8176, 0.1824])",
]


def _fmt(x: float) -> str:
    return "-inf" if x == -math.inf else f"{x:.4f}"


# ---- the article's code, as written (torch) ------------------------------------------------------------
def traditional_softmax(matrix, column_index):
    import torch.nn.functional as F

    column = matrix[:, column_index]
    softmax_column = F.softmax(column, dim=0)
    return softmax_column


def flash_attention_softmax(matrix, column_index, block_sizes):
    import torch

    # Step 1: Extract the column vector
    column = matrix[:, column_index]
    # Step 2: Compute the total size of the concatenated vector
    total_size = column.size(0)  # noqa: F841 (the article computes it and never uses it)
    # Step 3: Split the concatenated vector into blocks
    blocks = torch.split(column, block_sizes)
    # Step 4: Compute the maximum value within each block (m(x))
    max_values = [torch.max(block) for block in blocks]
    # Step 5: Compute the global maximum value across all blocks
    global_max = torch.max(torch.stack(max_values))
    numerator = torch.zeros_like(column)
    for i, block in enumerate(blocks):
        # Step 6: Compute numerator for each block (f(x))
        numerator[i * block_sizes[i]:(i + 1) * block_sizes[i]] = torch.exp(block - global_max)
    # Step 7: Compute the sum of exponentials (l(x))
    denominator = torch.sum(numerator)
    # Step 8: Compute softmax probabilities for each block
    softmax_probabilities = numerator / denominator
    return softmax_probabilities


def article_usage_torch() -> tuple[list[str], list[str]]:
    """The article's two "Example usage" blocks, run; returns (traditional lines, steps lines).
    The article's last line ends in a pasted fragment, `...)int("Softmax for column", ...)`, a
    SyntaxError as printed; it is the same print once more and is left out."""
    import torch

    out_a, out_b = io.StringIO(), io.StringIO()
    matrix = torch.tensor([[-0.8, -5.0, 5.0, 1.5, 3.4, -2.3, 2.5],
                           [-0.2, 2.3, 3.5, 1.8, 0.9, -1.5, 0.5]], dtype=torch.float32)
    column_index = 2
    with contextlib.redirect_stdout(out_a):
        softmax_result = traditional_softmax(matrix, column_index)
        print("Softmax for column", column_index, ":", softmax_result)
    block_sizes = [1, 1]  # Splitting the column into individual elements
    with contextlib.redirect_stdout(out_b):
        print("Matrix:")
        print(matrix)
        print("\nColumn:")
        column = matrix[:, column_index]
        print(column)
        print("\nBlocks after splitting:")
        blocks = torch.split(column, block_sizes)
        print(blocks)
        print("\nMax values within each block:")
        max_values = [torch.max(block) for block in blocks]
        print(max_values)
        print("\nGlobal maximum value across all blocks:")
        global_max = torch.max(torch.stack(max_values))
        print(global_max)
        softmax_result = flash_attention_softmax(matrix, column_index, block_sizes)
        print("\nSoftmax for column", column_index, ":", softmax_result)
    return out_a.getvalue().splitlines(), out_b.getvalue().splitlines()


# ---- the same program in NumPy (no torch needed), step for step ---------------------------------------
def article_steps_numpy(matrix: np.ndarray, column_index: int, block_sizes) -> dict:
    """The article's flash_attention_softmax transcribed to NumPy, float32 like its tensor, with the
    article's slicing `[i * block_sizes[i]:(i + 1) * block_sizes[i]]` kept as written."""
    matrix = np.asarray(matrix, np.float32)
    column = matrix[:, column_index]
    blocks = np.split(column, np.cumsum(block_sizes)[:-1])
    max_values = [block.max() for block in blocks]
    global_max = np.max(np.stack(max_values))
    numerator = np.zeros_like(column)
    for i, block in enumerate(blocks):
        numerator[i * block_sizes[i]:(i + 1) * block_sizes[i]] = np.exp(block - global_max)
    return {"column": column, "blocks": blocks, "max_values": max_values, "global_max": global_max,
            "softmax": numerator / numerator.sum()}


def _side_by_side(console, title: str, article: list[str], ours: list[str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("the article prints")
    t.add_column("we print")
    t.add_column("same")
    for i in range(max(len(article), len(ours))):
        a = article[i] if i < len(article) else ""
        b = ours[i] if i < len(ours) else ""
        t.add_row(escape(a), escape(b), "yes" if a == b else "[red]NO[/red]")
    console.print(t)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import sympathy as sy
    from sympathy.softmax import ARTICLE_BLOCK_SIZES, ARTICLE_COLUMN, ARTICLE_MATRIX, online_softmax_steps

    parser = argparse.ArgumentParser(prog="sympathy demo softmax", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    console = Console()
    column = ARTICLE_MATRIX[:, ARTICLE_COLUMN]
    blocks = list(ARTICLE_BLOCK_SIZES)

    # 1 and 2: the article's programs, their printed output next to ours
    try:
        traditional, steps = article_usage_torch()
        how = "the article's torch code, run as written"
    except ImportError:
        r = article_steps_numpy(ARTICLE_MATRIX, ARTICLE_COLUMN, blocks)
        probs = np.round(r["softmax"], 4).tolist()
        traditional = [f"Softmax for column {ARTICLE_COLUMN} : {probs} (NumPy; torch not installed)"]
        steps = ["Matrix:", str(ARTICLE_MATRIX), "", "Column:", str(r["column"]), "", "Blocks after splitting:",
                 str(r["blocks"]), "", "Max values within each block:", str(r["max_values"]), "",
                 "Global maximum value across all blocks:", str(r["global_max"]), "",
                 f"Softmax for column {ARTICLE_COLUMN} : {probs}"]
        how = "a NumPy transcription (torch is not installed), so the formatting differs"
    console.rule("1. Seed 000: traditional_softmax(matrix, column_index=2)")
    _side_by_side(console, f"{how}", ARTICLE_TRADITIONAL_PRINTED, traditional)
    console.rule("2. Seed 000: flash_attention_softmax(matrix, 2, block_sizes=[1, 1]), each printed step")
    _side_by_side(console, f"{how}", ARTICLE_STEPS_PRINTED, steps)

    # 3. ours, online: one pass with the rescale
    console.rule("3. Ours: sy.online_softmax on the same column, truly online")
    trace, online = online_softmax_steps(column, blocks)
    t = Table(title="running statistics: m (max so far), l (sum of e^(x - m)); no global max is known in advance",
              title_justify="left")
    for col in ("block", "values", "m_old", "m_new", "alpha = e^(m_old - m_new)", "l_old",
                "l_new = alpha·l_old + Σe^(x - m_new)"):
        t.add_column(col, justify="right")
    for s in trace:
        t.add_row(f"{s.block}", ", ".join(f"{x:g}" for x in s.values), _fmt(s.m_old), _fmt(s.m_new),
                  _fmt(s.alpha), _fmt(s.l_old), _fmt(s.l_new))
    console.print(t)
    console.print(f"sy.online_softmax(column, [1, 1]) = [bold]{np.round(online, 4).tolist()}[/bold]; "
                  f"sy.softmax = {np.round(sy.softmax(column), 4).tolist()}; the article: [0.8176, 0.1824]")
    console.print("The article computes every block's max and the global max before any exponential (two "
                  "passes over the blocks); the online softmax needs one: its final m and l equal the "
                  "article's global max (5.0) and denominator e^0 + e^-1.5 = "
                  f"{1 + math.exp(-1.5):.4f}.")
    whole = sy.online_softmax(ARTICLE_MATRIX, 1, axis=0)
    console.print(escape(f"Every column of the article's matrix, online, blocks of 1: "
                         f"{np.round(whole, 4).tolist()}"))

    # 4. what the example hides
    console.rule("4. What blocks of [1, 1] hide")
    row = ARTICLE_MATRIX[0]
    wrong = article_steps_numpy(ARTICLE_MATRIX.T, 0, [4, 3])["softmax"].astype(np.float64)
    console.print(escape(f"The article's slicing `numerator[i * block_sizes[i]:(i + 1) * block_sizes[i]]` is right "
                         f"only for equal blocks. Row 0 of its matrix, block_sizes [4, 3]:\n"
                         f"  article's program: {np.round(wrong, 4).tolist()} (sums to {wrong.sum():.4f})\n"
                         f"  sy.online_softmax: {np.round(sy.online_softmax(row, [4, 3]), 4).tolist()}"))
    cases = {"±1e4": np.array([1e4, -1e4, 1e4 - 1]), "masked (-inf)": np.array([0.5, -np.inf, 2.0]),
             "fully masked": np.array([-np.inf, -np.inf, -np.inf]), "empty": np.array([])}
    t = Table(title="numerical safety", title_justify="left")
    for heading in ("input", "naive e^x / Σe^x", "sy.online_softmax(x, 1)"):
        t.add_column(heading)
    for name, x in cases.items():
        with np.errstate(all="ignore"):
            naive = np.exp(x) / np.exp(x).sum()
        t.add_row(escape(f"{name}: {x.tolist()}"), escape(str(np.round(naive, 4).tolist())),
                  escape(str(np.round(sy.online_softmax(x, 1), 4).tolist())))
    console.print(t)
    console.print("Fully masked rows give zeros (FlashAttention's choice; torch's SDPA gives NaN there). "
                  "The slides' example (seed 001) is `sympathy demo slides`.")


if __name__ == "__main__":
    main()
