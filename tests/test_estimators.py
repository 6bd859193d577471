import itertools
import math
import time

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import linear_sum_assignment

from poa_mc.model.spec_json import spec_from_dict
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.stats import assignment, intervals, poa_hat
from poa_mc.stats.assignment import window_opt
from poa_mc.stats.counterfactual import counterfactual_poa, social_cost_per_replica
from poa_mc.stats.intervals import (
    bootstrap_mean_interval,
    per_replica_quantile,
    quantile_interval,
    ratio_interval,
    t_interval,
)
from poa_mc.stats.poa_hat import poa_hat_from_candidates, windowed_poa
from poa_mc.stats.predicted_costs import predicted_ttft_ms, prefill_ms_cost, router_cost
from poa_mc.stats.window_load import _load_before, _min_added, _transient, freeze_load

THEORY = ProfileSpec(name="exp", kind="exponential", prefill_ms=10.0, decode_ms=1.0)


def _coverage_floor(trials: int, level: float = 0.95) -> float:
    """Nominal level minus 3 Monte Carlo standard errors of a coverage rate over `trials`."""
    return level - 3 * math.sqrt(level * (1 - level) / trials)


def _coverage_ceiling(trials: int, level: float = 0.95) -> float:
    return level + 3 * math.sqrt(level * (1 - level) / trials)


def _scipy_opt(c: np.ndarray, slots: int) -> float:
    a = np.repeat(c, slots, axis=1)
    r, col = linear_sum_assignment(a)
    return float(a[r, col].sum())


@pytest.mark.parametrize("k,window", [(1, 3), (2, 8), (3, 7), (5, 8), (4, 16)])
def test_window_opt_matches_linear_sum_assignment(k, window):
    rng = np.random.default_rng(k * 100 + window)
    slots = -(-window // k)
    costs = rng.exponential(5.0, size=(150, window, k))
    costs[:20] = np.round(costs[:20])  # ties
    got = window_opt(costs, slots)
    want = np.array([_scipy_opt(c, slots) for c in costs])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    # more slots can only help
    assert np.all(window_opt(costs, slots + 1) <= got + 1e-9)


def test_window_opt_rejects_too_few_slots():
    with pytest.raises(ValueError):
        window_opt(np.ones((1, 5, 2)), 2)


def _no_numba(*args, **kwargs):
    raise AssertionError("the Hungarian kernel was reached with non-finite costs")


@pytest.mark.parametrize(
    "row",
    [[math.nan, math.nan, math.nan], [math.inf, math.inf, math.inf], [1.0, math.nan, 2.0], [1.0, -math.inf, 2.0]],
    ids=["all-nan", "all-inf", "part-nan", "part-neginf"],
)
def test_window_opt_rejects_non_finite_rows_before_numba(monkeypatch, row):
    # The kernels are replaced by a tripwire, so a missing check fails fast instead of hanging.
    monkeypatch.setattr(assignment, "_batch_assign", _no_numba)
    costs = np.ones((3, 4, 3))
    costs[1, 2] = row
    with pytest.raises(ValueError, match=r"window 1 .*row 2"):
        window_opt(costs, 2)
    with pytest.raises(ValueError, match=r"window 1 \(replica 0, window 1 of the replica\).*row 2"):
        window_opt(costs, 2, windows_per_replica=3)


def test_poa_hat_rejects_non_finite_recorded_costs_under_both_pricings(monkeypatch):
    monkeypatch.setattr(assignment, "_batch_assign", _no_numba)
    monkeypatch.setattr(assignment, "_batch_assign_priced", _no_numba)
    rng = np.random.default_rng(4)
    tokens = rng.uniform(0, 100, (2, 8, 3))
    tokens[1, 5, 0] = math.nan  # replica 1, second window of 4, row 1
    kw = {"added_tokens": np.ones((2, 8)), "added_blocks": np.ones((2, 8)), "window": 4}
    for pricing in ("slot", "frozen"):
        with pytest.raises(ValueError, match=r"replica 1, window 1 of the replica\).*row 1"):
            poa_hat_from_candidates(tokens, np.ones((2, 8, 3)), np.zeros((2, 8), np.int32), pricing=pricing, **kw)


def _recorded(r=2, n=8, k=3, seed=5):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, 400, (r, n, k)).astype(np.float64)
    blk = rng.integers(0, 8, (r, n, k)).astype(np.float64)
    chosen = rng.integers(0, k, (r, n)).astype(np.int32)
    times = {"decided_ms": np.cumsum(np.ones((r, n)), axis=1)}
    times.update(released_tokens_ms=times["decided_ms"] + 2.5, released_blocks_ms=times["decided_ms"] + 3.5)
    return tok, blk, chosen, {"added_tokens": np.ones((r, n)), "added_blocks": np.ones((r, n)), "window": 4, **times}


@pytest.mark.parametrize("pricing", ["slot", "frozen"])
@pytest.mark.parametrize("cost", ["router", "ttft", "observed"])
@pytest.mark.parametrize(
    "bad",
    [("cand_tokens", math.nan), ("cand_tokens", -math.inf), ("cand_blocks", math.inf), ("cand_blocks", -math.inf)],
)
def test_poa_hat_refuses_non_finite_candidates_before_pricing(monkeypatch, pricing, cost, bad):
    # the ttft cost priced NaN tokens as a 0 ms prefill and the slot clip turned -inf into no load:
    # both came out as numbers
    monkeypatch.setattr(assignment, "_batch_assign", _no_numba)
    monkeypatch.setattr(assignment, "_batch_assign_priced", _no_numba)
    tok, blk, chosen, kw = _recorded()
    name, value = bad
    (tok if name == "cand_tokens" else blk)[1, 6, 2] = value  # replica 1, its second window, row 2
    extra = {"profile": ProfileSpec(), "isl": np.full((2, 8), 512.0), "ttft_ms": np.full((2, 8), 50.0)}
    with pytest.raises(ValueError, match=rf"{name} is .* replica 1, decision 6, candidate worker 2: window 3 "
                                         r"\(replica 1, window 1 of the replica\), row 2"):  # fmt: skip
        poa_hat_from_candidates(tok, blk, chosen, cost=cost, pricing=pricing, **extra, **kw)


def test_poa_hat_refuses_non_finite_added_loads_and_observed_ttft():
    tok, blk, chosen, kw = _recorded()
    added = np.ones((2, 8))
    added[0, 1] = math.nan
    with pytest.raises(ValueError, match=r"added_blocks is nan at replica 0, decision 1: window 0"):
        poa_hat_from_candidates(tok, blk, chosen, **{**kw, "added_blocks": added})
    seen = np.full((2, 8), 50.0)
    seen[1, 3] = -math.inf
    obs = {"cost": "observed", "profile": ProfileSpec()}
    with pytest.raises(ValueError, match=r"ttft_ms is -inf at replica 1, decision 3: .*of the replica\), row 3"):
        poa_hat_from_candidates(tok, blk, chosen, ttft_ms=seen, **obs, **kw)
    # decisions in another order: the window and row are those of the decision order
    order = np.tile(np.arange(8)[::-1], (2, 1))
    seen[1, 3] = 50.0
    seen[0, 7] = math.nan
    with pytest.raises(ValueError, match=r"ttft_ms is nan at replica 0, decision 7: window 0 .*, row 0"):
        poa_hat_from_candidates(tok, blk, chosen, ttft_ms=seen, order=order, **obs, **kw)


