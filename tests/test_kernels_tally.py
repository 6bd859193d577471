"""poa_mc/kernels/tally.py: a replica's tally of its requests, against numpy over the same requests."""

import numpy as np

from poa_mc.kernels import tally as T
from poa_mc.kernels.cpu import tally_columns
from poa_mc.stats import sketch
from poa_mc.stats.accumulate import TALLIED, tally_params


def _tally(cols: np.ndarray, slo: dict) -> tuple[np.ndarray, np.ndarray]:
    r = cols.shape[1]
    tf, th = np.empty((r, T.NTF)), np.zeros((r, 3, sketch.NBINS), dtype=np.int32)
    tally_columns(tally_params(slo), sketch.EDGES, np.ascontiguousarray(cols, dtype=np.float64), tf, th)
    return tf, th


def test_every_value_lands_in_the_bin_of_the_edges_at_or_below_it():
    """The kernels find a value's bin from a logarithm's guess, then step to the edges: at every
    edge and one ulp either side of it, the bin is the sketch's (numpy's search of the edges)."""
    e = sketch.EDGES
    x = np.concatenate([e, np.nextafter(e, 0.0), np.nextafter(e, np.inf), [0.0, 1e-300, 5e-4, 1e12, np.inf]])
    x = np.concatenate([x, np.random.default_rng(1).lognormal(2.0, 4.0, 20_000)])
    cols = np.zeros((len(TALLIED), 1, x.size))
    cols[TALLIED.index("ttft_ms")] = x
    _, th = _tally(cols, {})
    np.testing.assert_array_equal(th[0, T.H_TTFT], sketch.histograms(x[None, :])[0])
    # and the edges themselves are where the sketch says its bins start
    assert (sketch.bin_of(e) == np.arange(1, sketch.NBINS)).all()
    assert (sketch.bin_of(np.nextafter(e, 0)) == np.arange(sketch.NBINS - 1)).all()


def test_a_tally_against_numpy_over_the_same_requests():
    rng = np.random.default_rng(7)
    r, n = 5, 300
    cols = np.zeros((len(TALLIED), r, n))
    f = dict(zip(TALLIED, cols))
    f["arrival_ms"][:] = np.sort(rng.uniform(0, 1e4, (r, n)), axis=1)
    f["ttft_ms"][:] = rng.lognormal(4.0, 1.0, (r, n))
    f["e2e_ms"][:] = f["ttft_ms"] + rng.lognormal(6.0, 0.5, (r, n))
    f["osl"][:] = rng.integers(1, 4, (r, n))  # about a third answer in one token: no ITL
    f["itl_ms"][:] = np.where(f["osl"] > 1, rng.lognormal(2.5, 0.3, (r, n)), 0.0)
    for name in ("prefill_wait_ms", "decode_wait_ms", "prompt_blocks", "cached_blocks", "cached_g3"):
        f[name][:] = rng.integers(0, 50, (r, n))
    slo = {"ttft_ms": 60.0, "itl_ms": 12.0}
    tf, th = _tally(cols, slo)
    assert (tf[:, T.TF_N] == n).all()
    for j, name in enumerate(T.SUMMED):
        np.testing.assert_allclose(tf[:, T.TF_SUM + j], f[name].sum(axis=1), rtol=1e-13, err_msg=name)
    gaps = np.maximum(f["osl"] - 1, 0)
    has = gaps > 0
    np.testing.assert_allclose(tf[:, T.TF_SUM_ITL_GAPS], (f["itl_ms"] * gaps).sum(axis=1), rtol=1e-13)
    np.testing.assert_array_equal(tf[:, T.TF_SUM_GAPS], gaps.sum(axis=1))
    np.testing.assert_array_equal(tf[:, T.TF_N_ITL], has.sum(axis=1))
    met = (f["ttft_ms"] <= 60.0) & (~has | (f["itl_ms"] <= 12.0))
    assert 0 < met.sum() < met.size
    np.testing.assert_array_equal(tf[:, T.TF_SLO_MET], met.sum(axis=1))
    for h, x, keep in ((T.H_TTFT, f["ttft_ms"], None), (T.H_E2E, f["e2e_ms"], None), (T.H_ITL, f["itl_ms"], has)):
        lo = np.where(keep, x, np.inf) if keep is not None else x
        hi = np.where(keep, x, -np.inf) if keep is not None else x
        np.testing.assert_array_equal(tf[:, T.TF_MIN + h], lo.min(axis=1))
        np.testing.assert_array_equal(tf[:, T.TF_MAX + h], hi.max(axis=1))
        np.testing.assert_array_equal(th[:, h], sketch.histograms(x, keep))
    np.testing.assert_array_equal(tf[:, T.TF_FIRST_ARR], f["arrival_ms"].min(axis=1))
    np.testing.assert_array_equal(tf[:, T.TF_LAST_ARR], f["arrival_ms"].max(axis=1))
    # without an [slo] bound the count is -1 (none asked), and one bound alone counts alone
    assert (_tally(cols, {})[0][:, T.TF_SLO_MET] == -1).all()
    only = _tally(cols, {"ttft_ms": 60.0})[0][:, T.TF_SLO_MET]
    np.testing.assert_array_equal(only, (f["ttft_ms"] <= 60.0).sum(axis=1))
