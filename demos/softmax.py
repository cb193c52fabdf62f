"""Softmax and the online softmax on the article's examples, every intermediate printed."""
from __future__ import annotations

import math


def _fmt(x: float) -> str:
    if x == -math.inf:
        return "-inf"
    return f"{x:.4f}"


def main(argv: list[str] | None = None) -> None:
    import argparse

    import numpy as np
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import sympathy as sy
    from sympathy.softmax import (ARTICLE_COLUMN, ARTICLE_MATRIX, SLIDE_K, SLIDE_Q, SLIDE_V,
                                  online_attention_steps, online_softmax_steps)

    parser = argparse.ArgumentParser(prog="sympathy demo softmax", description=__doc__)
    parser.parse_args(argv)
    console = Console()

    # 1. the article's matrix, softmax down each column
    console.rule("1. Column softmax of the article's 2×7 matrix")
    probs = sy.softmax(ARTICLE_MATRIX, axis=0)
    t = Table(title="scores (top) and their column softmax (bottom)", title_justify="left")
    t.add_column("row")
    for j in range(ARTICLE_MATRIX.shape[1]):
        t.add_column(f"col {j + 1}" + (" ←" if j == ARTICLE_COLUMN else ""), justify="right")
    for i, row in enumerate(ARTICLE_MATRIX):
        t.add_row(f"x[{i}]", *(f"{x:g}" for x in row))
    for i, row in enumerate(probs):
        t.add_row(f"softmax[{i}]", *(f"{p:.4f}" for p in row))
    console.print(t)
    column = ARTICLE_MATRIX[:, ARTICLE_COLUMN]
    console.print(f"column {ARTICLE_COLUMN + 1}: softmax({column.tolist()}) = "
                  f"[bold]{np.round(probs[:, ARTICLE_COLUMN], 4).tolist()}[/bold]")

    # 2. the same column, one block of one element at a time
    console.rule("2. The same column, online, block sizes [1, 1]")
    steps, online = online_softmax_steps(column, [1, 1])
    t = Table(title="running statistics: m (max so far), l (sum of e^(x - m))", title_justify="left")
    for col in ("block", "values", "m_old", "m_new", "alpha = e^(m_old - m_new)", "l_old", "l_new = alpha·l_old + Σe^(x - m_new)"):
        t.add_column(col, justify="right")
    for s in steps:
        t.add_row(f"{s.block}", ", ".join(f"{x:g}" for x in s.values), _fmt(s.m_old), _fmt(s.m_new),
                  _fmt(s.alpha), _fmt(s.l_old), _fmt(s.l_new))
    console.print(t)
    console.print(f"second pass: p = e^(x - m) / l = [bold]{np.round(online, 4).tolist()}[/bold] "
                  f"(one-shot: {np.round(probs[:, ARTICLE_COLUMN], 4).tolist()})")

    # 3. the slide's denominator problem: attention, one key at a time, with the output rescaled
    console.rule("3. The slide: Q=[1], K=[1,2,3], V=[2,4,8], one block at a time")
    steps, out = online_attention_steps(SLIDE_Q, SLIDE_K, SLIDE_V, 1)
    t = Table(title="FlashAttention's running (m_i, l_i, acc): acc is rescaled by the same alpha as l_i",
              title_justify="left")
    for col in ("block", "s = q·k", "m_old", "m_new", "alpha", "p = e^(s - m_new)", "l_old", "l_new",
                "acc_old", "acc_new = alpha·acc + p·v"):
        t.add_column(col, justify="right")
    for s in steps:
        t.add_row(f"{s.block}", ", ".join(f"{x:g}" for x in s.scores), _fmt(s.m_old), _fmt(s.m_new),
                  _fmt(s.alpha), ", ".join(_fmt(p) for p in s.p), _fmt(s.l_old), _fmt(s.l_new),
                  _fmt(s.acc_old[0]), _fmt(s.acc_new[0]))
    console.print(t)
    e1, e2, e3 = math.exp(1), math.exp(2), math.exp(3)
    exact = (2 * e1 + 4 * e2 + 8 * e3) / (e1 + e2 + e3)
    console.print(f"finalize: O = acc / l = {steps[-1].acc_new[0]:.6f} / {steps[-1].l_new:.6f} = "
                  f"[bold]{out[0]:.6f}[/bold]")
    console.print(f"exact:    (2e¹ + 4e² + 8e³) / (e¹ + e² + e³) = {exact:.6f}")
    q, k, v = SLIDE_Q.reshape(1, 1, 1, 1), SLIDE_K.reshape(1, 1, 3, 1), SLIDE_V.reshape(1, 1, 3, 1)
    cpu = sy.attention.cpu(*(x.astype(np.float32) for x in (q, k, v)), scale=1.0, block_k=1)
    console.print(f"the C kernel (float32, block_k=1): {cpu[0, 0, 0, 0]:.6f}")

    # 4. numerical safety
    console.rule("4. Numerically safe")
    cases = {
        "±1e4": np.array([1e4, -1e4, 1e4 - 1]),
        "masked (-inf)": np.array([0.5, -np.inf, 2.0]),
        "fully masked": np.array([-np.inf, -np.inf, -np.inf]),
    }
    t = Table(title_justify="left")
    t.add_column("input")
    t.add_column("naive e^x / Σe^x")
    t.add_column("sy.online_softmax(x, 1)")
    for name, x in cases.items():
        with np.errstate(all="ignore"):
            naive = np.exp(x) / np.exp(x).sum()
        t.add_row(escape(f"{name}: {x.tolist()}"), escape(str(np.round(naive, 4).tolist())),
                  escape(str(np.round(sy.online_softmax(x, 1), 4).tolist())))
    console.print(t)
    console.print("Fully masked rows give zeros (FlashAttention's choice; torch's SDPA gives NaN there).")


if __name__ == "__main__":
    main()
