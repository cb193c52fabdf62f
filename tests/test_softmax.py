"""sy.softmax and sy.online_softmax: the article's numbers, agreement with each other, the
numerical policy (±1e4, -inf masking, fully masked rows, NaN), and the slide's attention example."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sympathy as sy
from sympathy.softmax import (ARTICLE_BLOCK_SIZES, ARTICLE_COLUMN, ARTICLE_COLUMN_SOFTMAX, ARTICLE_MATRIX,
                              SLIDE_K, SLIDE_Q,
                              SLIDE_V, online_attention_steps, online_softmax_steps, rescale)


# ---- the article (seed 000) ----------------------------------------------------------------------
def test_article_matrix_is_the_articles():
    assert ARTICLE_MATRIX.tolist() == [[-0.8, -5.0, 5.0, 1.5, 3.4, -2.3, 2.5],
                                       [-0.2, 2.3, 3.5, 1.8, 0.9, -1.5, 0.5]]
    assert ARTICLE_COLUMN == 2 and ARTICLE_MATRIX[:, ARTICLE_COLUMN].tolist() == [5.0, 3.5]


def test_article_column_softmax_to_four_digits():
    column = sy.softmax(ARTICLE_MATRIX, axis=0)[:, ARTICLE_COLUMN]
    assert np.round(column, 4).tolist() == list(ARTICLE_COLUMN_SOFTMAX) == [0.8176, 0.1824]


def test_article_column_online_with_blocks_of_one():
    column = ARTICLE_MATRIX[:, ARTICLE_COLUMN]
    online = sy.online_softmax(column, list(ARTICLE_BLOCK_SIZES))
    assert np.round(online, 4).tolist() == list(ARTICLE_COLUMN_SOFTMAX)
    # the whole matrix column-wise, block by block, agrees with the one-shot softmax
    np.testing.assert_allclose(sy.online_softmax(ARTICLE_MATRIX, [1, 1], axis=0),
                               sy.softmax(ARTICLE_MATRIX, axis=0), rtol=1e-15)


def test_article_column_trace_matches_its_block_maxima():
    steps, result = online_softmax_steps(ARTICLE_MATRIX[:, ARTICLE_COLUMN], [1, 1])
    first, second = steps
    # the article's blocks (5.) and (3.5), their maxima 5.0 and 3.5, global max 5.0
    assert first.values == (5.0,) and second.values == (3.5,)
    assert first.m_old == -math.inf and first.m_new == 5.0 and first.alpha == 0.0 and first.l_new == 1.0
    # the second block (3.5) is below the running max: alpha = 1, l grows by e^(3.5 - 5)
    assert second.m_new == 5.0 and second.alpha == 1.0
    assert second.l_new == pytest.approx(1 + math.exp(-1.5), rel=1e-15)
    assert np.round(result, 4).tolist() == list(ARTICLE_COLUMN_SOFTMAX)


def test_article_program_numpy_transcription_reproduces_every_step():
    from sympathy.demos.softmax import article_steps_numpy

    r = article_steps_numpy(ARTICLE_MATRIX, ARTICLE_COLUMN, list(ARTICLE_BLOCK_SIZES))
    assert r["column"].tolist() == [5.0, 3.5]
    assert [b.tolist() for b in r["blocks"]] == [[5.0], [3.5]]
    assert [float(m) for m in r["max_values"]] == [5.0, 3.5]
    assert float(r["global_max"]) == 5.0
    assert np.round(r["softmax"].astype(np.float64), 4).tolist() == [0.8176, 0.1824]


def test_article_programs_print_what_the_article_prints():
    pytest.importorskip("torch")
    from sympathy.demos.softmax import (ARTICLE_STEPS_PRINTED, ARTICLE_TRADITIONAL_PRINTED,
                                        article_usage_torch)

    traditional, steps = article_usage_torch()
    assert traditional == ARTICLE_TRADITIONAL_PRINTED
    assert steps == ARTICLE_STEPS_PRINTED


def test_article_slicing_is_wrong_for_unequal_blocks_and_ours_is_not():
    from sympathy.demos.softmax import article_steps_numpy

    row = ARTICLE_MATRIX[0]
    theirs = article_steps_numpy(ARTICLE_MATRIX.T, 0, [4, 3])["softmax"]
    assert theirs[-1] == 0.0 and not np.allclose(theirs, sy.softmax(row), atol=1e-3)
    np.testing.assert_allclose(sy.online_softmax(row, [4, 3]), sy.softmax(row), rtol=1e-15)


def test_slide_denominator_problem_one_block_at_a_time():
    e1, e2, e3 = math.exp(1), math.exp(2), math.exp(3)
    exact = (2 * e1 + 4 * e2 + 8 * e3) / (e1 + e2 + e3)
    steps, out = online_attention_steps(SLIDE_Q, SLIDE_K, SLIDE_V, 1)
    assert out.shape == (1,)
    assert out[0] == pytest.approx(exact, rel=1e-14)
    assert round(out[0], 4) == round(exact, 4)
    # every intermediate is the textbook value: m grows 1 → 2 → 3 and each step rescales by e^-1
    assert [s.m_new for s in steps] == [1.0, 2.0, 3.0]
    assert [s.alpha for s in steps[1:]] == pytest.approx([math.exp(-1)] * 2, rel=1e-15)
    assert steps[-1].l_new == pytest.approx((e1 + e2 + e3) / e3, rel=1e-15)
    assert steps[-1].acc_new[0] == pytest.approx((2 * e1 + 4 * e2 + 8 * e3) / e3, rel=1e-15)
    # and the same through every attention path
    q, k, v = SLIDE_Q.reshape(1, 1, 1, 1), SLIDE_K.reshape(1, 1, 3, 1), SLIDE_V.reshape(1, 1, 3, 1)
    assert sy.attention.reference(q, k, v, scale=1.0)[0, 0, 0, 0] == pytest.approx(exact, rel=1e-14)
    assert sy.attention.tiled(q, k, v, scale=1.0, block_k=1)[0, 0, 0, 0] == pytest.approx(exact, rel=1e-14)
    got = sy.attention.cpu(*(x.astype(np.float32) for x in (q, k, v)), scale=1.0, block_k=1)
    assert got[0, 0, 0, 0] == pytest.approx(exact, rel=1e-6)


# ---- agreement and numerical safety ---------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 40), block=st.integers(1, 45),
       magnitude=st.sampled_from([1e-3, 1.0, 30.0, 1e4]), seed=st.integers(0, 2**31))
def test_online_matches_softmax(rows, n, block, magnitude, seed):
    x = np.random.default_rng(seed).standard_normal((rows, n)) * magnitude
    expected = sy.softmax(x)
    np.testing.assert_allclose(sy.online_softmax(x, block), expected, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(expected.sum(axis=-1), 1.0, rtol=1e-12)


def test_large_inputs_do_not_overflow():
    x = np.array([1e4, -1e4, 1e4 - 1.0, 0.0])
    for got in (sy.softmax(x), sy.online_softmax(x, 1), sy.online_softmax(x, [3, 1])):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, [1 / (1 + math.exp(-1)), 0.0, math.exp(-1) / (1 + math.exp(-1)), 0.0],
                                   rtol=1e-14)


def test_masked_entries_get_zero():
    x = np.array([[0.5, -np.inf, 2.0, -np.inf]])
    expected = np.array([[math.exp(0.5), 0, math.exp(2.0), 0]]) / (math.exp(0.5) + math.exp(2.0))
    for got in (sy.softmax(x), sy.online_softmax(x, 1), sy.online_softmax(x, [2, 2])):
        np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_fully_masked_row_gives_zeros_not_nan():
    x = np.array([[-np.inf] * 3, [0.0, 1.0, -np.inf]])
    for got in (sy.softmax(x), sy.online_softmax(x, 1), sy.online_softmax(x, 2)):
        assert np.all(got[0] == 0.0)
        assert got[1].sum() == pytest.approx(1.0)
    # the -inf guard inside the named step: no NaN even when the very first block is all masked
    m, l, p, alpha = rescale(np.array([-np.inf]), np.array([0.0]), np.array([[-np.inf, -np.inf]]))
    assert m[0] == -np.inf and l[0] == 0.0 and np.all(p == 0.0) and alpha[0] == 0.0


def test_nan_propagates_to_its_row_only():
    x = np.array([[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]])
    for got in (sy.softmax(x), sy.online_softmax(x, 1)):
        assert np.isnan(got[0]).all()
        assert np.isfinite(got[1]).all()


def test_float32_stays_float32_and_axis_works():
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    assert sy.softmax(x).dtype == np.float32
    assert sy.online_softmax(x, 2, axis=0).dtype == np.float32
    np.testing.assert_allclose(sy.online_softmax(x, 2, axis=0), sy.softmax(x, axis=0), rtol=1e-6)


@pytest.mark.parametrize("shape, axis", [((0,), 0), ((2, 0), -1), ((0, 3), 0), ((0, 3), 1), ((2, 0, 4), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_inputs_give_empty_outputs_as_torch_does(shape, axis, dtype):
    x = np.empty(shape, dtype=dtype)
    got = sy.softmax(x, axis=axis)
    assert got.shape == shape and got.dtype == dtype
    block = [] if shape[axis] == 0 else 1
    got = sy.online_softmax(x, block, axis=axis)
    assert got.shape == shape and got.dtype == dtype
    assert sy.online_softmax(x, 3, axis=axis).shape == shape   # an int block size fits any length
    torch = pytest.importorskip("torch")
    assert tuple(torch.softmax(torch.from_numpy(x), dim=axis).shape) == got.shape


def test_empty_integer_list_input():
    assert sy.softmax([]).shape == (0,) and sy.online_softmax([], 1).shape == (0,)


@pytest.mark.parametrize("call, error, match", [
    (lambda: sy.online_softmax(np.empty(0), 0), ValueError, "block_size must be >= 1"),
    (lambda: sy.online_softmax(np.ones(2), []), ValueError, "ints >= 1"),
    (lambda: sy.softmax(np.array(["a"])), TypeError, "real numbers"),
    (lambda: sy.softmax(np.float64(1.0)), ValueError, "at least one dimension"),
    (lambda: sy.softmax(np.ones(3), axis=1), ValueError, "axis must be in"),
    (lambda: sy.online_softmax(np.ones(3), 0), ValueError, "block_size must be >= 1"),
    (lambda: sy.online_softmax(np.ones(3), [1, 1]), ValueError, "add up to 2"),
    (lambda: sy.online_softmax(np.ones(3), "2"), TypeError, "block_size"),
    (lambda: sy.online_softmax(np.ones(3), [1, 0, 2]), ValueError, "ints >= 1"),
])
def test_bad_input_raises(call, error, match):
    with pytest.raises(error, match=match):
        call()
