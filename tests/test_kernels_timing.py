"""Unit tests of poa_mc/kernels/timing.py (the polynomial's closed-form spans, the table's interpolation),
called through the CPU build."""

import json

import numpy as np
import pytest

from poa_mc.kernels import cpu
from poa_mc.kernels.layout import F_D0, F_D1, F_D2, F_TB_DB, F_TB_DC, F_TB_DN, F_TB_PB, F_TB_PN, F_TB_PU, NF_P
from poa_mc.model.profiles import pack_profile, resolve_profile
from poa_mc.model.timing_tables import FORMAT, LOOKUP_MAX, builtin_tables

K = cpu._K.timing
PT, PB, PU, PC = [1, 10, 100, 1000, 5000], [1, 2, 5, 9], [1, 10, 100, 1000], [0, 64, 1024]
DB, DC = [1, 3, 8, 20], [1, 100, 1000, 9000]


def test_decode_span_is_the_sum_of_step_times():
    fp = np.zeros(NF_P)
    fp[F_D2], fp[F_D1], fp[F_D0] = -25.74, 54.01, 5.74
    cap = 16384.0 * 64
    for x0, n, k in [(4096, 1, 1), (123_456, 13, 97), (500_000, 64, 256)]:
        naive = sum(K.step_ms(fp, float(x0 + n * j), np.int64(n), cap) for j in range(k))
        assert abs(K.decode_span(fp, x0, n, k, cap) - naive) <= 1e-9 * naive


def _multilinear_doc(**extra):
    """A table whose values are affine in each axis separately (so interpolation and its
    extrapolation reproduce them exactly) and non-decreasing in tokens, cached and context."""
    b, u, c = np.meshgrid(PB, PU, PC, indexing="ij")
    db, dc = np.meshgrid(DB, DC, indexing="ij")
    doc = {
        "format": FORMAT,
        "name": "synthetic",
        "prefill": {
            "tokens": PT,
            "gemm_ms": [_gemm(t) for t in PT],
            "batch": PB,
            "uncached": PU,
            "cached": PC,
            "attention_ms": _att(b, u, c).tolist(),
        },
        "decode": {"batch": DB, "context": DC, "ms": _dec(db, dc).tolist()},
    }
    doc.update(extra)
    return doc


def _gemm(t):
    return 3.0 + 0.02 * t


def _att(b, u, c):
    return 2.0 + 0.3 * b + 0.001 * u + 0.001 * c + 1e-5 * u * c


def _pre(b, t, c):
    """A pass of b requests, t new tokens in all, c cached each."""
    return _gemm(t) + _att(b, t / b, c)


def _profile(tmp_path, doc):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    return resolve_profile({"kind": "aic", "table": str(f)})


def _dec(b, x):
    return 4.0 + 0.05 * b + 1e-4 * x + 2e-5 * b * x


def test_interpolation_reproduces_a_multilinear_table_on_and_off_its_grid(tmp_path):
    fp = pack_profile(_profile(tmp_path, _multilinear_doc()))
    rng = np.random.default_rng(3)
    # nodes, points between them, and points past both ends of every axis (linear extrapolation)
    for b, t, c in [(1, 1, 0), (9, 5000, 1024), (2, 10, 64)] + [
        (rng.uniform(1, 14), rng.uniform(1, 9000), rng.uniform(0, 3000)) for _ in range(200)
    ]:
        assert K.table_pass(fp, float(b), float(t), float(c)) == pytest.approx(_pre(b, t, c), rel=1e-12)
    # a step's context is a whole number of tokens
    for b, c in [(1, 1), (20, 9000)] + [(rng.uniform(1, 40), round(rng.uniform(1, 30000))) for _ in range(200)]:
        n = max(1, round(b))
        assert K.step_ms(fp, float(n * c), n, 1.0) == pytest.approx(_dec(n, c), rel=1e-12)


def test_a_pass_reads_the_table_at_its_requests_and_mean_tokens(tmp_path):
    fp = pack_profile(_profile(tmp_path, _multilinear_doc()))
    # 3 requests, 300 tokens cached or computed before the pass, 1500 after: 400 each computed on 100
    got = K.pass_prefill_ms(fp, np.int64(300), np.int64(1500), np.int64(3))
    assert got == pytest.approx(_pre(3, 1200, 100), rel=1e-12)
    assert K.pass_prefill_ms(fp, np.int64(300), np.int64(300), np.int64(3)) == 0.0  # nothing computed
    assert K.prefill_span(fp, np.int64(777)) == pytest.approx(_pre(1, 777, 0), rel=1e-12)


@pytest.mark.parametrize("name", ["synthetic", *builtin_tables()])
def test_a_decode_span_is_the_sum_of_its_steps(tmp_path, name):
    prof = _profile(tmp_path, _multilinear_doc()) if name == "synthetic" else resolve_profile({"name": name})
    fp = pack_profile(prof)
    rng = np.random.default_rng(11)
    cases = [(5000, 7, 300), (0, 1, 1), (64 * 900, 64, 1000), (10**6, 300, 2000), (17, 17, 50_000)]
    cases += [(int(rng.integers(0, 10**6)), int(rng.integers(1, 600)), int(rng.integers(1, 3000))) for _ in range(30)]
    for x0, n, k in cases:
        span = K.decode_span(fp, np.int64(x0), np.int64(n), np.int64(k), 1.0)
        steps = sum(K.step_ms(fp, float(x0 + n * j), np.int64(n), 1.0) for j in range(k))
        assert span == pytest.approx(steps, rel=1e-11), (x0, n, k)


