"""Assembles the simulation from its modules for one compilation target.

`build(jit)` is the single kernel source: cpu.py passes numba.njit, cuda.py passes
numba.cuda.jit(device=True), and the same Python functions become both targets.
"""

from . import cache, cluster, heap, replica, rng, router
from ._ns import Namespace


def build(jit, jit_small=None) -> Namespace:
    r = rng.build(jit, jit_small)
    c = cache.build(jit, jit_small)
    ro = router.build(jit, r, c, jit_small)
    h = heap.build(jit, jit_small)
    cl = cluster.build(jit, r, c, ro, h, jit_small)
    rep = replica.build(jit, r, c, ro, h, cl)
    return Namespace(rng=r, cache=c, router=ro, heap=h, cluster=cl, replica=rep, simulate_replica=rep.simulate_replica)