def test_pricing_functions_refuse_non_finite_inputs():
    with pytest.raises(ValueError, match="prefill_ms_cost: tokens at .* is nan"):
        predicted_ttft_ms(np.array([10.0, math.nan]), ProfileSpec())
    f = np.ones((3, 4, 2))
    a = np.ones((3, 2))

    def price(t, b, i):
        return router_cost(t, b, 16, 1.0)

    for router in (None, (1.0, 16)):
        f_tok = f.copy()
        f_tok[2, 1, 0] = -math.inf  # clipped at 0 this was priced as no load at all
        with pytest.raises(ValueError, match=r"f_tok is -inf in window 2 \(replica 1, window 0 of the replica\), "
                                             r"row 1, worker 0"):  # fmt: skip
            assignment.slot_priced_opt(f_tok, f, a, a, price, 4, windows_per_replica=2, router=router)
        a_blk = a.copy()
        a_blk[0, 1] = math.nan
        with pytest.raises(ValueError, match=r"a_blk is nan in window 0, worker 1"):
            assignment.slot_priced_opt(f, f, a, a_blk, price, 4, router=router)
    realized = np.ones((2, 8, 3))
    realized[1, 2, 1] = -math.inf
    with pytest.raises(ValueError, match=r"realized cost is -inf at replica 1, decision 2, candidate worker 1"):
        windowed_poa(realized, np.ones((2, 8, 3)), np.zeros((2, 8), np.int32), 4)


def test_greedy_that_is_optimal_gives_exactly_one():
    # Costs frozen = realized (no in-window congestion), greedy picks the row minimum, and the
    # minima are spread so that no capacity binds: PoA-hat must be exactly 1.
    rng = np.random.default_rng(0)
    r, n, k, w = 4, 32, 4, 8
    costs = rng.uniform(5, 10, size=(r, n, k))
    chosen = np.tile(np.arange(n) % k, (r, 1)).astype(np.int32)
    np.put_along_axis(costs, chosen[:, :, None].astype(np.int64), 1.0, axis=2)
    ph = windowed_poa(costs, costs, chosen, w)
    assert ph.windows == n // w
    assert ph.estimate().value == 1.0
    np.testing.assert_array_equal(ph.actual, ph.opt)


def _router_poa(tokens, chosen, added, window, **kw):
    """PoA-hat with router cost = tokens (block_size 1, omega 1, no blocks)."""
    return poa_hat_from_candidates(
        tokens,
        np.zeros_like(tokens),
        chosen,
        added_tokens=added,
        added_blocks=np.zeros_like(added),
        window=window,
        block_size=1,
        overlap_weight=1.0,
        **kw,
    )


def test_cap_infeasibility_example_slot_gives_one_frozen_gives_half():
    # Four requests, each costing 1 on worker 0 and 3 on worker 1, adding no load (fully cached):
    # the router sends all four to worker 0, ACTUAL = 4, and nothing can beat that.
    # frozen: 2 slots per worker force two requests onto worker 1: OPT = 1 + 1 + 3 + 3 = 8, 0.5.
    # slot: 4 slots per worker, a_0 = 0, so worker 0's slots all cost 1: OPT = 4, exactly 1.
    tokens = np.tile(np.array([1.0, 3.0]), (1, 4, 1))
    chosen = np.zeros((1, 4), np.int32)
    added = np.zeros((1, 4))
    slot = _router_poa(tokens, chosen, added, 4)
    assert slot.actual.tolist() == [4.0] and slot.opt.tolist() == [4.0]
    assert slot.estimate().value == 1.0
    frozen = _router_poa(tokens, chosen, added, 4, pricing="frozen")
    assert frozen.actual.tolist() == [4.0] and frozen.opt.tolist() == [8.0]
    assert frozen.estimate().value == 0.5


def _herding_case():
    # One window of 4 requests, 2 workers, router cost = tokens (block_size 1, no blocks).
    # Worker 0 caches everyone's prefix: frozen cost 1 there, 3 on worker 1. Greedy sends all four
    # to worker 0 and each adds 2 tokens of load, so realized costs are 1, 3, 5, 7 (ACTUAL 16).
    tokens = np.array([[[1, 3], [3, 3], [5, 3], [7, 3]]], dtype=float)
    blocks = np.zeros_like(tokens)
    chosen = np.zeros((1, 4), np.int32)
    added = np.full((1, 4), 2.0)
    return tokens, blocks, chosen, added


def test_herding_case_known_ratio():
    tokens, _, chosen, added = _herding_case()
    # frozen: OPT with ceil(4/2) = 2 slots per worker: 1 + 1 + 3 + 3 = 8. PoA-hat = 16 / 8 = 2.
    ph = _router_poa(tokens, chosen, added, 4, pricing="frozen")
    assert ph.actual.tolist() == [16.0] and ph.opt.tolist() == [8.0]
    assert ph.estimate().value == 2.0
    # slot: f = 1 on worker 0 for all (1-0, 3-2, 5-4, 7-6), 3 on worker 1; a_0 = 2, and a_1 = 2
    # (the router sent nothing there: the minimum over the window). Slot prices: worker 0 1, 3, 5,
    # 7; worker 1 3, 5, 7, 9. OPT takes the four cheapest, 1 + 3 + 3 + 5 = 12: PoA-hat = 4/3.
    slot = _router_poa(tokens, chosen, added, 4)
    assert slot.actual.tolist() == [16.0] and slot.opt.tolist() == [12.0]
    assert slot.estimate().value == pytest.approx(4 / 3, rel=1e-15)
    # Without freezing, every slot is priced at the recorded cost (no load accounting): OPT from
    # costs 1,3,3,3 = 10, giving 1.6 under both pricings (2 slots per worker suffice here).
    for pricing in ("frozen", "slot"):
        ph2 = _router_poa(tokens, chosen, added, 4, freeze=False, pricing=pricing)
        assert ph2.opt.tolist() == [10.0]
        assert ph2.estimate().value == pytest.approx(1.6)


def test_slot_pricing_hand_computed_mixed_window():
    # 3 requests, 2 workers, router cost = tokens. Window-start ("frozen") costs
    #   f0 = [1, 5], f1 = [4, 2], f2 = [3, 1];  router: r0 -> w0 (adds 2), r1 -> w1 (adds 1),
    #   r2 -> w0 (adds 4). Recorded = f + load before: r0 [1, 5], r1 [6, 2], r2 [5, 2].
    # ACTUAL = 1 + 2 + 5 = 8.  a_0 = min(2, 4) = 2, a_1 = 1. Slot prices (slot 1, 2, 3):
    #   w0: r0 1 3 5 | r1 4 6 8 | r2 3 5 7;   w1: r0 5 6 7 | r1 2 3 4 | r2 1 2 3
    # OPT: r0 -> w0 slot 1 (1), r1 -> w1 slot 1 (2), r2 -> w1 slot 2 (2) = 5: PoA-hat 8/5.
    # frozen (2 slots, prices f): r0 w0 1 + r1 w1 2 + r2 w1 1 = 4: PoA-hat 2.
    tokens = np.array([[[1, 5], [6, 2], [5, 2]]], dtype=float)
    chosen = np.array([[0, 1, 0]], np.int32)
    added = np.array([[2.0, 1.0, 4.0]])
    slot = _router_poa(tokens, chosen, added, 3)
    assert slot.actual.tolist() == [8.0] and slot.opt.tolist() == [5.0]
    assert slot.estimate().value == 1.6
    frozen = _router_poa(tokens, chosen, added, 3, pricing="frozen")
    assert frozen.opt.tolist() == [4.0] and frozen.estimate().value == 2.0


