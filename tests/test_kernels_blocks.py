"""Unit tests of poa_mc/kernels/blocks.py's block counts, called through the CPU build."""

import numpy as np
import pytest

from poa_mc.engine.packing import pack_params
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NP_I, P_B, P_BSHIFT
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec

K = cpu._K.blocks


@pytest.mark.parametrize("block_size", [1, 2, 16, 64, 512, 3, 48, 100])
def test_block_counts_by_shift_equal_floor_and_ceiling_division(block_size):
    """pack_params sets the shift for a power of two only; either way the counts are Python's
    floor and ceiling divisions, negative token counts included (full_blocks(length - 1) of an
    empty prompt)."""
    spec = CellSpec(cluster=ClusterSpec(block_size=block_size))
    ip = pack_params(spec, requests=10, warmup=0, seed=1, stream=0, record_candidates=False)[0]
    assert ip[P_B] == block_size
    assert (ip[P_BSHIFT] > 0) == (block_size & (block_size - 1) == 0)
    plain = np.zeros(NP_I, dtype=np.int64)
    plain[P_B] = block_size  # no shift: the division path
    for tokens in [-block_size - 1, -1, 0, 1, block_size - 1, block_size, block_size + 1, 4096, 123_457]:
        for p in (ip, plain):
            assert K.full_blocks(p, np.int64(tokens)) == tokens // block_size, (tokens, p[P_BSHIFT])
            assert K.ceil_blocks(p, np.int64(tokens)) == -(-tokens // block_size), (tokens, p[P_BSHIFT])
