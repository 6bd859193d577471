"""Routing policies over a contiguous range of candidate workers [lo, lo + k).

The router decides from its own bookkeeping, as Dynamo's does: per worker the uncached prompt
tokens routed but not yet prefilled (WI_APT), the blocks held by its in-flight requests (WI_AB),
and the prefix chains it caches (read from the cache arrays: the router sees cache events as
they happen). Dynamo's cost of worker w for a request of `isl` tokens, `pblk` prompt blocks and
`ov_w` cached leading blocks there:
    tokens_w = APT_w + isl - ov_w * B,  blocks_w = AB_w + pblk - ov_w,
    cost_w = omega * tokens_w / B + blocks_w.
With `cluster.router_blocks = "dynamo"` (P_DEDUP) the blocks are Dynamo's ActiveSequences count
where its router assumes KV reuse (aggregated and decode_first workers): a block held by several
of the router's in-flight requests on w counts once, so a request adds the blocks its group's
in-flight requests there do not hold yet: blocks_w = AB_w + pblk - sh_w (shared_active), whatever
w caches; AB_w is then the requests' own blocks plus, per group in flight there, the longest
prefix among its requests (kept until the group's last request there leaves). Its callers pass
g = -1 where Dynamo assumes no reuse (a disaggregated decode router), and a disaggregated prefill
router books nothing (poa_mc/kernels/placement.py: route).
Random draws use the replica key with a = the decision's index and b >= 100, a sub-stream that
no request attribute uses; the hash policy's owner draws use a = the prefix group and b >= 2^40.
`cw` is the worker whose cache a candidate reads (itself, or worker 0 for a shared prefill cache).
With lower KV tiers, ov_w is the credited overlap (`overlap`), a fraction of a block per lower-tier hit.
The llmd and sglang policies (other routers' rules, docs/engine.md "Other routers") read the same
state: the prefix the router has been told w caches (G1 only), and w's real queue, running set and
KV blocks, which those routers learn from the engines' metrics or their own request counts.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_LLMD_WK,
    F_LLMD_WP,
    F_LLMD_WQ,
    F_SGL_ABS,
    F_SGL_CACHE,
    F_SGL_REL,
    LLMD_PICK_RANDOM,
    LLMD_PICK_WEIGHTED,
    NWI,
    P_DKV,
    P_LLMD_PICK,
    P_NP,
    P_PKV,
    P_PSHARE,
    POL_HASH,
    POL_KV,
    POL_LLMD,
    POL_POWER_OF_D,
    POL_RANDOM,
    POL_ROUND_ROBIN,
    POL_SGLANG,
    RI_DECIDE,
    RI_RR,
    RI_RRD,
    SI_ABP,
    WI_AB,
    WI_APT,
    WI_CR1,
    WI_FREE,
    WI_NRUN,
    WI_PASS_K,
    WI_QN,
    WI_RG,
    WI_USED,
)

_B0 = 100
_HASH_B0 = 1 << 40
LLMD_MAX_PREFIX_BLOCKS = 256  # llm-d's prefix scorer matches at most this many blocks of a prompt


def build(jit, rng, cache, tiers, jit_inline=None):
    """`jit_inline` compiles the active-block bookkeeping, on every decision's path (source.py)."""
    jit_inline = jit_inline or jit
    rng_below = rng.below
    uniform = rng.uniform
    seen_overlap = cache.seen_overlap  # the router decides from what it has been told
    tiered = tiers.tiered
    lower_beyond = tiers.lower_beyond

    @jit
    def overlap(wk_i, pc, r, cw, g, pfx):
        """The cached prefix blocks the router credits worker cw with: its G1 blocks as it has been
        told of them; with lower tiers (newer Dynamo) each G1, G2, G3, G4 block counts WI_CR1.. / 1000,
        the lower tiers as they are (their changes are not delayed) past the G1 blocks it believes in."""
        v1 = seen_overlap(pc, r, cw, g, pfx)
        if not tiered(pc, wk_i, r, cw):
            return np.float64(v1)
        h2, h3, h4 = lower_beyond(pc, wk_i, r, cw, g, pfx, v1)
        return (
            np.int64(wk_i[r, cw, WI_CR1]) * v1 + np.int64(wk_i[r, cw, WI_CR1 + 1]) * h2
            + np.int64(wk_i[r, cw, WI_CR1 + 2]) * h3 + np.int64(wk_i[r, cw, WI_CR1 + 3]) * h4
        ) / 1000.0  # fmt: skip

    @jit_inline
    def shared_active(wk_i, r, w, g, pfx):
        """The blocks of a request of group g with `pfx` prefix blocks that the router's in-flight
        requests on worker w already hold (P_DEDUP; 0 without it): its group's longest prefix
        there, up to its own."""
        if wk_i.shape[2] == NWI or g < 0 or pfx <= 0:
            return np.int64(0)
        if np.int64(wk_i[r, w, WI_RG + 2 * g]) == 0:
            return np.int64(0)
        return min(pfx, np.int64(wk_i[r, w, WI_RG + 2 * g + 1]))

    @jit_inline
    def book_active(wk_i, slot_i, r, s, w, g, pfx, pblk, seen):
        """Request s's blocks join worker w's active blocks; returns what the decision added.
        Without P_DEDUP its blocks less `seen` (the prefix the router sees cached there); with it
        its blocks less shared_active, its group then counted in flight there."""
        if wk_i.shape[2] == NWI or g < 0:
            added = pblk - seen
            slot_i[r, s, SI_ABP] = added
            wk_i[r, w, WI_AB] += added
            return added
        added = pblk - shared_active(wk_i, r, w, g, pfx)
        c = WI_RG + 2 * g
        wk_i[r, w, c] += 1
        if pfx > np.int64(wk_i[r, w, c + 1]):
            wk_i[r, w, c + 1] = pfx
        slot_i[r, s, SI_ABP] = pblk - pfx  # its own blocks, which leave with it
        wk_i[r, w, WI_AB] += added
        return added

    @jit_inline
    def unbook_active(wk_i, slot_i, r, s, w, g):
        """Request s leaves worker w's active blocks (book_active's inverse); with P_DEDUP its
        group's prefix leaves with the group's last request there."""
        wk_i[r, w, WI_AB] -= np.int64(slot_i[r, s, SI_ABP])
        if wk_i.shape[2] == NWI or g < 0:
            return
        c = WI_RG + 2 * g
        wk_i[r, w, c] -= 1
        if np.int64(wk_i[r, w, c]) == 0:
            wk_i[r, w, WI_AB] -= wk_i[r, w, c + 1]
            wk_i[r, w, c + 1] = 0

    @jit
    def cand_tokens(wk_i, pc, r, w, cw, g, pfx, isl, bs):
        return np.int64(wk_i[r, w, WI_APT]) + isl - overlap(wk_i, pc, r, cw, g, pfx) * bs

    @jit
    def cand_blocks(wk_i, pc, r, w, cw, g, pfx, apfx, pblk):
        """The request's potential active blocks on w: less the prefix credited as cached (`pfx`,
        0 where the overlap is not credited), or with P_DEDUP less shared_active (`apfx`, its
        prefix blocks)."""
        if wk_i.shape[2] > NWI:
            return np.float64(np.int64(wk_i[r, w, WI_AB]) + pblk - shared_active(wk_i, r, w, g, apfx))
        return np.int64(wk_i[r, w, WI_AB]) + pblk - overlap(wk_i, pc, r, cw, g, pfx)

    @jit_inline
    def cand_costs(wk_i, pc, r, w, cw, g, pfx, apfx, isl, pblk, bs):
        """(cand_tokens, cand_blocks). Where no cached prefix is credited (pfx = 0, no lower
        tiers) the same values without the two calls and their cache lookups: the decode decision
        of prefill_first records every decode worker's costs so at each request."""
        if pfx == 0 and not tiered(pc, wk_i, r, cw):
            tok = np.float64(np.int64(wk_i[r, w, WI_APT]) + isl)
            if wk_i.shape[2] > NWI:
                return tok, np.float64(np.int64(wk_i[r, w, WI_AB]) + pblk - shared_active(wk_i, r, w, g, apfx))
            return tok, np.float64(np.int64(wk_i[r, w, WI_AB]) + pblk)
        return (
            np.float64(cand_tokens(wk_i, pc, r, w, cw, g, pfx, isl, bs)),
            np.float64(cand_blocks(wk_i, pc, r, w, cw, g, pfx, apfx, pblk)),
        )

    @jit
    def kv_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega):
        return omega * cand_tokens(wk_i, pc, r, w, w, g, pfx, isl, bs) / bs + cand_blocks(
            wk_i, pc, r, w, w, g, pfx, pfx, pblk
        )

    @jit
    def hash_owner(key, g, k):
        """The owner of prefix group g among k workers by rendezvous (highest random weight)
        hashing: each (group, worker) pair draws a weight, the largest wins. Every group has exactly
        one owner, and removing a worker moves only the groups it owned (a consistent hash). The
        weights come from the replica key, so each replica draws its own assignment and the
        estimates average over assignments rather than describing one."""
        best = 0
        best_u = -1.0
        for i in range(k):
            u = uniform(key, g, np.int64(_HASH_B0) + i)
            if u > best_u:
                best = i
                best_u = u
        return best

    @jit
    def load_of(wk_i, r, w, by_tokens):
        if by_tokens:
            return np.float64(np.int64(wk_i[r, w, WI_APT]))
        return np.float64(np.int64(wk_i[r, w, WI_AB]))

    # ---------------------------------------------------------------- the policies
    # One function each; `choose` dispatches on the kernel id of layout.POLICY_TABLE. A decision's
    # random draws use the sub-stream (key, dec): b = _B0 for a single draw, _B0 + 1 + i for
    # candidate i's sampling and _B0 + 1 + k + i for its tie-break.
    @jit_inline
    def keep_least(key, dec, k, i, w, v, best, best_v, ties):
        """One step of an argmin with ties broken uniformly at random (a reservoir over the tied
        set): candidate i (worker w) of k with value v against the best so far."""
        if best < 0 or v < best_v:
            return w, v, 1
        if v == best_v:
            ties += 1
            if uniform(key, dec, _B0 + 1 + k + i) * ties < 1.0:
                return w, best_v, ties
        return best, best_v, ties

    @jit
    def round_robin(rep_i, r, lo, k):
        i = rep_i[r, RI_RR] % k
        rep_i[r, RI_RR] += 1
        return lo + i

    @jit
    def round_robin_decode(rep_i, r, lo, k):
        """prefill_first's decode choice under round robin: Dynamo's decode client rotates over the
        decode workers too, with its own counter (docs/sources.md, "Round robin")."""
        rep_i[r, RI_DECIDE] += 1
        i = rep_i[r, RI_RRD] % k
        rep_i[r, RI_RRD] += 1
        return lo + i

    @jit
    def random_worker(key, dec, lo, k):
        return lo + rng_below(key, dec, np.int64(_B0), k)

    @jit
    def kv(wk_i, pc, r, key, dec, lo, k, g, pfx, isl, pblk, bs, omega, tau):
        """Dynamo's KV router: the least cost (module docstring), or its softmax at tau > 0."""
        if tau > 0.0:
            return tempered(wk_i, pc, r, key, dec, lo, k, g, pfx, isl, pblk, bs, omega, tau, False)
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for i in range(k):
            v = kv_cost(wk_i, pc, r, lo + i, g, pfx, isl, pblk, bs, omega)
            best, best_v, ties = keep_least(key, dec, k, i, lo + i, v, best, best_v, ties)
        return best

    @jit
    def least_loaded(wk_i, r, key, dec, lo, k, by_tokens):
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for i in range(k):
            v = load_of(wk_i, r, lo + i, by_tokens)
            best, best_v, ties = keep_least(key, dec, k, i, lo + i, v, best, best_v, ties)
        return best

    @jit
    def power_of_d(wk_i, r, key, dec, lo, k, d, by_tokens):
        """The least loaded of d distinct candidates drawn by selection sampling (Knuth's
        algorithm S)."""
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        picked = 0
        for i in range(k):
            if picked >= d:
                break
            if uniform(key, dec, _B0 + 1 + i) * (k - i) >= d - picked:
                continue
            picked += 1
            v = load_of(wk_i, r, lo + i, by_tokens)
            best, best_v, ties = keep_least(key, dec, k, i, lo + i, v, best, best_v, ties)
        return best

    @jit_inline
    def keep_least_at(key, dec, b, w, v, best, best_v, ties):
        """keep_least with its tie-break drawn from sub-stream b (a decision's second argmin draws
        apart from its first)."""
        if best < 0 or v < best_v:
            return w, v, 1
        if v == best_v:
            ties += 1
            if uniform(key, dec, b) * ties < 1.0:
                return w, best_v, ties
        return best, best_v, ties

    @jit
    def cache_of(ip, w):
        """The worker whose cache counters and prefix rows w uses (worker 0's for a shared prefill
        cache, P_PSHARE)."""
        if ip[P_PSHARE] == 1 and w < ip[P_NP]:
            return np.int64(0)
        return np.int64(w)

    @jit
    def waiting_of(wk_i, r, w):
        """Requests waiting on worker w, in no pass yet (vLLM's num_requests_waiting): a prefill
        worker's queue past the requests of its current pass, a decode worker's queue."""
        return np.int64(wk_i[r, w, WI_QN]) - np.int64(wk_i[r, w, WI_PASS_K])

    @jit
    def kv_usage(ip, wk_i, r, w):
        """The fraction of worker w's KV blocks held by requests (vLLM's kv_cache_usage_perc:
        cached blocks no request holds count as free, they are evictable)."""
        cw = cache_of(ip, w)
        cap = ip[P_PKV] if w < ip[P_NP] else ip[P_DKV]
        if cap <= 0:
            return 0.0
        return (np.int64(wk_i[r, cw, WI_USED]) - np.int64(wk_i[r, cw, WI_FREE])) / np.float64(cap)

    @jit
    def llmd_score(ip, fp, wk_i, pc, r, w, g, pfx, isl, bs, qmin, qmax):
        """llm-d's weighted score of worker w (docs/sources.md, "llm-d's endpoint picker"), each
        scorer in [0, 1]: prefix blocks matched over the prompt's whole blocks (at most 256),
        1 - KV usage, and the waiting queue min-max normalised over the candidates (1 when all
        are equal). qmin, qmax: the candidates' fewest and most waiting requests."""
        total = min(isl // bs, np.int64(LLMD_MAX_PREFIX_BLOCKS))
        prefix = 0.0
        if total > 0:
            prefix = min(seen_overlap(pc, r, cache_of(ip, w), g, pfx), total) / np.float64(total)
        queue = 1.0
        if qmax > qmin:
            queue = (qmax - waiting_of(wk_i, r, w)) / np.float64(qmax - qmin)
        kv_free = min(max(1.0 - kv_usage(ip, wk_i, r, w), 0.0), 1.0)  # llm-d clamps every score to [0, 1]
        return fp[F_LLMD_WP] * prefix + fp[F_LLMD_WK] * kv_free + fp[F_LLMD_WQ] * queue

    @jit
    def llmd(ip, fp, wk_i, pc, r, key, dec, lo, k, g, pfx, isl, bs):
        """llm-d's scheduling profile: the weighted sum of the scorers, then its picker. max-score:
        the highest score, ties at random; random: any candidate alike, the scores unread;
        weighted-random: a candidate with probability proportional to its score (A-Res, the largest
        u^(1 / score): here the least -log(u) / score, the same order), uniform when no score is
        above 0 (every candidate then ties at +inf)."""
        pick = ip[P_LLMD_PICK]
        qmin = waiting_of(wk_i, r, lo)
        qmax = qmin
        for w in range(lo + 1, lo + k):
            q = waiting_of(wk_i, r, w)
            qmin = min(qmin, q)
            qmax = max(qmax, q)
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for i in range(k):
            if pick == LLMD_PICK_RANDOM:
                v = 0.0
            else:
                v = -llmd_score(ip, fp, wk_i, pc, r, lo + i, g, pfx, isl, bs, qmin, qmax)
                if pick == LLMD_PICK_WEIGHTED:
                    v = math.log(uniform(key, dec, _B0 + 1 + i)) / v if v < 0.0 else math.inf
            best, best_v, ties = keep_least(key, dec, k, i, lo + i, v, best, best_v, ties)
        return best

    @jit
    def sglang_load(wk_i, r, w):
        """SGLang's worker load, the router's requests in flight there: w's queued and running
        requests."""
        return np.int64(wk_i[r, w, WI_QN]) + np.int64(wk_i[r, w, WI_NRUN])

    @jit
    def sglang(ip, fp, wk_i, pc, r, key, dec, lo, k, g, pfx, isl, bs):
        """SGLang's cache-aware policy (docs/sources.md, "SGLang's cache-aware router"): when the
        loads are imbalanced (max - min > the absolute threshold and max > min times the relative
        one) the least loaded worker, the first of equals as Rust's min_by_key; else the worker with
        the longest prefix match if its match rate (matched over prompt tokens) is above
        cache_threshold, else the one whose cache holds the fewest blocks (its smallest tree), ties
        at random."""
        lmin = sglang_load(wk_i, r, lo)
        lmax = lmin
        least = lo
        for w in range(lo + 1, lo + k):
            v = sglang_load(wk_i, r, w)
            if v < lmin:
                lmin = v
                least = w
            lmax = max(lmax, v)
        if lmax - lmin > fp[F_SGL_ABS] and lmax > lmin * fp[F_SGL_REL]:
            return least
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for i in range(k):
            v = -np.float64(seen_overlap(pc, r, cache_of(ip, lo + i), g, pfx))
            best, best_v, ties = keep_least(key, dec, k, i, lo + i, v, best, best_v, ties)
        if -best_v * bs / np.float64(isl) > fp[F_SGL_CACHE]:
            return best
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for i in range(k):
            v = np.float64(np.int64(wk_i[r, cache_of(ip, lo + i), WI_USED]))
            best, best_v, ties = keep_least_at(key, dec, _B0 + 1 + 2 * k + i, lo + i, v, best, best_v, ties)
        return best

    @jit
    def choose(policy, wk_i, pc, rep_i, r, key, lo, k, g, pfx, isl, pblk, bs, omega, tau, d, by_tokens, ip, fp):
        """The global index of the chosen worker. `by_tokens` picks the load that least_loaded and
        power_of_d compare: queued prefill tokens (prefill workers) or active blocks (decode).
        ip, fp: the cell's parameters (the llmd and sglang policies read their settings and the
        workers' KV capacity there)."""
        dec = rep_i[r, RI_DECIDE]
        rep_i[r, RI_DECIDE] = dec + 1
        if k == 1:
            return lo
        if policy == POL_LLMD:
            return llmd(ip, fp, wk_i, pc, r, key, dec, lo, k, g, pfx, isl, bs)
        if policy == POL_SGLANG:
            return sglang(ip, fp, wk_i, pc, r, key, dec, lo, k, g, pfx, isl, bs)
        if policy == POL_KV:
            return kv(wk_i, pc, r, key, dec, lo, k, g, pfx, isl, pblk, bs, omega, tau)
        if policy == POL_ROUND_ROBIN:
            return round_robin(rep_i, r, lo, k)
        if policy == POL_RANDOM:
            return random_worker(key, dec, lo, k)
        if policy == POL_HASH:
            return lo + hash_owner(key, g, k)
        if policy == POL_POWER_OF_D:
            return power_of_d(wk_i, r, key, dec, lo, k, d, by_tokens)
        return least_loaded(wk_i, r, key, dec, lo, k, by_tokens)

    @jit
    def fewest_blocks(wk_i, rep_i, r, key, lo, k, g, pfx):
        """Dynamo 1.x's decode choice in prefill_first: fewest potential active blocks (the
        request's own blocks are a constant, less what its group holds there with P_DEDUP), ties
        at random."""
        dec = rep_i[r, RI_DECIDE]
        rep_i[r, RI_DECIDE] = dec + 1
        best = lo
        best_v = np.int64(wk_i[r, lo, WI_AB]) - shared_active(wk_i, r, lo, g, pfx)
        ties = 1
        for i in range(1, k):
            v = np.int64(wk_i[r, lo + i, WI_AB]) - shared_active(wk_i, r, lo + i, g, pfx)
            if v < best_v:
                best = lo + i
                best_v = v
                ties = 1
            elif v == best_v:
                ties += 1
                if uniform(key, dec, _B0 + i) * ties < 1.0:
                    best = lo + i
        return best

    @jit
    def tempered_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega, blocks_only):
        if blocks_only:
            return np.float64(np.int64(wk_i[r, w, WI_AB]) - shared_active(wk_i, r, w, g, pfx))
        return kv_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega)

    @jit
    def tempered(wk_i, pc, r, key, dec, lo, k, g, pfx, isl, pblk, bs, omega, tau, blocks_only):
        """Dynamo's softmax at temperature tau > 0 (docs/sources.md, "Router cost and temperature"):
        p_w ~ exp(-(c_w - c_min) / ((c_max - c_min) tau)), uniform when all costs are equal. The
        cost is Dynamo's kv cost, or (blocks_only, the decode choice) the active blocks alone."""
        cmin = tempered_cost(wk_i, pc, r, lo, g, pfx, isl, pblk, bs, omega, blocks_only)
        cmax = cmin
        for w in range(lo + 1, lo + k):
            c = tempered_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega, blocks_only)
            cmin = min(cmin, c)
            cmax = max(cmax, c)
        if cmax == cmin:
            return lo + rng_below(key, dec, np.int64(_B0), k)
        scale = (cmax - cmin) * tau
        total = 0.0
        for w in range(lo, lo + k):
            total += math.exp(
                -(tempered_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega, blocks_only) - cmin) / scale
            )
        target = uniform(key, dec, np.int64(_B0)) * total
        acc = 0.0
        for w in range(lo, lo + k):
            acc += math.exp(-(tempered_cost(wk_i, pc, r, w, g, pfx, isl, pblk, bs, omega, blocks_only) - cmin) / scale)
            if target < acc:
                return w
        return lo + k - 1

    @jit
    def sample_blocks(wk_i, pc, rep_i, r, key, lo, k, g, pfx, tau):
        """The decode choice of prefill_first at temperature tau > 0: the softmax over the decode
        cost, potential active blocks (overlap weight 0; as in fewest_blocks)."""
        dec = rep_i[r, RI_DECIDE]
        rep_i[r, RI_DECIDE] = dec + 1
        return tempered(
            wk_i,
            pc,
            r,
            key,
            dec,
            lo,
            k,
            g,
            pfx,
            np.int64(0),
            np.int64(0),
            np.int64(1),
            0.0,
            tau,
            True,
        )

    @jit
    def decode_choice(wk_i, pc, rep_i, r, key, lo, k, g, pfx, isl, pblk, bs, omega_d, tau):
        """The decode choice of prefill_first. Dynamo forces the overlap weight to 0 there: the
        fewest active blocks (the request's own blocks are a constant), softmax at tau > 0. With
        omega_d > 0 (a decode router that chases overlap, for study) it is the kv choice over the
        decode workers' caches with that weight. (prefill.py spells these cases out on its hot
        path; this is the one place that says what the choice is.)"""
        if omega_d > 0.0:
            dec = rep_i[r, RI_DECIDE]
            rep_i[r, RI_DECIDE] = dec + 1
            if k == 1:
                return lo
            return kv(wk_i, pc, r, key, dec, lo, k, g, pfx, isl, pblk, bs, omega_d, tau)
        if tau > 0.0:
            return sample_blocks(wk_i, pc, rep_i, r, key, lo, k, g, pfx, tau)
        return fewest_blocks(wk_i, rep_i, r, key, lo, k, g, pfx)

    return Namespace(
        decode_choice=decode_choice,
        shared_active=shared_active,
        book_active=book_active,
        unbook_active=unbook_active,
        cand_tokens=cand_tokens,
        cand_costs=cand_costs,
        cand_blocks=cand_blocks,
        kv_cost=kv_cost,
        hash_owner=hash_owner,
        choose=choose,
        llmd_score=llmd_score,
        kv_usage=kv_usage,
        waiting_of=waiting_of,
        sglang_load=sglang_load,
        fewest_blocks=fewest_blocks,
        round_robin_decode=round_robin_decode,
        tempered=tempered,
        sample_blocks=sample_blocks,
    )
