"""poa-mc: Monte Carlo Price of Anarchy for disaggregated LLM serving."""

# The package's face for notebooks: `poa_mc.load(DIR)` opens a run (poa_mc.io.load)
from poa_mc.io.load import Run, load
from poa_mc.version import __version__

__all__ = ["Run", "__version__", "load"]