def test_slot_pricing_clips_after_the_slot_term():
    # Recorded values can sit below the load the window added (requests completed during the
    # window are not undone), so f = rec - before goes negative; the clip must come after adding
    # the slot term or the router's own assignment gets priced above what it paid.
    # Router: all three to worker 0, each adding 4 tokens; recorded on w0 [0, 4, 0], on w1 5.
    # f_w0 = [0, 0, -8], f_w1 = 5; a_0 = a_1 = 4. ACTUAL = 0 + 4 + 0 = 4.
    # Slot prices on w0: r0 0 4 8 | r1 0 4 8 | r2 max(-8 + 4 (j-1), 0) = 0 0 0; on w1 5 9 13.
    # OPT = r0 slot 1 (0) + r1 slot 2 (4) + r2 slot 3 (0) = 4: PoA-hat 1. (Clipping f first would
    # price r2 at 0 4 8 and give OPT 9, PoA-hat 4/9.) Frozen: w0 two slots at 0, r1 -> w1: 5, 0.8.
    tokens = np.array([[[0, 5], [4, 5], [0, 5]]], dtype=float)
    chosen = np.zeros((1, 3), np.int32)
    added = np.full((1, 3), 4.0)
    slot = _router_poa(tokens, chosen, added, 3)
    assert slot.actual.tolist() == [4.0] and slot.opt.tolist() == [4.0]
    frozen = _router_poa(tokens, chosen, added, 3, pricing="frozen")
    assert frozen.opt.tolist() == [5.0] and frozen.estimate().value == 0.8


def _record(f: np.ndarray, chosen: np.ndarray, added: np.ndarray, window: int) -> np.ndarray:
    """What a router's log holds: window-start values plus the load earlier decisions of the
    window put on each worker (a plain loop, independent of the estimator's vectorised code)."""
    out = np.array(f, dtype=float)
    r, n, k = f.shape
    for rep in range(r):
        for start in range(0, n - n % window, window):
            load = np.zeros(k)
            for i in range(start, start + window):
                out[rep, i] += load
                load[chosen[rep, i]] += added[rep, i]
    return out


def test_optimal_router_on_identical_requests_scores_exactly_one():
    # Identical requests, each costing [1, 2] at the window start and adding 1 token wherever it
    # goes: slot prices are then exact. Worker 0 slots cost 1, 2, 3, 4; worker 1 2, 3, 4, 5.
    # The router's w0, w1, w0, w1 pays 1 + 2 + 2 + 3 = 8 = the four cheapest slots.
    f = np.tile(np.array([1.0, 2.0]), (1, 4, 1))
    chosen = np.array([[0, 1, 0, 1]], np.int32)
    added = np.ones((1, 4))
    tokens = _record(f, chosen, added, 4)
    np.testing.assert_array_equal(tokens[0], [[1, 2], [2, 2], [2, 3], [3, 3]])
    ph = _router_poa(tokens, chosen, added, 4)
    assert ph.actual.tolist() == [8.0] and ph.opt.tolist() == [8.0]
    assert ph.estimate().value == 1.0
    # Herding all four onto worker 0 pays 1 + 2 + 3 + 4 = 10 against the same OPT of 8.
    herd = np.zeros((1, 4), np.int32)
    ph_herd = _router_poa(_record(f, herd, added, 4), herd, added, 4)
    assert ph_herd.actual.tolist() == [10.0] and ph_herd.opt.tolist() == [8.0]


def _random_cell(rng, r, n, k, consistent):
    """Random candidates. Consistent ones are a greedy router's log (it picks the cheapest
    recorded router cost; worker 0 often holds the prefix, so it herds); the others are arbitrary
    non-negative values and choices (the OPT <= ACTUAL argument needs only rec >= 0)."""
    added_t = rng.choice([0.0, 64.0, 512.0, 2000.0], (r, n))
    added_b = np.floor(added_t / 64)
    tok = rng.uniform(0, 3000, (r, n, k))
    blk = rng.integers(0, 50, (r, n, k)).astype(float)
    if not consistent:
        chosen = rng.integers(0, k, (r, n)).astype(np.int32)
        keep = rng.random((r, n, k)) < 0.7  # zeros below the window's load: rec - before < 0
        return tok * keep, blk * keep, chosen, added_t, added_b
    cached = rng.random((r, n)) < 0.7
    tok[:, :, 0] *= np.where(cached, 0.05, 1.0)
    blk[:, :, 0] *= np.where(cached, 0.05, 1.0)
    chosen = np.zeros((r, n), np.int32)
    for rep in range(r):
        load_t, load_b = np.zeros(k), np.zeros(k)
        for i in range(n):
            tok[rep, i] += load_t
            blk[rep, i] += load_b
            chosen[rep, i] = w = int(np.argmin(router_cost(tok[rep, i], blk[rep, i], 64, 1.0)))
            load_t[w] += added_t[rep, i]
            load_b[w] += added_b[rep, i]
    return tok, blk, chosen, added_t, added_b


@pytest.mark.parametrize("consistent", [True, False])
def test_slot_priced_poa_hat_is_at_least_one_in_every_window(consistent):
    rng = np.random.default_rng(7 + consistent)
    r, n, k = 300, 6, 3  # one window per "replica", so per_replica() is per window
    tok, blk, chosen, added_t, added_b = _random_cell(rng, r, n, k, consistent)
    isl = rng.integers(512, 4096, (r, n))
    kw = {"added_tokens": added_t, "added_blocks": added_b, "window": n, "isl": isl}
    frozen_below = 0
    for cost, profile in (("router", None), ("ttft", ProfileSpec()), ("ttft", THEORY)):
        slot = poa_hat_from_candidates(tok, blk, chosen, cost=cost, profile=profile, **kw)
        assert slot.windows == 1
        assert (slot.per_replica() >= 1 - 1e-12).all(), cost
        frozen = poa_hat_from_candidates(tok, blk, chosen, cost=cost, profile=profile, pricing="frozen", **kw)
        frozen_below += int((frozen.per_replica() < 1 - 1e-12).sum())
        assert (slot.opt <= slot.actual * (1 + 1e-12)).all()
    if consistent:
        # The check is not vacuous: frozen pricing does dip below 1 on the same greedy logs.
        assert frozen_below > 0


def _brute_force_slot_opt(rec_t, rec_b, chosen, added_t, added_b, price):
    """min over every map requests -> workers and every order on each worker of the sequential
    price: the j-th request on w pays price(max(rec - before + (j-1) a_w, 0)) for tokens and
    blocks, a_w the smallest load the router's requests to w added (all requests if none)."""
    n, k = rec_t.shape
    before_t, before_b = np.zeros((n, k)), np.zeros((n, k))
    lt, lb = np.zeros(k), np.zeros(k)
    for i in range(n):
        before_t[i], before_b[i] = lt, lb
        lt[chosen[i]] += added_t[i]
        lb[chosen[i]] += added_b[i]
    a_t, a_b = np.empty(k), np.empty(k)
    for w in range(k):
        mine = [i for i in range(n) if chosen[i] == w] or list(range(n))
        a_t[w] = min(added_t[i] for i in mine)
        a_b[w] = min(added_b[i] for i in mine)

    def seq_cost(order, w):
        return sum(
            float(
                price(
                    max(rec_t[i, w] - before_t[i, w] + j * a_t[w], 0.0),
                    max(rec_b[i, w] - before_b[i, w] + j * a_b[w], 0.0),
                    i,
                )
            )
            for j, i in enumerate(order)
        )

    best = {}  # (worker, subset) -> cheapest order of that subset on that worker
    for w in range(k):
        for size in range(n + 1):
            for subset in itertools.combinations(range(n), size):
                best[w, subset] = min(seq_cost(p, w) for p in itertools.permutations(subset))
    total = math.inf
    for assign in itertools.product(range(k), repeat=n):
        groups = [tuple(i for i in range(n) if assign[i] == w) for w in range(k)]
        total = min(total, sum(best[w, g] for w, g in enumerate(groups)))
    return total


