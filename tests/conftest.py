import os
import tempfile
import warnings

import numpy as np
import pytest

# the CUDA simulator multiplies uint64 on numpy scalars, which warns on the intended wrap-around
warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
os.environ.setdefault("MPLBACKEND", "Agg")
# runs in the tests must not teach `poa-mc validate` this machine's speed (poa_mc/run/speed.py)
os.environ.setdefault("POA_MC_SPEED_FILE", os.path.join(tempfile.mkdtemp(prefix="poa-mc-speed-"), "speed.json"))


def mean_and_se(per_replica: np.ndarray) -> tuple[float, float]:
    """Mean across independent replicas and its standard error (replicas are i.i.d.; requests are not)."""
    x = np.asarray(per_replica, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


@pytest.fixture
def se_check():
    def check(per_replica: np.ndarray, expected: float, z: float = 4.0) -> tuple[float, float]:
        m, se = mean_and_se(per_replica)
        assert abs(m - expected) <= z * se, f"mean {m:.5f} vs theory {expected:.5f}: {abs(m - expected) / se:.1f} SE"
        return m, se

    return check
