"""Simulation kernels: one source (source.py) compiled for the CPU (cpu.py) and CUDA (cuda.py)."""


def cuda_available() -> bool:
    """True when a CUDA device can be used (numba.cuda finds a driver and a GPU, or the simulator is on)."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure to load the driver means "no CUDA"
        return False