def test_slot_pricing_hungarian_equals_brute_force():
    rng = np.random.default_rng(12)
    r, n, k = 8, 5, 3
    tok, blk, chosen, added_t, added_b = _random_cell(rng, r, n, k, consistent=True)
    # zero some recorded tokens of half the windows, so that rec - before goes negative and the
    # clipping at 0 is exercised
    tok[:4] *= rng.random((4, n, k)) < 0.7
    isl = rng.integers(512, 4096, (r, n))
    flavours = [
        ("router", None, lambda t, b, i: router_cost(t, b, 64, 1.5)),
        ("ttft", ProfileSpec(), lambda t, b, i: predicted_ttft_ms(np.array(t), ProfileSpec())),
        ("ttft", THEORY, None),
    ]
    for cost, profile, price in flavours:
        ph = poa_hat_from_candidates(
            tok,
            blk,
            chosen,
            added_tokens=added_t,
            added_blocks=added_b,
            window=n,
            cost=cost,
            profile=profile,
            isl=isl,
            overlap_weight=1.5,
        )
        for rep in range(r):
            if price is None:  # theory prefill depends on the request's isl

                def p(t, b, i, rep=rep):
                    return predicted_ttft_ms(np.array([t]), THEORY, np.array(isl[rep, i]))[0]
            else:
                p = price
            want = _brute_force_slot_opt(tok[rep], blk[rep], chosen[rep], added_t[rep], added_b[rep], p)
            assert ph.opt[rep] == pytest.approx(want, rel=1e-12), (cost, rep)


def test_compiled_router_pricing_equals_the_generic_one_bit_for_bit():
    from poa_mc.stats.assignment import slot_priced_opt

    rng = np.random.default_rng(5)
    w, n, k, slots = 40, 8, 3, 8
    f_tok = rng.normal(200, 150, (w, n, k))  # some below 0: the clipping
    f_blk = rng.normal(10, 8, (w, n, k))
    a_tok, a_blk = rng.uniform(0, 300, (w, k)), rng.uniform(0, 12, (w, k))
    t_tok, t_blk = rng.integers(0, 3, (w, k)).astype(float), rng.integers(0, 3, (w, k)).astype(float)

    def price(t, b, i):
        return router_cost(t, b, 16, 1.5)

    args = (f_tok, f_blk, a_tok, a_blk, price, slots)
    kw = dict(transient_tok=t_tok, transient_blk=t_blk)
    generic = slot_priced_opt(*args, **kw)
    np.testing.assert_array_equal(slot_priced_opt(*args, **kw, router=(1.5, 16)), generic)
    f_tok[7, 2, 1] = np.nan  # a non-finite price: the generic path names the window
    with pytest.raises(ValueError, match="window 7"):
        slot_priced_opt(*args, **kw, router=(1.5, 16))


def test_frozen_pricing_is_the_previous_estimator():
    # pricing="frozen" must be exactly: realized = cost(recorded), OPT on cost(freeze_load(...))
    # with ceil(window / K) slots.
    rng = np.random.default_rng(21)
    r, n, k, window = 6, 40, 4, 8
    tok, blk, chosen, added_t, added_b = _random_cell(rng, r, n, k, consistent=True)
    got = poa_hat_from_candidates(
        tok, blk, chosen, added_tokens=added_t, added_blocks=added_b, window=window, pricing="frozen"
    )
    f_t, f_b = freeze_load(tok, chosen, added_t, window), freeze_load(blk, chosen, added_b, window)
    want = windowed_poa(router_cost(tok, blk, 64, 1.0), router_cost(f_t, f_b, 64, 1.0), chosen, window, 2)
    np.testing.assert_array_equal(got.actual, want.actual)
    np.testing.assert_array_equal(got.opt, want.opt)


def test_slot_pricing_argument_checks():
    tokens, blocks, chosen, added = _herding_case()
    with pytest.raises(ValueError, match="pricing"):
        _router_poa(tokens, chosen, added, 4, pricing="exact")
    with pytest.raises(ValueError, match="slots"):
        _router_poa(tokens, chosen, added, 4, slots=1)
    with pytest.raises(ValueError, match=">= 0"):
        _router_poa(tokens, chosen, -added, 4)


def test_observed_cost_has_no_lower_bound_of_one():
    # Observed TTFTs far below the predictions: ACTUAL < OPT, so PoA-hat < 1 even under slot
    # pricing (the docstring's caveat).
    tokens, blocks, chosen, added = _herding_case()
    ph = poa_hat_from_candidates(
        tokens,
        blocks,
        chosen,
        added_tokens=added,
        added_blocks=np.zeros((1, 4)),
        window=4,
        cost="observed",
        ttft_ms=np.full((1, 4), 0.01),
    )
    assert ph.estimate().value < 1


@pytest.mark.parametrize("pricing", ["slot", "frozen"])
def test_single_candidate_is_no_game(pricing):
    rng = np.random.default_rng(1)
    tokens = rng.uniform(0, 100, (3, 16, 1))
    ph = poa_hat_from_candidates(
        tokens,
        tokens,
        np.zeros((3, 16), np.int32),
        added_tokens=np.ones((3, 16)),
        added_blocks=np.ones((3, 16)),
        window=8,
        pricing=pricing,
    )
    assert ph.defined is False and ph.windows == 0
    e = ph.estimate()
    assert math.isnan(e.value) and math.isnan(e.lo) and math.isnan(e.hi)
    assert np.isnan(ph.per_replica()).all() and ph.per_replica().shape == (3,)
    w = windowed_poa(tokens, tokens, np.zeros((3, 16), np.int32), 8)
    assert w.defined is False and math.isnan(w.estimate().value)


def test_no_full_window_gives_no_estimate():
    tokens, _, chosen, added = _herding_case()
    ph = _router_poa(tokens, chosen, added, 8)
    assert ph.defined and ph.windows == 0 and math.isnan(ph.estimate().value)


def test_freeze_load_hand_case():
    tokens, _, chosen, added = _herding_case()
    frozen = freeze_load(tokens, chosen, added, 4)
    np.testing.assert_array_equal(frozen[0], [[1, 3], [1, 3], [1, 3], [1, 3]])
    # windows restart the accounting: with window 2 the third request sees only its window's load
    frozen2 = freeze_load(tokens, chosen, added, 2)
    np.testing.assert_array_equal(frozen2[0, :, 0], [1, 1, 5, 5])


@pytest.mark.parametrize("pricing", ["slot", "frozen"])
def test_poa_hat_invariant_to_worker_order(pricing):
    rng = np.random.default_rng(3)
    r, n, k = 5, 40, 4
    tokens = rng.integers(0, 4000, size=(r, n, k)).astype(float)
    blocks = rng.integers(0, 60, size=(r, n, k)).astype(float)
    chosen = rng.integers(0, k, size=(r, n)).astype(np.int32)
    added_t = rng.integers(0, 2000, size=(r, n)).astype(float)
    added_b = rng.integers(0, 30, size=(r, n)).astype(float)
    kw = {"added_tokens": added_t, "added_blocks": added_b, "window": 8, "block_size": 64, "pricing": pricing}
    base = poa_hat_from_candidates(tokens, blocks, chosen, **kw)
    perm = np.array([2, 0, 3, 1])
    inv = np.argsort(perm)
    shuffled = poa_hat_from_candidates(tokens[:, :, perm], blocks[:, :, perm], inv[chosen].astype(np.int32), **kw)
    np.testing.assert_allclose(shuffled.actual, base.actual)
    np.testing.assert_allclose(shuffled.opt, base.opt)
    for cost in ("ttft", "observed"):
        a = poa_hat_from_candidates(
            tokens, blocks, chosen, cost=cost, isl=np.full((r, n), 4096), ttft_ms=np.ones((r, n)), **kw
        )
        b = poa_hat_from_candidates(
            tokens[:, :, perm],
            blocks[:, :, perm],
            inv[chosen].astype(np.int32),
            cost=cost,
            isl=np.full((r, n), 4096),
            ttft_ms=np.ones((r, n)),
            **kw,
        )
        assert a.estimate().value == pytest.approx(b.estimate().value)


