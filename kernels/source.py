"""Assembles the simulation from its modules for one compilation target.

`build(jit)` is the single kernel source: cpu.py passes numba.njit, cuda.py passes
numba.cuda.jit(device=True), and the same Python functions become both targets.
"""

from . import cache, cluster, heap, replica, rng, router
from ._ns import Namespace


def build(jit) -> Namespace:
    r = rng.build(jit)
    c = cache.build(jit)
    ro = router.build(jit, r, c)
    h = heap.build(jit)
    cl = cluster.build(jit, r, c, ro, h)
    rep = replica.build(jit, r, c, ro, h, cl)
    return Namespace(rng=r, cache=c, router=ro, heap=h, cluster=cl, replica=rep, simulate_replica=rep.simulate_replica)