@pytest.mark.parametrize("name", ["dynamo-mocker", "synthetic", *builtin_tables()])
def test_a_segment_read_once_gives_every_span_to_the_bit(tmp_path, name):
    """span and first_step, on what `segment` read of the table once, give decode_span's and
    step_ms's numbers to the bit (the searches over a segment use them; the results must not move)."""
    prof = _profile(tmp_path, _multilinear_doc()) if name == "synthetic" else resolve_profile({"name": name})
    fp = pack_profile(prof)
    cap = 16384.0 * 16
    rng = np.random.default_rng(3)
    cases = [(0, 1), (5000, 7), (64 * 900, 64), (10**6, 300), (17, 17), (4096 * 13, 13)]
    cases += [(int(rng.integers(0, 10**6)), int(rng.integers(1, 600))) for _ in range(40)]
    for x0, n in cases:
        x0, n = np.int64(x0), np.int64(n)
        seg = K.segment(fp, x0, n)
        assert K.first_step(fp, seg, x0, n, cap) == K.step_ms(fp, np.float64(x0), n, cap), (x0, n)
        for k in (0, 1, 2, 3, 17, int(rng.integers(1, 3000)), 50_000):
            k = np.int64(k)
            assert K.span(fp, seg, x0, n, k, cap) == K.decode_span(fp, x0, n, k, cap), (x0, n, k)


@pytest.mark.parametrize("name", ["synthetic", *builtin_tables()])
def test_the_batch_lookups_give_the_axis_search_to_the_bit(tmp_path, name):
    """A pass's and a step's batch blend read from the host's lookups (F_TB_PN, F_TB_DN) are the
    axis search's, to the bit, for every whole batch size, inside the axis and past it."""
    prof = _profile(tmp_path, _multilinear_doc()) if name == "synthetic" else resolve_profile({"name": name})
    fp = pack_profile(prof)
    dn, pn = int(fp[F_TB_DN]), int(fp[F_TB_PN])
    for off, nodes, lut, end in (
        (int(fp[F_TB_DB]), int(fp[F_TB_DC] - fp[F_TB_DB]), dn, pn),
        (int(fp[F_TB_PB]), int(fp[F_TB_PU] - fp[F_TB_PB]), pn, fp.size),
    ):
        assert end - lut >= 2 * (min(fp[off + nodes - 1], LOOKUP_MAX) + 1)  # it covers the axis
        for b in [*range(1, 1100), 3000]:
            got = K.batch_bracket(fp, np.int64(off), np.int64(nodes), np.int64(lut), np.int64(end), np.int64(b))
            assert got == K.bracket(fp, np.int64(off), np.int64(nodes), float(b)), (b, got)


def _cut_by_bisection(fp, t0, x0, n, m, cap, t):
    lo, hi = 1, m
    while lo < hi:
        mid = (lo + hi) // 2
        if t0 + K.decode_span(fp, np.int64(x0), np.int64(n), np.int64(mid), cap) >= t:
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("name", ["dynamo-mocker", "synthetic", "flat"])
def test_a_segment_is_cut_where_a_bisection_over_its_steps_cuts_it(tmp_path, name):
    """steps_until (a guess from the first step, a gallop, then a bisection) finds the same first
    step ending at or after t as a bisection over [1, m], wherever t falls: before the segment,
    on a step's end, between two, past its end; with steps that lengthen, and with none that do."""
    if name == "synthetic":
        fp, cap = pack_profile(_profile(tmp_path, _multilinear_doc())), 1.0
    else:
        fp, cap = pack_profile(resolve_profile({"name": "dynamo-mocker"})), 16384.0 * 16
    if name == "flat":
        fp[F_D2], fp[F_D1] = 0.0, 0.0
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(300):
        x0, n, m = int(rng.integers(0, 400_000)), int(rng.integers(1, 64)), int(rng.integers(1, 600))
        t0 = float(rng.uniform(0.0, 1e4))
        end = K.decode_span(fp, np.int64(x0), np.int64(n), np.int64(m), cap)
        ks = rng.integers(0, m + 1, size=3)
        targets = [t0 - 1.0, t0 + end + 5.0, *(t0 + rng.uniform(0.0, 1.1) * end for _ in range(3))]
        targets += [t0 + K.decode_span(fp, np.int64(x0), np.int64(n), np.int64(k), cap) for k in ks]
        for t in targets:
            seg = K.segment(fp, np.int64(x0), np.int64(n))
            got = K.steps_until(fp, seg, t0, np.int64(x0), np.int64(n), np.int64(m), cap, t)
            assert got == _cut_by_bisection(fp, t0, x0, n, m, cap, t), (x0, n, m, t0, t)
            checked += 1
    assert checked == 300 * 8
