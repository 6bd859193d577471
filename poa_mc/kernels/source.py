"""Assembles the simulation from its modules for one compilation target.

`build(jit)` is the single kernel source: cpu.py passes numba.njit, cuda.py passes
numba.cuda.jit(device=True), and the same Python functions become both targets.
"""

from . import (
    batch,
    blocks,
    cache,
    client,
    controller,
    decode,
    heap,
    links,
    loop,
    meters,
    placement,
    planner,
    poa_hat,
    prefill,
    queues,
    replay,
    requests,
    rng,
    router,
    schedule,
    tally,
    tiers,
    timing,
)  # fmt: skip
from ._ns import Namespace


def build(jit, jit_inline=None, lean: bool = False, fixed=None) -> Namespace:
    """`jit_inline` compiles the per-event functions (each called from one or two places). The CPU
    target inlines them at Numba's IR level: a call there passes ~15 array structs of ~11 words
    each, and removing those calls made the engine 1.5x faster for about 10 s more compilation
    (bench/NOTES.md). NVVM inlines device functions by itself, so CUDA passes its plain `jit`.

    `lean=True` builds the same simulation for cells without lower KV tiers, a replayed trace or a
    load schedule: those features' branches are constants there and compile out of the inlined event loop
    (a smaller loop the CPU runs about 15% faster, bench/RESULTS.md). A cell gives the same results
    from either build; poa_mc/kernels/cpu.py picks the lean one for the cells it can run.

    `fixed` (the CPU's poa_mc/kernels/fixed_rows.fixed_last) compiles the rows' widths as constants."""
    r = rng.build(jit)
    tr = tiers.build(jit, jit_inline, enabled=not lean)
    c = cache.build(jit, tr, jit_inline)
    ro = router.build(jit, r, c, tr, jit_inline)
    h = heap.build(jit)
    ctl = controller.build(jit)
    pl = planner.build(jit)
    tm = timing.build(jit, jit_inline)
    rp = replay.build(jit, r, enabled=not lean)
    mt = meters.build(jit, jit_inline)
    qu = queues.build(jit, jit_inline)
    bl = blocks.build(jit, jit_inline)
    cl = client.build(jit, mt, jit_inline)
    sc = schedule.build(jit, h, enabled=not lean)
    rq = requests.build(jit, r, c, ro, h, pl, rp, mt, bl, cl, sc, jit_inline)
    lk = links.build(jit, mt)
    dc = decode.build(jit, c, ctl, pl, tm, mt, qu, bl, rq, lk, jit_inline)
    plc = placement.build(jit, r, c, ro, ctl, tm, qu, bl, dc, jit_inline)
    b = batch.build(jit, ro, qu, dc, plc)
    pf = prefill.build(jit, tr, c, ro, ctl, tm, mt, qu, bl, dc, plc, b, jit_inline)
    lp = loop.build(jit, r, tr, h, ctl, pl, rp, cl, sc, rq, dc, plc, b, pf, jit_inline, fixed=fixed)
    ta = tally.build(jit, jit_inline)
    ph = poa_hat.build(jit, jit_inline)
    return Namespace(
        rng=r, tiers=tr, replay=rp, cache=c, client=cl, router=ro, heap=h, controller=ctl, planner=pl, timing=tm,
        meters=mt, schedule=sc, links=lk, queues=qu, blocks=bl, requests=rq, decode=dc, placement=plc, batch=b,
        prefill=pf, loop=lp, tally=ta, poa_hat=ph, simulate_replica=lp.simulate_replica, tally_rows=ta.tally_rows,
        replica_sums=ph.replica_sums,
    )  # fmt: skip
