import math

import numpy as np
import pytest

from poa_mc.stats import sketch


def _exact(x, q):
    return np.quantile(x, q, axis=1, method="inverted_cdf")  # nearest rank


@pytest.mark.parametrize("n", [1, 2, 5, 99, 1000, 2001])
def test_quantiles_are_within_the_documented_resolution_of_the_nearest_rank(n):
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.lognormal(3.0, 2.0, (20, n)), rng.exponential(50.0, (20, n))])
    x[:5] = np.ceil(x[:5])  # ties
    h = sketch.histograms(x)
    assert h.shape == (40, sketch.NBINS) and (h.sum(axis=1) == n).all()
    for q in (0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0):
        got = sketch.quantile(h, q, x.min(axis=1), x.max(axis=1))
        exact = _exact(x, q)
        assert np.all(np.abs(got / exact - 1) <= sketch.RESOLUTION), q
    # the extremes are exact (clipped to the row's min and max)
    np.testing.assert_array_equal(sketch.quantile(h, 0.0, x.min(1), x.max(1)), x.min(1))
    np.testing.assert_array_equal(sketch.quantile(h, 1.0, x.min(1), x.max(1)), x.max(1))


def test_resolution_is_at_most_half_a_percent():
    assert sketch.RESOLUTION <= 0.005
    # a bin's middle is within RESOLUTION of both of its edges
    i = np.arange(1, sketch.NBINS - 1)
    lo = sketch.LO_MS * sketch.GAMMA ** (i - 1.0)
    hi = lo * sketch.GAMMA
    mid = sketch.bin_value(i)
    assert np.all(mid / lo - 1 <= sketch.RESOLUTION + 1e-12) and np.all(1 - mid / hi <= sketch.RESOLUTION + 1e-12)
    assert (sketch.bin_of(lo * (1 + 1e-9)) == i).all()


def test_out_of_range_values_masks_and_empty_rows():
    x = np.array([[0.0, 1e-6, 5.0, 1e9], [3.0, 3.0, 3.0, 3.0]])
    h = sketch.histograms(x)
    assert h[0, 0] == 2 and h[0, -1] == 1  # below LO_MS (zero included), above HI_MS
    lo, hi = x.min(1), x.max(1)
    assert sketch.quantile(h, 0.25, lo, hi)[0] == 0.0  # the underflow bin stands for 0, clipped to min
    assert sketch.quantile(h, 1.0, lo, hi)[0] == 1e9
    assert sketch.quantile(h, 0.5, lo, hi)[1] == 3.0  # one value: clipped to exactly it
    keep = np.array([[False] * 4, [True, True, False, False]])
    hk = sketch.histograms(x, keep)
    assert hk.sum(axis=1).tolist() == [0, 2]
    got = sketch.quantile(hk, 0.5, np.array([np.inf, 3.0]), np.array([-np.inf, 3.0]))
    assert math.isnan(got[0]) and got[1] == 3.0


def test_the_rank_search_finds_the_bin_a_scan_of_each_row_finds():
    """quantile's one search over all rows lands each rank in the bin where counting the row's
    running totals below it does (rows of different sizes, empty rows, ties at bin edges)."""
    rng = np.random.default_rng(3)
    h = np.zeros((30, sketch.NBINS), dtype=np.int32)
    for r in range(25):
        bins = rng.integers(0, sketch.NBINS, size=int(rng.integers(1, 400)))
        np.add.at(h[r], bins, 1)
    h[25:28, 7] = [1, 5, 1000]  # one bin only
    lo, hi = np.zeros(30), np.full(30, np.inf)
    for q in (0.01, 0.3, 0.5, 0.99):
        n = h.sum(axis=1)
        k = np.maximum(np.ceil(q * n - 1e-9 * n), 1)
        scanned = (np.cumsum(h, axis=1) < k[:, None]).sum(axis=1)
        want = np.clip(sketch.bin_value(np.minimum(scanned, sketch.NBINS - 1)), lo, hi)
        want = np.where(k <= 1, lo, np.where(k >= n, hi, want))
        want = np.where(n > 0, want, np.nan)
        np.testing.assert_array_equal(sketch.quantile(h, q, lo, hi), want)


def _batches(seed: int):
    """Whole histograms of 23 rows in batches of 7, 0, 9 and 7 rows; the second-to-last batch's
    values lie apart from the others' (a span of its own), the last batch is empty."""
    rng = np.random.default_rng(seed)
    x = rng.lognormal(5.0, 0.3, (23, 50))
    x[7:16] *= 40.0
    h = sketch.histograms(x)
    h[16:] = 0
    return x, h, (0, 7, 7, 16, 23)


def test_spans_joined_over_their_union_equal_the_whole_rows():
    x, h, cut = _batches(1)
    parts = []
    for a, b in zip(cut, cut[1:]):
        lo, counts = sketch.span(h[a:b])
        assert counts.shape[1] < sketch.NBINS and len(set(lo.tolist())) <= 1
        parts.append({"n": np.arange(a, b), "hist_t_lo": lo, "hist_t": counts})
    joined = sketch.join_rows(parts)
    assert list(joined) == ["n", "hist_t_lo", "hist_t"] and joined["n"].tolist() == list(range(23))
    np.testing.assert_array_equal(sketch.whole(joined["hist_t"], joined["hist_t_lo"]), h)
    # the union of the filled parts' spans, no wider: the empty batch adds no bins
    used = np.flatnonzero(h.any(axis=0))
    assert (joined["hist_t_lo"] == used[0]).all() and joined["hist_t"].shape == (23, used[-1] - used[0] + 1)
    # quantiles read from a span, given its first bin, are the whole rows' (to the bit)
    for q in (0.0, 0.5, 0.99, 1.0):
        got = sketch.quantile(joined["hist_t"], q, x.min(1), x.max(1), joined["hist_t_lo"])
        np.testing.assert_array_equal(got, sketch.quantile(h, q, x.min(1), x.max(1)))


def test_rows_of_several_spans_stack_over_their_union():
    _, h, _ = _batches(2)
    firsts, rows = zip(*(sketch.span(h[i : i + 1]) for i in range(len(h))))  # a first bin per row
    lo, counts = sketch.respan(list(firsts), list(rows))
    np.testing.assert_array_equal(sketch.whole(counts, lo), h)
    # trimmed again from a known first bin: the same rows
    lo2, counts2 = sketch.span(counts, int(lo[0]))
    np.testing.assert_array_equal(sketch.whole(counts2, lo2), h)
    assert sketch.join_rows([]) == {} and sketch.respan([], [])[1].shape == (0, 1)


def test_only_hist_keys_are_joined_as_spans():
    # a reducer's own `x` / `x_lo` pair (an interval's bounds, say) is concatenated as it is
    a = {"ci": np.array([1.5]), "ci_lo": np.array([0.5]), "v": np.array([[1.5, 2.5]]), "v_lo": np.array([0])}
    b = {"ci": np.array([3.5]), "ci_lo": np.array([2.5]), "v": np.array([[3.5, 4.5]]), "v_lo": np.array([1])}
    joined = sketch.join_rows([a, b])
    np.testing.assert_array_equal(joined["v"], [[1.5, 2.5], [3.5, 4.5]])
    np.testing.assert_array_equal(joined["ci_lo"], [0.5, 2.5])