def test_prefill_ms_cost_polynomial_and_theory():
    p = ProfileSpec()
    t = np.array([0.0, 1000.0])
    ms = prefill_ms_cost(t, p)
    assert ms[0] == 0.0
    assert ms[1] == pytest.approx(p.p2 * 1e6 + p.p1 * 1e3 + p.p0)
    np.testing.assert_allclose(
        prefill_ms_cost(np.array([[[512.0, 2048.0]]]), THEORY, np.array([[1024]])), [[[5.0, 20.0]]]
    )


def test_predicted_ttft_adds_the_first_decode_step():
    p = ProfileSpec()
    t = np.array([0.0, 1000.0])
    np.testing.assert_allclose(predicted_ttft_ms(t, p), prefill_ms_cost(t, p) + p.d0)
    assert (predicted_ttft_ms(np.zeros(4), p) > 0).all()  # a fully cached prompt still waits a step


def test_opt_zero_handling():
    # value conventions kept; the interval of a ratio over a zero denominator is undefined
    for num, value in ((np.zeros(3), 1.0), (np.ones(3), math.inf)):
        e = ratio_interval(num, np.zeros(3))
        assert e.value == value and math.isnan(e.lo) and math.isnan(e.hi)
    # a zero ratio with no spread keeps a zero-width interval on the linear scale
    assert ratio_interval(np.zeros(3), np.ones(3)) == intervals.Estimate(0.0, 0.0, 0.0)


def test_t_interval_and_ratio_interval_cover_truth():
    rng = np.random.default_rng(11)
    trials, n = 400, 30
    cover_t = cover_r = 0
    for _ in range(trials):
        x = rng.exponential(2.0, n)  # true mean 2
        cover_t += t_interval(x).lo <= 2.0 <= t_interval(x).hi
        den = rng.uniform(1, 3, n)  # E = 2
        num = 1.5 * den + rng.normal(0, 0.3, n)  # true ratio of means 1.5
        e = ratio_interval(num, den)
        cover_r += e.lo <= 1.5 <= e.hi
    assert 0.90 <= cover_t / trials <= 0.99
    assert 0.90 <= cover_r / trials <= 0.99


def test_ratio_interval_log_scale_covers_lognormal_pairs():
    # (log num, log den) bivariate normal per replica: the ratio of means is
    # exp(mu_n + s_n^2 / 2 - mu_d - s_d^2 / 2).
    rng = np.random.default_rng(13)
    trials, n = 400, 8
    sn, sd, rho, mu = 0.3, 0.3, 0.5, 0.4
    cov = np.array([[sn * sn, rho * sn * sd], [rho * sn * sd, sd * sd]])
    truth = math.exp(mu + sn * sn / 2 - sd * sd / 2)
    logs = rng.multivariate_normal([mu, 0.0], cov, size=(trials, n))
    cover = 0
    for lg in logs:
        e = ratio_interval(np.exp(lg[:, 0]), np.exp(lg[:, 1]))
        assert 0 < e.lo < e.value < e.hi
        cover += e.lo <= truth <= e.hi
    assert _coverage_floor(trials) <= cover / trials <= _coverage_ceiling(trials)


def test_ratio_interval_stays_positive_where_linear_goes_negative():
    num, den = np.array([0.01, 0.01, 6.0]), np.ones(3)
    r = num.sum() / den.sum()
    spread = (num - r * den).std(ddof=1) / math.sqrt(3)
    t = stats.t.ppf(0.975, 2)
    assert r - t * spread / den.mean() < 0  # the linear-scale delta interval would go below 0
    e = ratio_interval(num, den)
    assert e.value == pytest.approx(r)
    half = t * spread / num.mean()  # se of log R
    assert e.lo == pytest.approx(r * math.exp(-half)) and e.hi == pytest.approx(r * math.exp(half))
    assert 0 < e.lo < r < e.hi
    assert e.lo * e.hi == pytest.approx(r * r)  # symmetric on the log scale


def _exp_p99_truth(m: int) -> float:
    # Nearest-rank P99 of m Exp(1) samples is their k-th order statistic (k read off numpy's
    # definition), whose mean is  sum_{i = m - k + 1}^{m} 1 / i  (Renyi's representation).
    k = int(per_replica_quantile(np.arange(1.0, m + 1)[None, :], 0.99)[0])
    return sum(1.0 / i for i in range(m - k + 1, m + 1))


def test_exp_p99_truth_matches_simulation():
    rng = np.random.default_rng(8)
    q = per_replica_quantile(rng.exponential(1.0, (20000, 500)), 0.99)
    se = q.std(ddof=1) / math.sqrt(q.size)
    assert abs(q.mean() - _exp_p99_truth(500)) < 4 * se


@pytest.mark.parametrize("replicas", [2, 5, 8])
def test_quantile_interval_covers_with_few_replicas(replicas):
    rng = np.random.default_rng(100 + replicas)
    trials, m = 1000, 500
    truth = _exp_p99_truth(m)
    q = per_replica_quantile(rng.exponential(1.0, (trials, replicas, m)), 0.99)  # (trials, replicas)
    cover = 0
    for row in q:
        e = quantile_interval(row)
        assert e.value == pytest.approx(row.mean())
        cover += e.lo <= truth <= e.hi
    assert _coverage_floor(trials) <= cover / trials <= _coverage_ceiling(trials)
    if replicas == 2:
        # the percentile bootstrap it replaces covers about 50% here (its bounds are the 2 values)
        boot = sum((e := bootstrap_mean_interval(row, rng, 200)).lo <= truth <= e.hi for row in q[:400])
        assert boot / 400 < _coverage_floor(400)


def test_bootstrap_quantile_interval_covers_truth():
    # per-replica P90 of exponential(1) samples; truth for the mean of per-replica P90 with 200
    # samples each is computed by brute force. (With 25 replicas the bootstrap is adequate.)
    rng = np.random.default_rng(5)
    truth = per_replica_quantile(rng.exponential(1.0, (20000, 200)), 0.9).mean()
    cover = 0
    trials = 200
    for _ in range(trials):
        q = per_replica_quantile(rng.exponential(1.0, (25, 200)), 0.9)
        e = bootstrap_mean_interval(q, rng, 500)
        cover += e.lo <= truth <= e.hi
    assert 0.88 <= cover / trials <= 0.99


def test_per_replica_quantile_is_nearest_rank():
    x = np.arange(1, 101, dtype=float)[None, :]
    assert per_replica_quantile(x, 0.99)[0] == 99.0
    assert per_replica_quantile(x, 0.5)[0] == 50.0


def test_counterfactual_poa_known_answer_and_pairing():
    rng = np.random.default_rng(1)
    common = rng.exponential(100.0, 50)  # a shared per-replica difficulty (common random numbers)
    costs = {"selfish": 1.5 * common, "good": 1.0 * common, "bad": 2.0 * common}
    cf = counterfactual_poa(costs, "selfish", np.random.default_rng(0), 1000)
    assert cf.best_policy == "good"
    assert cf.poa == pytest.approx(1.5)
    # perfectly correlated streams: the paired interval collapses onto the ratio
    assert cf.lo == pytest.approx(1.5) and cf.hi == pytest.approx(1.5)
    assert cf.cost_selfish == pytest.approx(1.5 * common.mean())
    assert cf.cost_best == pytest.approx(common.mean())
    # when the selfish policy is the best, PoA is exactly 1 at the point estimate
    cf2 = counterfactual_poa({"selfish": common, "bad": 2 * common}, "selfish", np.random.default_rng(0))
    assert cf2.poa == 1.0 and cf2.best_policy == "selfish" and cf2.lo == 1.0 and cf2.hi == 1.0
    # rng is optional now (the interval is analytic)
    assert counterfactual_poa(costs, "selfish") == cf


