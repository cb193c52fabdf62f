"""`sympathy bench attention-decode` without a GPU: its argument errors (argparse usage errors, exit 2,
before any work), its one-line refusal without torch or a GPU (exit 1, no JSON), and the arithmetic
and reference it measures with (FLOPs of a bottom-right causal chunk, the float64 reference, the paged
cache's layout), checked on the CPU."""
import math
import sys

import pytest

from sympathy.bench.core import available_suites
from sympathy.bench.suites import attention_decode as suite
from sympathy.cli import main


def test_the_suite_is_registered_with_the_issues_shapes():
    assert "attention-decode" in available_suites()
    assert (1, 8, 131072) in suite.DEFAULT_SHAPES and len(suite.DEFAULT_SHAPES) == 5
    assert suite.DEFAULT_CHUNK == (512, 32768)


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "1,8"], "argument --shapes: must be B,HKV,N"),
    (["--shapes", "1,0,8192"], "argument --shapes: every one of B,HKV,N must be >= 1"),
    (["--shapes", "1,x,8192"], "argument --shapes: must be B,HKV,N (comma-separated integers)"),
    (["--chunk", "512"], "argument --chunk: must be NQ,N"),
    (["--heads-q", "0"], "argument --heads-q: must be >= 1"),
    (["--head-dim", "96"], "argument --head-dim: invalid choice"),
    (["--timing", "wall"], "argument --timing: invalid choice"),
    (["--page-size", "100"], "--page-size must be a multiple of 64; got 100"),
    (["--heads-q", "12", "--shapes", "1,8,4096"], "--heads-q 12 must be a multiple of every KV head count; 8"),
    (["--shapes", "1,4,64", "--heads-q", "4", "--chunk-kv-heads", "3"], "--heads-q 4 must be a multiple"),
    (["--chunk", "1024,512"], "--chunk NQ,N: the new queries are part of the cache, so NQ <= N"),
])
def test_bad_arguments_are_usage_errors_before_any_work(capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "attention-decode", "--out", str(tmp_path), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: sympathy bench attention-decode" in err and message in err and "Traceback" not in err
    assert not list(tmp_path.rglob("*"))


def test_without_torch_it_says_so_in_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "attention-decode", "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    text = " ".join(out.split())   # one sentence (rich wraps it at the console's width)
    assert out.count("sympathy bench:") == 1 and '".[torch]"' in text and text.endswith("nothing measured")
    assert not list(tmp_path.rglob("*"))


def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "attention-decode", "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert out.count("sympathy bench:") == 1 and "needs a CUDA GPU" in text and "nothing measured" in text
    assert not list(tmp_path.rglob("*"))


def test_chunk_flops_count_the_visible_pairs_of_a_bottom_right_mask():
    for nq, n in ((1, 1), (3, 7), (16, 16), (5, 300)):
        visible = sum(1 for i in range(nq) for j in range(n) if j <= i + n - nq)
        assert suite.chunk_flops(Hq=2, d=8, nq=nq, n=n) == 4 * 2 * 8 * visible
    assert suite.kv_bytes(1, 8, 131072, 128) == 2 * 8 * 131072 * 128 * 2


def test_the_float64_reference_is_sdpa_with_a_bottom_right_mask_and_gqa():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    B, nq, Hq, Hkv, N, d = 2, 5, 6, 2, 11, 8
    q, k, v = (torch.randn(*shape, generator=gen, dtype=torch.float64)
               for shape in ((B, nq, Hq, d), (B, N, Hkv, d), (B, N, Hkv, d)))
    mask = torch.ones(nq, N, dtype=torch.bool).tril(N - nq)
    for causal in (False, True):
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask if causal else None,
            enable_gqa=True).transpose(1, 2)
        got = suite.float64_reference(torch, q, k, v, causal=causal)
        assert got.shape == q.shape and torch.allclose(got, want, atol=1e-12)


def test_the_paged_copy_holds_every_row_where_its_block_table_says():
    torch = pytest.importorskip("torch")
    B, N, Hkv, d, page = 3, 200, 2, 4, 64   # 200 rows: the last page partly filled
    k = torch.arange(B * N * Hkv * d, dtype=torch.float32).view(B, N, Hkv, d)
    pk, pv, table = suite._paged(torch, k, -k, page)
    assert table.dtype == torch.int32 and table.shape == (B, math.ceil(N / page))
    assert sorted(table.flatten().tolist()) == list(range(B * 4))   # every page used once
    for b in range(B):
        for j in range(N):
            assert torch.equal(pk[table[b, j // page], j % page], k[b, j])
            assert torch.equal(pv[table[b, j // page], j % page], -k[b, j])
