"""What a routing decision costs on each candidate worker, in PoA-hat's cost units.

PoA-hat (poa_mc.stats.poa_hat) prices each decision on every candidate worker from the router's
recorded view (tokens and blocks there) with one of these functions, and the kernels' PoA-hat pass
takes its table of step times from here too (poa_mc.stats.poa_plan). They are numpy over whole
arrays, on the profiles' formulas (poa_mc.model.profiles), so one call prices every candidate.

Cost units (`cost`): `router` = Dynamo's cost  omega * tokens / block_size + blocks
(dimensionless); `ttft` = predicted TTFT in ms: the prefill of the tokens ahead of and including
the request, from the profile (polynomial: p2 T^2 + p1 T + p0, nothing for T = 0; theory profiles:
prefill_ms * T / isl), plus the first decode step (d0, or decode_ms), so a fully cached request
still costs a step. Both are nondecreasing in tokens and blocks (omega >= 0; the profile's p0, p1,
p2 are >= 0), so under slot pricing their PoA-hat is >= 1 by construction. `observed` = the paper's flavour: ACTUAL
is each request's observed TTFT (ms, queueing, transfer and decode admission included) and OPT
uses the `ttft` predictions, so the ratio also grows with everything the router's cost model does
not see (it explodes past saturation); ACTUAL and OPT are then in different models and there is
no PoA-hat >= 1 guarantee under either pricing.
"""

from __future__ import annotations

import numpy as np

from poa_mc.model.profiles import decode_ms, prefill_ms
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.stats.input_checks import _bad_entry


def router_cost(tokens: np.ndarray, blocks: np.ndarray, block_size: int, overlap_weight: float) -> np.ndarray:
    """Dynamo's KV-router cost: omega * tokens / block_size + blocks."""
    return overlap_weight * tokens / block_size + blocks


def prefill_ms_cost(tokens: np.ndarray, profile: ProfileSpec, isl: np.ndarray | None = None) -> np.ndarray:
    """Predicted prefill time (ms) of `tokens` uncached tokens (no time for zero tokens): the
    profile's pass time (poa_mc.model.profiles.prefill_ms, the kernels' formula) for a polynomial or aic
    profile; for a theory profile, whose pass serves one request, the share tokens / isl of one
    request's service."""

    t = np.asarray(tokens, dtype=np.float64)
    at = _bad_entry(t, False)
    if at is not None:  # the profile's pass would price NaN tokens as no pass at all (0 ms)
        raise ValueError(f"prefill_ms_cost: tokens at {at} is {t[at]}; token counts must be finite")
    if profile.pass_timed():
        return np.asarray(prefill_ms(profile, t), dtype=np.float64)
    if isl is None:
        raise ValueError("theory profiles need the request's isl to count requests ahead")
    ms = profile.prefill_ms * t / np.maximum(np.asarray(isl, dtype=np.float64)[..., None], 1.0)
    return np.where(t > 0, ms, 0.0)


def recomputed_tokens(isl: np.ndarray, block_size: int) -> np.ndarray:
    """Tokens a fully cached prompt still computes where vLLM caps a prefix hit below the prompt's
    last token (cluster.recompute_last_block): its last block, isl - ((isl - 1) // B) B."""
    n = np.asarray(isl, dtype=np.int64)
    return n - ((n - 1) // block_size) * block_size


def predicted_ttft_ms(
    tokens: np.ndarray,
    profile: ProfileSpec,
    isl: np.ndarray | None = None,
    *,
    block_size: int = 64,
    recompute_last_block: bool = False,
) -> np.ndarray:
    """Predicted TTFT (ms) on a worker: the prefill of `tokens` uncached tokens plus the first decode
    step (the profile's step time at an empty cache, a lower bound). With recompute_last_block (and
    `isl`), a worker is never priced below the last block the engine recomputes for a fully cached
    prompt, as the engine charges it (a prefill pass, then the step); without it a fully cached
    request costs the step alone."""
    t = np.asarray(tokens, dtype=np.float64)
    if recompute_last_block and isl is not None:
        floor = recomputed_tokens(isl, block_size).astype(np.float64)
        t = np.maximum(t, floor[..., None] if floor.ndim and floor.ndim < t.ndim else floor)

    first_step = decode_ms(profile, 0.0, 16384, 64)  # at an empty cache the capacity does not matter
    return prefill_ms_cost(t, profile, isl) + first_step


def predicted_step_ms(blocks: np.ndarray, profile: ProfileSpec, kv_blocks: int, block_size: int) -> np.ndarray:
    """Predicted time (ms) of a request's first decode step on a decode worker holding `blocks`
    active blocks, its own included (the prefill_first decode decision's ttft flavour: the
    prefill is done, what is left is a step over the worker's context). Non-decreasing in blocks."""

    b = np.asarray(blocks, dtype=np.float64)
    return np.asarray(decode_ms(profile, np.maximum(b, 0.0) * block_size, kv_blocks, block_size), dtype=np.float64)