def test_counterfactual_poa_degenerate_inputs():
    only = counterfactual_poa({"selfish": np.array([3.0, 4.0])}, "selfish")
    assert (only.poa, only.lo, only.hi) == (1.0, 1.0, 1.0)
    one = counterfactual_poa({"selfish": np.array([3.0]), "other": np.array([2.0])}, "selfish")
    assert one.poa == 1.5 and math.isnan(one.lo) and math.isnan(one.hi)
    empty = counterfactual_poa({"selfish": np.array([]), "other": np.array([])}, "selfish")
    assert math.isnan(empty.poa)


def _crn_costs(rng, means, replicas, noise):
    """Per-replica social costs on common streams: a shared lognormal difficulty per replica times
    each policy's mean times its own mean-one lognormal noise, so the true mean of policy p is
    exactly means[p] * E[difficulty]."""
    difficulty = rng.lognormal(0.0, 0.5, replicas)
    return {
        f"p{i}": mu * difficulty * np.exp(rng.normal(0.0, noise, replicas) - noise * noise / 2)
        for i, mu in enumerate(means)
    }


def _cf_coverage(draw, truth, trials=400):
    cover = excludes_one = 0
    for _ in range(trials):
        costs = draw()
        cf = counterfactual_poa(costs, "p0")
        assert cf.poa >= 1.0
        assert cf.lo <= cf.poa <= cf.hi  # always contains its own estimate
        cover += cf.lo <= truth <= cf.hi
        excludes_one += cf.lo > 1.0
    return cover / trials, excludes_one / trials


def test_counterfactual_poa_covers_near_ties_with_many_rivals():
    # The review's case: selfish constant at 100, ten rivals of mean 100.5 (true PoA = 1). The
    # old bootstrap gave [1.013, 1.100] around its estimate 1.0.
    rng = np.random.default_rng(31)

    def draw():
        costs = {"p0": np.full(20, 100.0)}
        costs.update({f"r{i}": rng.normal(100.5, 2.0, 20) for i in range(10)})
        return costs

    cov, _ = _cf_coverage(draw, 1.0)
    assert cov >= _coverage_floor(400)


@pytest.mark.parametrize(
    "means,replicas", [((101.0, 100.0, 100.0), 3), ((100.0, 100.0, 100.0), 3), ((100.0, 100.5, 100.5), 2)]
)
def test_counterfactual_poa_covers_near_ties_with_few_replicas(means, replicas):
    rng = np.random.default_rng(int(sum(means)) + replicas)
    truth = means[0] / min(means)
    cov, _ = _cf_coverage(lambda: _crn_costs(rng, means, replicas, 0.1), truth)
    assert cov >= _coverage_floor(400)


def test_counterfactual_poa_covers_and_detects_one_clear_best():
    rng = np.random.default_rng(37)
    means = (120.0, 100.0, 130.0, 150.0)  # true PoA 1.2
    cov, power = _cf_coverage(lambda: _crn_costs(rng, means, 20, 0.1), 1.2)
    assert cov >= _coverage_floor(400)
    assert power >= 0.9  # not so conservative that a 20% PoA over 20 replicas goes unseen


def test_social_costs():
    import dataclasses

    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.stats.accumulate import accumulate

    ttft = np.array([[1.0, 3.0], [2.0, 2.0]])
    e2e = ttft + 10
    cols = {"ttft_ms": ttft, "e2e_ms": e2e, "itl_ms": np.ones((2, 2)), "osl": np.full((2, 2), 2)}
    acc = accumulate(cols, {}, spec_from_dict({"cluster": dataclasses.asdict(ClusterSpec())}), {"window": 2})
    np.testing.assert_allclose(social_cost_per_replica("mean_ttft", acc), [2.0, 2.0])
    np.testing.assert_allclose(social_cost_per_replica("mean_e2e", acc), [12.0, 12.0])
    # the cell's P99 over all four requests is 3; the replica that holds it carries more of it
    p99 = social_cost_per_replica("p99_ttft", acc)
    assert p99.mean() == pytest.approx(3.0) and p99[0] > p99[1]
    with pytest.raises(ValueError):
        social_cost_per_replica("goodput", acc)


@pytest.mark.parametrize("pricing", ["slot", "frozen"])
def test_poa_hat_is_fast_on_many_windows(pricing):
    rng = np.random.default_rng(2)
    r, n, k = 100, 2000, 5  # 25,000 windows of 8
    tokens = rng.uniform(0, 5000, (r, n, k))
    blocks = rng.uniform(0, 80, (r, n, k))
    chosen = rng.integers(0, k, (r, n)).astype(np.int32)
    poa_hat_from_candidates(
        tokens[:1, :16],
        blocks[:1, :16],
        chosen[:1, :16],
        added_tokens=np.ones((1, 16)),
        added_blocks=np.ones((1, 16)),
        window=8,
        pricing=pricing,
    )  # compile / load the cache
    t0 = time.perf_counter()
    ph = poa_hat_from_candidates(
        tokens,
        blocks,
        chosen,
        added_tokens=rng.uniform(0, 2000, (r, n)),
        added_blocks=rng.uniform(0, 30, (r, n)),
        window=8,
        pricing=pricing,
    )
    assert ph.windows == 250
    # ~0.1 s (frozen) / ~0.3 s (slot: 40 columns a window instead of 10) here
    assert time.perf_counter() - t0 < 3.0


def _completing_log(rng: np.random.Generator, r: int, n: int, k: int, *, all_done: bool):
    """A consistent router log with completions: recorded load = base + the load of earlier
    decisions on that worker still present at the decision (released after it)."""
    base_t = rng.integers(0, 400, size=(r, n, k)).astype(float)
    base_b = rng.integers(0, 8, size=(r, n, k)).astype(float)
    add_t = rng.integers(0, 300, size=(r, n)).astype(float)
    add_b = rng.integers(1, 6, size=(r, n)).astype(float)
    decided = np.cumsum(rng.exponential(1.0, size=(r, n)), axis=1)
    gap = np.full((r, n), 0.5) if all_done else rng.exponential(3.0, size=(r, n))
    released = decided + (np.minimum(gap, 0.5 * np.diff(decided, axis=1, append=np.inf)) if all_done else gap)
    chosen = rng.integers(0, k, size=(r, n))
    tok, blk = base_t.copy(), base_b.copy()
    for i in range(n):
        for e in range(i):
            here = released[:, e] > decided[:, i]
            for w in range(k):
                m = here & (chosen[:, e] == w)
                tok[m, i, w] += add_t[m, e]
                blk[m, i, w] += add_b[m, e]
    return tok, blk, chosen, add_t, add_b, decided, released


@pytest.mark.parametrize("cost", ["router", "ttft"])
def test_slot_pricing_stays_a_relaxation_when_requests_complete_inside_a_window(cost):
    rng = np.random.default_rng(11)
    window, k = 8, 3
    for _ in range(30):
        tok, blk, chosen, add_t, add_b, dec, rel = _completing_log(rng, 1, window, k, all_done=False)
        ph = poa_hat_from_candidates(
            tok, blk, chosen, added_tokens=add_t, added_blocks=add_b, window=window, cost=cost,
            isl=np.full((1, window), 512.0), profile=ProfileSpec(), decided_ms=dec, released_tokens_ms=rel,
            released_blocks_ms=rel,
        )  # fmt: skip
        assert ph.actual[0] >= ph.opt[0] - 1e-9 * max(1.0, ph.opt[0])


