"""poa-mc: Monte Carlo Price of Anarchy for disaggregated LLM serving."""

from setuptools import find_packages, setup

setup(
    name="poa-mc",
    version="0.3.0",
    description="GPU-accelerated Monte Carlo estimator of the Price of Anarchy in disaggregated LLM serving",
    python_requires=">=3.10",
    packages=find_packages(include=["poa_mc", "poa_mc.*"]),
    package_data={"poa_mc.data": ["grids/*.toml", "traces/*", "profiles/*.json", "profiles/NOTICE", "benchmarks/*"]},
    install_requires=[
        "numpy>=1.26",
        "numba>=0.60",
        "polars>=1.0",
        "click>=8.1",
        "matplotlib>=3.8",
        "scipy>=1.11",
        "rich>=13",
    ],
    extras_require={
        # pick the CuPy wheel that matches the driver's CUDA major version. numba-cuda's cu12 extra
        # brings the CUDA 12.9 wheels: NVVM and ptxas, which compile the kernels for sm_90 and
        # sm_100 with no GPU (tests/test_ptx.py), with cuda-bindings 12.9. Pinned: numba-cuda 0.30.0
        # beside cuda-bindings 12.9 failed to import here (bench/NOTES.md); 0.30.4 is what the last
        # device run used (bench/RESULTS.md) and compiles the kernels on this machine
        "gpu": ["numba-cuda[cu12]==0.30.4", "cupy-cuda12x>=13"],
        "gpu-cuda13": ["numba-cuda[cu13]==0.30.4", "cupy-cuda13x>=14"],
        # aiconfigurator, to build aic timing tables (poa-mc profiles build-aic); ~600 MB with pandas, pyarrow
        "aic": ["aiconfigurator-core>=0.12,<0.13"],
        "dev": ["pytest>=8", "ruff>=0.5", "import-linter>=2.1", "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.25"],
    },
    entry_points={"console_scripts": ["poa-mc=poa_mc.cli.main:entry"]},
)
