"""PoA-hat on the host: the estimator's definition, and its sums from a cell's recorded columns.

This module holds the estimator as the reduction works it out (`poa_hat_from_candidates`,
`windowed_poa`, the `PoaHat` sums and their interval). Not to be confused with the kernels'
poa_mc/kernels/poa_hat.py, which holds the window solver and the pass that works the same sums out
inside the simulation; this module's compiled path runs that solver too, so both give the same
bits. The estimator's pieces live beside it: the load bookkeeping (poa_mc.stats.window_load), the
assignments (poa_mc.stats.assignment), the prices (poa_mc.stats.predicted_costs), the input
checks (poa_mc.stats.input_checks), the gather into decision order (poa_mc.stats.gather).

PoA-hat (the paper's estimator), per replica, over windows of `window` consecutive routing
decisions in arrival order (a trailing partial window is dropped):

* realized cost of request r: the router's cost of the worker it chose, as recorded at its
  decision, i.e. including the load that earlier decisions of the same window put there;
  ACTUAL of a window = sum of its realized costs;
* OPT of a window = min-cost assignment of the window's requests to (worker, slot) columns;
  `pricing` says what a request pays in a slot:

  - `slot` (default): the j-th request (j = 1, 2, ...) that OPT puts on worker w pays the load of
    the j - 1 before it, as ACTUAL does. Exact prices would depend on *which* requests precede
    (no longer a linear assignment), so each earlier request is charged a_w, the smallest load
    (tokens and blocks separately) that any of the window's requests the router sent to w added
    there (if it sent none, the smallest over all the window's requests). Request i in slot j of w
    pays cost(max(f_tok + (j-1) a_w_tok, 0), max(f_blk + (j-1) a_w_blk, 0)), where f = recorded
    value minus the load the window's earlier decisions added to w, *not* clipped (the clip comes
    after the slot term, so the price stays <= the recorded cost even where a completion during
    the window left rec below that load). Every worker has `window` slots (the default), so
    whatever the router did is a feasible assignment, and for its j-th request on w the price is
    <= the recorded cost (the j - 1 before added at least (j-1) a_w). Hence, for every cost
    nondecreasing in tokens and blocks, OPT <= ACTUAL in every window and PoA-hat >= 1 by
    construction; with identical requests the prices are exact, so a router that was optimal
    scores exactly 1. What it measures: how much the router's assignment costs over the best
    re-assignment (and re-ordering) of the same requests, seen from the window's starting state,
    when each co-located request is charged the smallest load seen on that worker; a relaxation
    (OPT is optimistic where the real requests would add more), so PoA-hat leans high, never
    below 1.
  - `frozen` (the paper's): the frozen cost of r on w is the recorded cost minus the load the
    window's earlier decisions added to w (their uncached prompt tokens and new blocks), clipped
    at 0, i.e. what r would have cost on w had the window started with it, and every slot of w
    charges it (each worker's column repeated `slots` times, default ceil(window / K)). OPT
    ignores the congestion it creates itself and the slot cap can make the router's own
    assignment infeasible, so the ratio may fall below 1 (four requests all sent to a worker
    that costs 1 for each, against 3 elsewhere, give 4 / 8 = 0.5), as the paper observed.

  In both, request-specific terms (r's own prompt, r's prefix overlap with w) are kept exactly as
  recorded. Completions during the window: given each decision's time and when the load it booked
  leaves its worker (`decided_ms`, `released_tokens_ms`, `released_blocks_ms`; reduce passes them),
  only the earlier load still there at a decision is taken off, and under slot pricing the j-th
  request on w is charged max(j - 1 - T_w, 0) earlier loads, T_w being the router's requests on w
  whose load was gone by the window's last decision (its j-th request on w still saw at least
  that many), which keeps OPT <= ACTUAL. Without the times every earlier load counts as present:
  at low load, where requests finish inside a window, OPT then undoes load that had already left
  and PoA-hat inflates (5.3 at C = 1 on a 1P/4D dynamo-mocker cell before reduce passed them).
* PoA-hat of a replica = sum ACTUAL / sum OPT over its windows; the cell's estimate is the ratio of
  sums over all replicas with the log-delta interval. With a single candidate worker (K = 1) there
  is no choice, hence no game: PoA-hat is undefined (`PoaHat.defined` False, NaN estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.stats.assignment import Pricer, slot_priced_opt, window_opt
from poa_mc.stats.gather import take_rows
from poa_mc.stats.input_checks import _require_recorded
from poa_mc.stats.intervals import _NAN_ESTIMATE, Estimate, ratio_interval
from poa_mc.stats.predicted_costs import predicted_step_ms, predicted_ttft_ms, router_cost
from poa_mc.stats.window_load import _load_before, _min_added, _transient, freeze_load

# poa_mc.kernels.cpu is imported where it is called: importing it builds the CPU kernels' dispatchers.


@dataclass(frozen=True)
class PoaHat:
    actual: np.ndarray  # (R,) sum of realized costs over the replica's windows
    opt: np.ndarray  # (R,) sum of OPT over the replica's windows
    windows: int  # windows per replica (0 when undefined)
    defined: bool = True  # False when there is no choice to assess (a single candidate worker)

    @staticmethod
    def undefined(replicas: int) -> PoaHat:
        """PoA-hat of a cell whose decisions had one candidate: no game, no number."""
        nan = np.full(replicas, math.nan)
        return PoaHat(nan, nan.copy(), 0, defined=False)

    def estimate(self, level: float = 0.95) -> Estimate:
        """Ratio of sums with its log-delta interval; NaN when undefined or without windows."""
        if not self.defined or self.windows == 0:
            return _NAN_ESTIMATE
        return ratio_interval(self.actual, self.opt, level)

    def per_replica(self) -> np.ndarray:
        if not self.defined:
            return np.full(self.actual.shape, math.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                self.opt > 0, self.actual / np.where(self.opt > 0, self.opt, 1), np.where(self.actual > 0, np.inf, 1.0)
            )


def _actual(realized: np.ndarray, chosen: np.ndarray, window: int) -> np.ndarray:
    """(R,) sum over each replica's full windows of the chosen workers' realized costs."""
    r, n, _ = realized.shape
    m = (n // window) * window
    ch = chosen[:, :m].astype(np.int64)
    return np.take_along_axis(realized[:, :m], ch[:, :, None], axis=2)[:, :, 0].sum(axis=1)


def windowed_poa(realized: np.ndarray, frozen: np.ndarray, chosen: np.ndarray, window: int, slots: int = 0) -> PoaHat:
    """PoA-hat sums from cost matrices (frozen pricing: one price per worker, every slot).

    realized, frozen: (R, N, K) costs of each decision on each candidate worker; chosen: (R, N).
    ACTUAL of a window = sum of realized[r, n, chosen]; OPT = min-cost assignment on `frozen`.
    slots = 0 means ceil(window / K). K = 1 gives an undefined PoaHat.
    """
    r, n, k = frozen.shape
    if k == 1:
        return PoaHat.undefined(r)
    nw = n // window
    slots = slots or -(-window // k)
    if nw == 0:
        return PoaHat(np.zeros(r), np.zeros(r), 0)
    m = nw * window
    _require_recorded((("realized cost", np.asarray(realized)[:, :m], False),), window)
    opt = window_opt(frozen[:, :m].reshape(r * nw, window, k), slots, windows_per_replica=nw)
    return PoaHat(_actual(realized, chosen, window), opt.reshape(r, nw).sum(axis=1), nw)


def _pricer(
    cost: str,
    block_size: int,
    overlap_weight: float,
    profile: ProfileSpec | None,
    kv_blocks: int = 16384,
    recompute_last_block: bool = False,
) -> Pricer:
    """The cost of (tokens, blocks) on a worker, for the `router` and the predicted-TTFT flavours
    (`decode_step` / `observed_step`: the prefill_first decode decision, priced by its first step)."""
    if cost == "router":
        return lambda tok, blk, isl: router_cost(tok, blk, block_size, overlap_weight)
    prof = profile or ProfileSpec()
    if cost in ("ttft", "observed"):
        return lambda tok, blk, isl: predicted_ttft_ms(
            tok, prof, isl, block_size=block_size, recompute_last_block=recompute_last_block
        )
    if cost in ("decode_step", "observed_step"):
        return lambda tok, blk, isl: predicted_step_ms(blk, prof, kv_blocks, block_size)
    raise ValueError(f"unknown PoA-hat cost {cost!r}")


def _step_table(
    cost: str,
    blocks: np.ndarray,
    added: np.ndarray,
    slots: int,
    profile: ProfileSpec | None,
    kv_blocks: int,
    block_size: int,
) -> np.ndarray | None:
    """predicted_step_ms of 0, 1, 2, ... blocks, up to the most any slot of a window can price
    (the largest recorded count plus slots - 1 of the largest load), for the step flavours
    (decode_step, observed_step): their prices are a function of a whole number of blocks, so one
    table per call replaces the step times of every slot of every window. None for the other
    flavours, or when the counts are not finite or too many to tabulate."""
    if cost not in ("decode_step", "observed_step") or not np.size(blocks):
        return None
    top = float(np.nanmax(blocks)) if np.isfinite(blocks).any() else math.nan
    most = max(top, 0.0) + (slots - 1) * max(float(np.max(added)), 0.0) if np.size(added) else top
    if not math.isfinite(most) or most >= 1 << 22:
        return None
    prof = profile or ProfileSpec()
    return predicted_step_ms(np.arange(int(most) + 1, dtype=np.float64), prof, kv_blocks, block_size)


def _slot_sums(tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen):
    """PoA-hat under slot pricing with the load frozen by decision and release times, straight from
    the recorded arrays, in compiled code: tok, blk (R, N, K) (any strides), chosen, add_*, dec,
    rel_* (R, N); order (R, N) the decisions in window order (each replica's row a permutation of
    range(N)). The price is the router cost, or with `step` (not empty) the tabulated step
    (poa_mc/kernels/poa_hat.py: window_opt); the realized cost of a decision is its price on the recorded view, or with
    `seen` (R, N) (not empty) the observed one. Returns (OPT of each window (R, nw), the realized
    cost of each windowed decision (R, nw * window)). Each window's load before each decision
    (_load_before), smallest loads (_min_added) and requests gone by its last decision
    (_transient) are worked out window by window with the numpy functions' arithmetic (sums of
    whole numbers: exact in any order), so the numbers are those of the generic path to the bit;
    that path builds (W, n, n) and (W, n, K) temporaries and gathers every array into decision
    order first (bench/RESULTS.md). An OPT or realized cost is NaN where a price is not finite, a
    load negative or a block count off the table (the caller then takes the generic path)."""
    from poa_mc.kernels.cpu import slot_sums

    args = (tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen)
    return slot_sums(*args)


def poa_hat_from_candidates(
    cand_tokens: np.ndarray,
    cand_blocks: np.ndarray,
    chosen: np.ndarray,
    *,
    added_tokens: np.ndarray,
    added_blocks: np.ndarray,
    window: int,
    slots: int = 0,
    cost: str = "router",  # router | ttft | observed | decode_step | observed_step
    block_size: int = 64,
    overlap_weight: float = 1.0,
    profile: ProfileSpec | None = None,
    isl: np.ndarray | None = None,
    freeze: bool = True,
    ttft_ms: np.ndarray | None = None,
    pricing: str = "slot",  # slot | frozen
    decode_kv_blocks: int = 16384,
    decided_ms: np.ndarray | None = None,
    released_tokens_ms: np.ndarray | None = None,
    released_blocks_ms: np.ndarray | None = None,
    recompute_last_block: bool = False,
    order: np.ndarray | None = None,
) -> PoaHat:
    """PoA-hat of one cell from the router's recorded view (see the module docstring).

    cand_tokens, cand_blocks: (R, N, K) as the engine records them; chosen: (R, N);
    added_tokens, added_blocks: (R, N) load each decision put on its worker (its uncached prompt
    tokens and new blocks, >= 0). pricing: `slot` (default; OPT <= ACTUAL for the router and ttft
    costs) or `frozen` (the paper's). slots = 0 means `window` under slot pricing (every assignment
    the router could make stays feasible; fewer slots void the OPT <= ACTUAL guarantee) and
    ceil(window / K) under frozen pricing. freeze=False turns all load accounting off: every slot
    of a worker is priced at the recorded cost. K = 1 gives an undefined PoaHat.
    recompute_last_block (the cluster's): the ttft flavours price a prompt the router sees fully
    cached at the last block the engine recomputes (predicted_ttft_ms). order (R, N), when given,
    is the order of the decisions (each row a permutation of range(N)): windows follow it instead
    of the arrays' order.
    """
    if pricing not in ("slot", "frozen"):
        raise ValueError(f"unknown PoA-hat pricing {pricing!r} (slot or frozen)")
    price = _pricer(cost, block_size, overlap_weight, profile, decode_kv_blocks, recompute_last_block)
    observed = cost in ("observed", "observed_step")
    if observed and ttft_ms is None:
        raise ValueError("cost='observed' needs the observed ttft_ms (R, N)")
    r, n, k = cand_tokens.shape
    if k == 1:
        return PoaHat.undefined(r)
    # every recorded input a price or a realized cost is made of, checked before anything is priced
    ttft_flavour = cost in ("ttft", "observed")
    _require_recorded(
        (
            # finite only: the router's view can read below 0 (the every-path cells record
            # -1,092 tokens on some worker), and pricing clips what it charges at 0
            ("cand_tokens", cand_tokens, False),
            ("cand_blocks", cand_blocks, False),
            ("added_tokens", added_tokens, True),
            ("added_blocks", added_blocks, True),
            ("ttft_ms", ttft_ms if observed else None, False),
            ("isl", isl if ttft_flavour else None, True),
        ),
        window,
        order,
    )
    times = (decided_ms, released_tokens_ms, released_blocks_ms)
    nw = n // window
    slots_n = slots or window
    compiled = pricing == "slot" and freeze and nw and slots_n * k >= window and all(x is not None for x in times)
    step = (
        _step_table(cost, cand_blocks, added_blocks, slots_n, profile, decode_kv_blocks, block_size)
        if compiled
        else None
    )
    if compiled and (cost == "router" or step is not None):
        # the default flavour and the step ones, in compiled code from the recorded arrays (the
        # same numbers)
        rows = np.ascontiguousarray(np.broadcast_to(np.arange(n), (r, n)) if order is None else order, dtype=np.int64)
        seen = np.ascontiguousarray(ttft_ms, dtype=np.float64) if cost == "observed_step" else np.empty((0, 0))
        opt, real = _slot_sums(
            np.asarray(cand_tokens, dtype=np.float64), np.asarray(cand_blocks, dtype=np.float64),
            *(np.ascontiguousarray(x, dtype=np.int64) for x in (chosen, added_tokens, added_blocks)),
            *(np.ascontiguousarray(x, dtype=np.float64) for x in times),
            rows, int(window), int(slots_n), float(overlap_weight), float(block_size),
            np.empty(0) if step is None else step, seen,
        )  # fmt: skip
        if not np.isnan(opt).any():
            return PoaHat(real.sum(axis=1), opt.sum(axis=1), nw)
    if order is not None:  # the generic path takes every array in decision order
        cand_tokens, cand_blocks, chosen, added_tokens, added_blocks, isl, ttft_ms, *times = (
            None if x is None else take_rows(x, order)
            for x in (cand_tokens, cand_blocks, chosen, added_tokens, added_blocks, isl, ttft_ms, *times)
        )
        decided_ms, released_tokens_ms, released_blocks_ms = times

    if observed:
        realized = np.broadcast_to(np.asarray(ttft_ms, dtype=np.float64)[:, :, None], cand_tokens.shape)
    else:
        realized = price(cand_tokens, cand_blocks, isl)

    if pricing == "frozen":
        if freeze:
            f_tok = freeze_load(cand_tokens, chosen, added_tokens, window, decided_ms, released_tokens_ms)
            f_blk = freeze_load(cand_blocks, chosen, added_blocks, window, decided_ms, released_blocks_ms)
        else:
            f_tok, f_blk = cand_tokens, cand_blocks
        return windowed_poa(realized, price(f_tok, f_blk, isl), chosen, window, slots)

    slots = slots or window
    if nw == 0:
        return PoaHat(np.zeros(r), np.zeros(r), 0)
    m = nw * window
    actual = _actual(realized, chosen, window)
    if not freeze:
        recorded = realized if not observed else price(cand_tokens, cand_blocks, isl)
        opt = window_opt(recorded[:, :m].reshape(r * nw, window, k), slots, windows_per_replica=nw)
        return PoaHat(actual, opt.reshape(r, nw).sum(axis=1), nw)

    if (np.asarray(added_tokens)[:, :m] < 0).any() or (np.asarray(added_blocks)[:, :m] < 0).any():
        raise ValueError("slot pricing needs added_tokens and added_blocks >= 0 (load a decision put on a worker)")
    shape = (r * nw, window, k)
    tok = np.asarray(cand_tokens, dtype=np.float64)[:, :m].reshape(shape)
    blk = np.asarray(cand_blocks, dtype=np.float64)[:, :m].reshape(shape)
    f_tok = tok - _load_before(chosen, added_tokens, window, k, decided_ms, released_tokens_ms).reshape(shape)
    f_blk = blk - _load_before(chosen, added_blocks, window, k, decided_ms, released_blocks_ms).reshape(shape)
    a_tok = _min_added(chosen, added_tokens, window, k).reshape(r * nw, k)
    a_blk = _min_added(chosen, added_blocks, window, k).reshape(r * nw, k)
    isl_w = None if isl is None else np.asarray(isl, dtype=np.float64)[:, :m].reshape(r * nw, window)
    opt = slot_priced_opt(
        f_tok,
        f_blk,
        a_tok,
        a_blk,
        price,
        slots,
        isl_w,
        windows_per_replica=nw,
        transient_tok=_transient(chosen, window, k, decided_ms, released_tokens_ms).reshape(r * nw, k),
        transient_blk=_transient(chosen, window, k, decided_ms, released_blocks_ms).reshape(r * nw, k),
        router=(overlap_weight, block_size) if cost == "router" else None,
    )
    return PoaHat(actual, opt.reshape(r, nw).sum(axis=1), nw)