def test_requests_done_before_the_next_decision_leave_nothing_to_coordinate():
    # every request ends before the next decision (C = 1): each worker costs its base, the
    # router took the cheapest, so PoA-hat is exactly 1; counting their load as present (no
    # times) lets OPT undo load that had left and inflates it
    rng = np.random.default_rng(5)
    r, window, k = 4, 8, 3
    tok, blk, chosen, add_t, add_b, dec, rel = _completing_log(rng, r, window * 3, k, all_done=True)
    chosen = np.argmin(router_cost(tok, blk, 64, 1.0), axis=2)  # the greedy choice, on base costs
    kw = dict(added_tokens=add_t, added_blocks=add_b, window=window)
    timed = poa_hat_from_candidates(tok, blk, chosen, decided_ms=dec, released_tokens_ms=rel, released_blocks_ms=rel,
                                    **kw)  # fmt: skip
    assert timed.estimate().value == pytest.approx(1.0, abs=1e-12)
    untimed = poa_hat_from_candidates(tok, blk, chosen, **kw)
    assert untimed.estimate().value > 1.05


def test_a_fully_cached_prompt_is_priced_at_the_block_the_engine_recomputes():
    from poa_mc.stats.predicted_costs import recomputed_tokens

    p = ProfileSpec()
    isl = np.array([[4096, 4100]])
    np.testing.assert_array_equal(recomputed_tokens(isl, 64), [[64, 4]])
    tokens = np.array([[[0.0, 500.0], [0.0, 2.0]]])  # (R, N, K): one worker sees the prompt fully cached
    got = predicted_ttft_ms(tokens, p, isl, block_size=64, recompute_last_block=True)
    want = prefill_ms_cost(np.array([[[64.0, 500.0], [4.0, 4.0]]]), p) + p.d0
    np.testing.assert_allclose(got, want)
    # without the cap a fully cached prompt costs the first step alone, as before
    np.testing.assert_allclose(predicted_ttft_ms(tokens, p, isl)[0, 0, 0], p.d0)


def test_an_aic_profile_is_priced_from_its_table():
    from poa_mc.model.profiles import load, resolve_profile
    from poa_mc.stats.predicted_costs import predicted_ttft_ms

    p = resolve_profile({"name": "aic-b200-llama70b-fp8-tp4-vllm"})
    t = load("aic-b200-llama70b-fp8-tp4-vllm")
    got = predicted_ttft_ms(np.array([[0.0, 64.0, 4096.0]]), p)
    want = [t.decode_ms(1, 0), t.prefill_ms(1, 64) + t.decode_ms(1, 0), t.prefill_ms(1, 4096) + t.decode_ms(1, 0)]
    assert np.allclose(got[0], want, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_compiled_router_path_equals_the_numpy_bookkeeping_to_the_bit(seed):
    """poa_hat_from_candidates prices the default flavour (router cost, slot pricing, decision and
    release times) in compiled code from the recorded arrays; the numpy pieces it replaces
    (_load_before, _min_added, _transient, then _slot_router_opt) give the same OPT to the bit,
    with workers the router sent nothing, loads that leave inside a window and fractional
    (tier-credited) recorded tokens."""
    rng = np.random.default_rng(seed)
    r, n, k, window = 5, 64, 3, 8
    chosen = rng.integers(0, k - (seed == 2), (r, n))  # seed 2: worker k-1 never chosen
    add_t = rng.integers(0, 4000, (r, n)).astype(np.int32)
    add_b = rng.integers(0, 70, (r, n)).astype(np.int32)
    decided = np.sort(rng.uniform(0, 100, (r, n)), axis=1)
    rel_t = decided + rng.exponential(5.0, (r, n))
    rel_b = decided + rng.exponential(20.0, (r, n))
    tok = rng.integers(0, 20000, (r, n, k)) + rng.choice([0.0, 0.25, 0.75], (r, n, k))
    blk = rng.integers(0, 500, (r, n, k)).astype(np.float64)
    nw, m = n // window, (n // window) * window
    shape = (r * nw, window, k)
    f_tok = tok[:, :m].reshape(shape) - _load_before(chosen, add_t, window, k, decided, rel_t).reshape(shape)
    f_blk = blk[:, :m].reshape(shape) - _load_before(chosen, add_b, window, k, decided, rel_b).reshape(shape)
    a_tok = _min_added(chosen, add_t, window, k).reshape(r * nw, k)
    a_blk = _min_added(chosen, add_b, window, k).reshape(r * nw, k)
    t_tok = _transient(chosen, window, k, decided, rel_t).reshape(r * nw, k)
    t_blk = _transient(chosen, window, k, decided, rel_b).reshape(r * nw, k)
    want = assignment._slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, window, 1.0, 64.0)

    rows = np.tile(np.arange(n), (r, 1))
    ints = (np.asarray(x, dtype=np.int64) for x in (chosen, add_t, add_b))
    router = (np.empty(0), np.empty((0, 0)))  # no step table, no observed costs: the router cost
    opt, real = poa_hat._slot_sums(tok, blk, *ints, decided, rel_t, rel_b, rows, window, window, 1.0, 64.0, *router)
    np.testing.assert_array_equal(opt.reshape(-1), want)
    # ACTUAL: the recorded router cost of each chosen worker, summed as _actual sums it
    realized = router_cost(tok, blk, 64, 1.0)
    np.testing.assert_array_equal(real.sum(axis=1), poa_hat._actual(realized, chosen, window))
    # and through the public entry point, which takes the compiled path here
    ph = poa_hat_from_candidates(
        tok, blk, chosen, added_tokens=add_t, added_blocks=add_b, window=window, decided_ms=decided,
        released_tokens_ms=rel_t, released_blocks_ms=rel_b,
    )  # fmt: skip
    np.testing.assert_array_equal(ph.opt, want.reshape(r, nw).sum(axis=1))


@pytest.mark.parametrize("cost", ["decode_step", "observed_step"])
@pytest.mark.parametrize("profile", ["dynamo-mocker", "aic-b200-llama70b-fp8-tp4-vllm"])
def test_the_step_flavours_compiled_from_a_table_equal_the_generic_path_to_the_bit(monkeypatch, cost, profile):
    """The prefill_first decode decision's step flavours price whole block counts: compiled from a
    table of predicted_step_ms (_step_table), they give the generic path's ACTUAL and OPT to the
    bit, in a given decision order too; a count off the table falls back to the generic path."""
    from poa_mc.model.profiles import resolve_profile

    rng = np.random.default_rng(5)
    r, n, k, window = 4, 64, 5, 8
    blk = rng.integers(0, 3000, (r, n, k)).astype(np.float64)
    kw = dict(
        added_tokens=rng.integers(0, 4000, (r, n)).astype(np.int32),
        added_blocks=rng.integers(0, 70, (r, n)).astype(np.int32),
        window=window, cost=cost, profile=resolve_profile({"name": profile}), decode_kv_blocks=4096,
        decided_ms=np.sort(rng.uniform(0, 100, (r, n)), axis=1), ttft_ms=rng.uniform(5.0, 50.0, (r, n)),
        order=np.argsort(rng.uniform(size=(r, n)), axis=1),
    )  # fmt: skip
    kw["released_tokens_ms"] = kw["released_blocks_ms"] = kw["decided_ms"] + rng.exponential(20.0, (r, n))
    tok, chosen = rng.uniform(0, 9000, (r, n, k)), rng.integers(0, k, (r, n))
    assert poa_hat._step_table(cost, blk, kw["added_blocks"], window, kw["profile"], 4096, 64) is not None
    calls = []
    real_sums = poa_hat._slot_sums
    monkeypatch.setattr(poa_hat, "_slot_sums", lambda *a: calls.append(1) or real_sums(*a))
    got = poa_hat_from_candidates(tok, blk, chosen, **kw)
    assert calls, "the compiled path was not taken"
    monkeypatch.setattr(poa_hat, "_step_table", lambda *a: None)
    want = poa_hat_from_candidates(tok, blk, chosen, **kw)
    assert len(calls) == 1 and want.windows == got.windows == n // window
    np.testing.assert_array_equal(got.actual, want.actual)
    np.testing.assert_array_equal(got.opt, want.opt)
    if cost == "decode_step":  # priced, not observed, realized costs: OPT <= ACTUAL by construction
        assert np.all(got.opt <= got.actual)
    monkeypatch.undo()
    half = blk.copy()
    half[0, 3, 1] += 0.5  # not a whole number of blocks: the generic path, the same numbers
    fast = poa_hat_from_candidates(tok, half, chosen, **kw)
    monkeypatch.setattr(poa_hat, "_step_table", lambda *a: None)
    np.testing.assert_array_equal(fast.opt, poa_hat_from_candidates(tok, half, chosen, **kw).opt)


