"""Counter-based random numbers: (key, a, b) -> a uniform double, with no state to carry.

A replica's key is derived from (seed, stream, replica). Request attributes are drawn with
a = the request's identity (client and per-client count in a closed loop, arrival index when
open) and b = field, so every policy that shares a stream sees the same requests (common random
numbers), whatever the order its simulation asks for them. The mixer is SplitMix64's finaliser,
which passes BigCrush when fed a counter; only integer arithmetic, so both targets agree bit for bit.
"""

import math

import numpy as np

from ._ns import Namespace

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_S32 = np.uint64(32)
_INV53 = 1.0 / 9007199254740992.0
_HALF53 = 0.5 / 9007199254740992.0
_TWO_PI = 2.0 * math.pi


def build(jit):
    """Compile the random-number functions with `jit` (numba.njit or cuda.jit(device=True))."""

    @jit
    def mix64(z):
        # unsigned on purpose: a signed argument would shift arithmetically and bias every draw
        z = np.uint64(z)
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        return z ^ (z >> _S31)

    @jit
    def replica_key(seed, stream, replica):
        k = mix64(np.uint64(seed) * _GOLDEN + np.uint64(1))
        k = mix64(k ^ (np.uint64(stream) * _GOLDEN + np.uint64(2)))
        return mix64(k ^ (np.uint64(replica) * _GOLDEN + np.uint64(3)))

    @jit
    def uniform(key, a, b):
        """A double in (0, 1): never 0, so log() is safe."""
        z = mix64(np.uint64(key) ^ mix64(np.uint64(a) * _GOLDEN + np.uint64(b)))
        return np.float64(z >> _S11) * _INV53 + _HALF53

    @jit
    def exponential(key, a, b, mean):
        return -mean * math.log(uniform(key, a, b))

    @jit
    def normal(key, a, b):
        u1 = uniform(key, a, b)
        u2 = uniform(key, a, b + 1)
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)

    @jit
    def below(key, a, b, n):
        """An integer uniform on [0, n)."""
        i = np.int64(uniform(key, a, b) * n)
        if i >= n:
            i = n - 1
        return i

    @jit
    def client_request_id(client, k):
        return (np.int64(client) << np.int64(32)) + np.int64(k)

    return Namespace(
        mix64=mix64,
        replica_key=replica_key,
        uniform=uniform,
        exponential=exponential,
        normal=normal,
        below=below,
        client_request_id=client_request_id,
        S32=_S32,
    )