@pytest.mark.parametrize("cost", ["router", "ttft"])
def test_windows_in_a_given_decision_order_equal_the_arrays_taken_in_that_order(cost):
    """order= (each replica's decisions as a permutation of its rows) gives the PoA-hat of the
    arrays gathered into that order, to the bit: the compiled router path reads through it, the
    generic path (here the ttft cost) gathers."""
    rng = np.random.default_rng(11)
    r, n, k, window = 4, 48, 3, 8
    arrays = {
        "cand_tokens": rng.integers(0, 20000, (r, n, k)).astype(np.float64),
        "cand_blocks": rng.integers(0, 500, (r, n, k)).astype(np.float64),
        "chosen": rng.integers(0, k, (r, n)).astype(np.int32),
        "added_tokens": rng.integers(0, 4000, (r, n)).astype(np.int32),
        "added_blocks": rng.integers(0, 70, (r, n)).astype(np.int32),
        "isl": rng.integers(100, 4000, (r, n)).astype(np.int32),
        "decided_ms": np.sort(rng.uniform(0, 100, (r, n)), axis=1),
    }
    arrays["released_tokens_ms"] = arrays["decided_ms"] + rng.exponential(5.0, (r, n))
    arrays["released_blocks_ms"] = arrays["decided_ms"] + rng.exponential(20.0, (r, n))
    order = np.argsort(rng.uniform(size=(r, n)), axis=1)
    scrambled = {}
    for name, x in arrays.items():  # row order[i] of the scrambled arrays holds decision i
        y = np.empty_like(x)
        np.put_along_axis(y, order if x.ndim == 2 else order[:, :, None], x, axis=1)
        scrambled[name] = y
    kw = dict(window=window, cost=cost, profile=THEORY if cost == "ttft" else None)
    heads = ("cand_tokens", "cand_blocks", "chosen")
    want_args, got_args = [arrays.pop(x) for x in heads], [scrambled.pop(x) for x in heads]
    want = poa_hat_from_candidates(*want_args, **arrays, **kw)
    got = poa_hat_from_candidates(*got_args, **scrambled, **kw, order=order)
    assert want.windows == got.windows == n // window
    np.testing.assert_array_equal(got.actual, want.actual)
    np.testing.assert_array_equal(got.opt, want.opt)
    assert np.all(got.opt <= got.actual)


def test_t_quantiles_are_scipy_stats_own():
    """_t_ppf uses scipy.special (a quicker import); its values are scipy.stats.t.ppf's to the bit."""
    for df in (1, 2, 5, 15, 63, 255, 4095):
        for p in (0.95, 0.975, 0.995, 1 - 0.05 / 38):
            assert intervals._t_ppf(p, df) == float(stats.t.ppf(p, df))


def test_p99_social_cost_is_the_cells_pooled_p99_and_pairs_policies_replica_by_replica():
    """social_cost = "p99_ttft": per replica a pseudo-value whose mean is the pooled P99 of all
    the cell's requests (not the mean of the replicas' own P99s), so the counterfactual PoA
    compares the cells' P99s; a policy that is the same one again gives exactly 1."""
    from poa_mc.stats import sketch
    from poa_mc.stats.counterfactual import counterfactual_poa, social_cost_per_replica
    from poa_mc.stats.quantiles import pooled_quantile

    rng = np.random.default_rng(8)
    x = rng.lognormal(3.0, 0.8, size=(16, 300)) * rng.lognormal(0.0, 0.3, size=(16, 1))

    def acc_of(v):
        first, hist = sketch.span(sketch.histograms(v))
        return {"hist_ttft": hist, "hist_ttft_lo": first, "min_ttft": v.min(axis=1), "max_ttft": v.max(axis=1)}

    social = social_cost_per_replica("p99_ttft", acc_of(x))
    pooled = pooled_quantile(acc_of(x)["hist_ttft"], 0.99, x.min(axis=1), x.max(axis=1), acc_of(x)["hist_ttft_lo"])
    assert social.mean() == pytest.approx(pooled.value, rel=1e-12)
    assert abs(pooled.value / np.quantile(x.ravel(), 0.99, method="inverted_cdf") - 1) <= sketch.RESOLUTION
    same = counterfactual_poa({"a": social, "b": social.copy()}, "a")
    assert same.poa == 1.0 and same.lo == 1.0 and same.hi >= 1.0
    slower = social_cost_per_replica("p99_ttft", acc_of(x * 1.2))
    cf = counterfactual_poa({"a": slower, "b": social}, "a")
    assert cf.poa == pytest.approx(1.2, rel=0.02) and cf.lo <= 1.2 <= cf.hi


@pytest.mark.parametrize("replicas", [8, 64])
def test_the_goodput_gain_interval_covers_the_true_ratio(replicas):
    """rate_gain_to_best on a known answer: goodputs G = E[num] / E[den] of 2.0 (selfish) and 2.4
    (a rival) on common streams, so the counterfactual gain is 1.2. Alone against that rival the
    interval covers 1.2 at its nominal 95% (within 3 Monte Carlo standard errors over 2,000 runs);
    with a third, worse policy (1.8) Bonferroni keeps it at or above nominal."""
    from poa_mc.stats.counterfactual import rate_gain_to_best

    rng = np.random.default_rng(11)
    trials, tol = 2000, 3 * math.sqrt(0.95 * 0.05 / 2000)

    def covered(two: bool) -> bool:
        u, v = rng.normal(0, 0.3, replicas), rng.normal(0, 0.3, replicas)
        selfish = (2.0 * (1 + u) + rng.normal(0, 0.2, replicas), 1 + v)
        rivals = {"p": (2.4 * (1 + u) + rng.normal(0, 0.2, replicas), 1 + v + rng.normal(0, 0.05, replicas))}
        if two:
            rivals["q"] = (1.8 * (1 + u) + rng.normal(0, 0.2, replicas), 1 + v)
        c = rate_gain_to_best(selfish, rivals)
        assert c.best_policy == "p" or c.poa == 1.0
        return c.lo <= 1.2 <= c.hi

    alone = sum(covered(False) for _ in range(trials)) / trials
    assert abs(alone - 0.95) <= tol, alone
    three = sum(covered(True) for _ in range(trials)) / trials
    assert three >= 0.95 - tol, three
